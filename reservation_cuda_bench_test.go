//go:build cuda

package memtrack

import (
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
)

// BenchmarkCUDAMapUnmap compares, in one run, a tracked map and unmap of
// one granule (Reservation.Map and Reservation.Unmap: the reservation's
// checks, the one acquisition and release paths, and one cgo call each),
// the raw driver calls they wrap (cuMemCreate, cuMemMap, cuMemSetAccess;
// cuMemUnmap, cuMemRelease) on a thread whose context is current, and the
// tracked allocation and free of as many bytes:
//
//	go test -tags cuda -run '^$' -bench CUDAMapUnmap -count 10 | benchstat -col /pair -
func BenchmarkCUDAMapUnmap(b *testing.B) {
	d, err := CUDA(0)
	if err != nil {
		b.Skip(err)
	}
	g, err := d.MapGranularity()
	if err != nil {
		b.Skip(err)
	}
	r, err := d.Reserve(2 * g)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Release()
	b.Run("pair=tracked", func(b *testing.B) { benchMapPairs(b, r, g) })
	b.Run("pair=raw", func(b *testing.B) {
		if err := cudatest.Load(); err != nil {
			b.Skip(err)
		}
		_, c, err := openTable(KindCUDA).b.(*cudaBackend).device(0, "context")
		if err != nil {
			b.Fatal(err)
		}
		if res := cudatest.InContext(uintptr(c), func() { benchRawMapPairs(b, r.Base()+uintptr(g), g) }); res != cudadrv.Success {
			b.Fatal(res)
		}
	})
	b.Run("pair=alloc", func(b *testing.B) { benchAllocPairs(b, d.Alloc, g) })
}

// benchRawMapPairs maps size bytes at ptr with the raw driver calls and
// unmaps them, b.N times, in the thread's current context.
func benchRawMapPairs(b *testing.B, ptr uintptr, size int64) {
	for b.Loop() {
		h, res := cudatest.RawMap(0, ptr, size)
		if res != cudadrv.Success {
			b.Fatal(res)
		}
		if res := cudatest.RawUnmap(ptr, size, h); res != cudadrv.Success {
			b.Fatal(res)
		}
	}
}
