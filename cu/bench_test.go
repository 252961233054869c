//go:build cuda

package cu_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/memtrack/memtrack/cu"
	mcu "github.com/mumax/3/cuda/cu"
)

// BenchmarkMemAllocFree puts the drop-in's pair (MemAlloc and MemFree:
// cuMemAlloc with cuCtxGetDevice in one cgo call, Device.Track, the lookup
// by address, Tracked.FreeWith around cuMemFree) beside mumax's raw cu
// pair, in one run, on a thread with a current context. Compare them as a
// ratio, per size:
//
//	go test -tags cuda -run '^$' -bench MemAllocFree -count 10 ./cu | benchstat -col /pair -
//
// On a loaded machine the two sub-benchmarks see different load; the
// pair=interleaved one alternates blocks of 64 drop-in pairs and 64 raw
// pairs and reports each one's time per pair and their ratio, which load
// that drifts more slowly than a block cancels from.
func BenchmarkMemAllocFree(b *testing.B) {
	for _, size := range []int64{1 << 10, 1 << 20} {
		name := "size=" + strconv.FormatInt(size>>10, 10) + "KiB"
		b.Run(name+"/pair=dropin", func(b *testing.B) {
			inContext(b, 0, func() {
				b.ReportAllocs()
				for b.Loop() {
					cu.MemFree(cu.MemAlloc(size))
				}
			})
		})
		b.Run(name+"/pair=raw", func(b *testing.B) {
			inContext(b, 0, func() {
				b.ReportAllocs()
				for b.Loop() {
					mcu.MemFree(mcu.MemAlloc(size))
				}
			})
		})
		b.Run(name+"/pair=interleaved", func(b *testing.B) {
			inContext(b, 0, func() {
				const block = 64
				var dropin, raw time.Duration
				n := 0
				for b.Loop() {
					t0 := time.Now()
					for range block {
						cu.MemFree(cu.MemAlloc(size))
					}
					t1 := time.Now()
					for range block {
						mcu.MemFree(mcu.MemAlloc(size))
					}
					dropin += t1.Sub(t0)
					raw += time.Since(t1)
					n += block
				}
				b.ReportMetric(float64(dropin.Nanoseconds())/float64(n), "dropin-ns/pair")
				b.ReportMetric(float64(raw.Nanoseconds())/float64(n), "raw-ns/pair")
				b.ReportMetric(float64(dropin)/float64(raw), "ratio")
			})
		})
	}
}
