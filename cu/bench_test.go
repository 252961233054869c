//go:build cuda

package cu_test

import (
	"strconv"
	"testing"

	"go.uber.org/atomic"

	"github.com/memtrack/memtrack/cu"
	"github.com/memtrack/memtrack/internal/interleave"
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
// pair=interleaved one alternates blocks of 64 drop-in pairs, 64 raw pairs
// and 64 floor pairs (the raw pair with floorAlloc and floorFree between
// its calls) and reports the drop-in's time per pair, the raw pair's, and
// the ratios of the drop-in and of the floor to the raw pair, which load
// that drifts more slowly than a block cancels from.
// floorLines are the words of floorAlloc and floorFree, a cache line each.
type floorLines [4]struct {
	v atomic.Int64
	_ [56]byte
}

var lines floorLines

// floorAlloc and floorFree make the atomic read-modify-writes that the
// drop-in's figures cannot do without, and nothing else: on the allocation,
// the record's two adds (the bytes held, the live buffers; see
// tracker.Record) and one to enter the address in an index; on the free,
// the record's three (bytes, live buffers, cumulative freed bytes) and one
// to take the address out. Seven in all: the floor of any design with the
// same figures and a lookup by address that takes no lock. The
// device-side figure (two more in the drop-in) is left out, as a design
// could derive it from the record while no stream-ordered free is pending.
//
//go:noinline
func floorAlloc(l *floorLines) {
	l[0].v.Add(1024)
	l[1].v.Add(1)
	l[2].v.Add(1)
}

//go:noinline
func floorFree(l *floorLines) {
	l[0].v.Add(-1024)
	l[1].v.Add(-1)
	l[3].v.Add(1024)
	l[2].v.Add(-1)
}

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
				took, n := interleave.Run(b, block,
					func() {
						for range block {
							cu.MemFree(cu.MemAlloc(size))
						}
					},
					func() {
						for range block {
							mcu.MemFree(mcu.MemAlloc(size))
						}
					},
					func() {
						for range block {
							p := mcu.MemAlloc(size)
							floorAlloc(&lines)
							floorFree(&lines)
							mcu.MemFree(p)
						}
					},
				)
				dropin, raw, floor := took[0], took[1], took[2]
				b.ReportMetric(float64(dropin.Nanoseconds())/float64(n), "dropin-ns/pair")
				b.ReportMetric(float64(raw.Nanoseconds())/float64(n), "raw-ns/pair")
				b.ReportMetric(float64(dropin)/float64(raw), "ratio")
				b.ReportMetric(float64(floor)/float64(raw), "floor-ratio")
			})
		})
	}
}
