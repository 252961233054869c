//go:build cuda

package memtrack

import (
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
)

// BenchmarkCUDAAllocFree compares, in one run, a tracked allocation and free
// (Device.Alloc and Buffer.Free: the Device layer, the counters and one
// call of ours each, which switches to the primary context and back), the
// backend's calls alone, and the raw pair of driver calls (cuMemAlloc and
// cuMemFree, a cgo call each) on a thread whose context is already current. Compare them as ratios, per size:
//
//	go test -tags cuda -run '^$' -bench CUDAAllocFree -count 10 | benchstat -col /pair -
func BenchmarkCUDAAllocFree(b *testing.B) {
	d, err := CUDA(0)
	if err != nil {
		b.Skip(err)
	}
	for _, size := range []struct {
		name string
		n    int64
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		b.Run("size="+size.name+"/pair=tracked", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf, err := d.Alloc(size.n)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The backend's own calls without the Device layer: one cgo call
		// each, switching to the primary context and back.
		b.Run("size="+size.name+"/pair=backend", func(b *testing.B) {
			_, c, err := openTable(KindCUDA).b.(*cudaBackend).device(0, "context")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				ptr, r := cuAlloc(c, size.n)
				if r != (callResult{}) {
					b.Fatal(r)
				}
				if r := cuFree(c, ptr); r != (callResult{}) {
					b.Fatal(r)
				}
			}
		})
		b.Run("size="+size.name+"/pair=raw", func(b *testing.B) {
			_, c, err := openTable(KindCUDA).b.(*cudaBackend).device(0, "context")
			if err != nil {
				b.Fatal(err)
			}
			if err := cudatest.Load(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cudatest.InContext(uintptr(c), func() {
				for b.Loop() {
					p, r := cudatest.MemAlloc(size.n)
					if r != cudadrv.Success {
						b.Fatal(r)
					}
					if r := cudatest.MemFree(p); r != cudadrv.Success {
						b.Fatal(r)
					}
				}
			})
		})
	}
}
