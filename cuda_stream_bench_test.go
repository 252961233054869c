//go:build cuda

package memtrack

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/memtrack/memtrack/internal/interleave"
)

// keepPoolReserved sets d's pool release threshold so that a
// synchronization returns nothing the pool reserved to the device (with the
// driver's default of 0, every synchronize does), and puts the old threshold
// back when tb ends.
func keepPoolReserved(tb testing.TB, d Device) {
	tb.Helper()
	p, err := d.Pool().Stats()
	if err != nil {
		tb.Fatal(err)
	}
	if err := d.Pool().SetReleaseThreshold(math.MaxInt64); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := d.Pool().SetReleaseThreshold(p.ReleaseThreshold); err != nil {
			tb.Error(err)
		}
	})
}

// BenchmarkCUDAAllocFreeAsync compares, in one run, a tracked stream-ordered
// allocation and free (Device.AllocAsync and Buffer.FreeAsync, with each way
// of learning that the free has executed) with the raw pair of driver calls
// (cuMemAllocAsync and cuMemFreeAsync, one cgo call each, in a context
// already current). Compare them as ratios, per size:
//
//	go test -tags cuda -run '^$' -bench CUDAAllocFreeAsync -count 10 | benchstat -col /pair -
//
// Every 256 iterations the stream is synchronized, so that the work
// enqueued stays bounded; each pair pays for that alike. The pool keeps what
// it reserved across those synchronizations (keepPoolReserved), so that no
// pair pays for returning memory to the device and taking it back.
func BenchmarkCUDAAllocFreeAsync(b *testing.B) {
	d, err := CUDA(0)
	if err != nil {
		b.Skip(err)
	}
	keepPoolReserved(b, d)
	s := newStream(b, d)
	for _, size := range []struct {
		name string
		n    int64
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		b.Run("size="+size.name+"/pair=raw", func(b *testing.B) {
			_, ctx, err := cudaDeviceOf(0, "bench")
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if err := rawAllocFreeAsync(ctx, size.n, s, 0); err != nil {
					b.Fatal(err)
				}
				if i++; i%256 == 0 {
					syncStream(b, d, s)
				}
			}
			syncStream(b, d, s)
		})
		b.Run("size="+size.name+"/pair=tracked", func(b *testing.B) {
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				buf, err := d.AllocAsync(size.n, s)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.FreeAsync(s); err != nil {
					b.Fatal(err)
				}
				if i++; i%256 == 0 {
					syncStream(b, d, s)
					d.MemoryStats() // reads the pending events, as any reader does
				}
			}
			syncStream(b, d, s)
			d.MemoryStats()
		})
		// The fake driver executes each stream on a thread of its own, so
		// that the time a pair takes depends on how the two cores are
		// shared at that moment: the separate sub-benchmarks above drift
		// apart by tens of percent. These alternate blocks of 64 raw, 64
		// raw-with-marker (the raw pair and an event recorded after the
		// free: the stream operation that learning when a free executes
		// takes), 64 tracked pairs and 64 busy pairs, each block ending
		// with a synchronize (and, tracked, the reading of the figures),
		// and report each one's time per pair and the ratios of tracked
		// to both. A busy pair is a raw-with-marker pair after
		// trackedWork of arithmetic, the host time that the tracked
		// pair's Go code takes: the control that shows what any host work
		// between the driver calls costs on the fake, whatever it does.
		// A fifth block, event, is the event's own cost apart: 64 times
		// the marker recorded on the stream again and queried at once
		// (cuEventRecord and cuEventQuery, one cgo call), in a context
		// already current, which a reading pays for a stream it finds
		// busy. A sixth, checked, is the raw pair with the driver calls
		// the tracked pair makes beside it (the stream's context for a
		// stream of one's own, its capture), in the same crossings: the
		// tracked pair's floor without memtrack's Go code, so that a GPU's
		// tracked/checked and checked/raw split the tracked pair's cost
		// between its Go code and its driver calls.
		// Each on a stream of its own (stream=own) and on the legacy
		// default stream (stream=legacy), whose handle asks no
		// cuStreamGetCtx of the tracked pair.
		for _, st := range []struct {
			name string
			s    Stream
		}{{"own", s}, {"legacy", DefaultStream}} {
			s := st.s
			b.Run("size="+size.name+"/pair=interleaved/stream="+st.name, func(b *testing.B) {
				_, ctx, err := cudaDeviceOf(0, "bench")
				if err != nil {
					b.Fatal(err)
				}
				const block = 64
				work := spinFor(trackedWork)
				if err := cudatest.Load(); err != nil {
					b.Fatal(err)
				}
				marker, r := cudatest.EventCreate(uintptr(ctx))
				if r != cudadrv.Success {
					b.Fatal(resultError("event", "", r))
				}
				defer cudatest.EventDestroy(marker)
				took, n := interleave.Run(b, block,
					func() { // raw
						for range block {
							if err := rawAllocFreeAsync(ctx, size.n, s, 0); err != nil {
								b.Fatal(err)
							}
						}
						syncStream(b, d, s)
					},
					func() { // raw-with-marker
						for range block {
							if err := rawAllocFreeAsync(ctx, size.n, s, marker); err != nil {
								b.Fatal(err)
							}
						}
						syncStream(b, d, s)
					},
					func() { // tracked
						for range block {
							buf, err := d.AllocAsync(size.n, s)
							if err != nil {
								b.Fatal(err)
							}
							if err := buf.FreeAsync(s); err != nil {
								b.Fatal(err)
							}
						}
						syncStream(b, d, s)
						d.MemoryStats()
					},
					func() { // raw-with-marker after busy work
						for range block {
							spin(work)
							if err := rawAllocFreeAsync(ctx, size.n, s, marker); err != nil {
								b.Fatal(err)
							}
						}
						syncStream(b, d, s)
					},
					func() { // event
						r := cudatest.InContext(uintptr(ctx), func() {
							for range block {
								if r := cudatest.RecordAgain(marker, uintptr(s)); r != cudadrv.Success && r != cudadrv.NotReady {
									b.Fatal(resultError("event", "", r))
								}
							}
						})
						if r != cudadrv.Success {
							b.Fatal(resultError("context", "", r))
						}
						syncStream(b, d, s)
					},
					func() { // checked
						for range block {
							p, r := cudatest.AllocAsyncChecked(uintptr(ctx), size.n, uintptr(s))
							if r == cudadrv.Success {
								r = cudatest.FreeAsyncChecked(uintptr(ctx), p, uintptr(s))
							}
							if r != cudadrv.Success {
								b.Fatal(resultError("checked pair", "", r))
							}
						}
						syncStream(b, d, s)
					},
				)
				raw, marked, tracked, busy, event, checked := took[0], took[1], took[2], took[3], took[4], took[5]
				b.ReportMetric(float64(raw.Nanoseconds())/float64(n), "raw-ns/pair")
				b.ReportMetric(float64(marked.Nanoseconds())/float64(n), "marked-ns/pair")
				b.ReportMetric(float64(tracked.Nanoseconds())/float64(n), "tracked-ns/pair")
				b.ReportMetric(float64(busy.Nanoseconds())/float64(n), "busy-ns/pair")
				b.ReportMetric(float64(event.Nanoseconds())/float64(n), "event-ns/pair")
				b.ReportMetric(float64(checked.Nanoseconds())/float64(n), "checked-ns/pair")
				b.ReportMetric(float64(tracked)/float64(checked), "ratio-to-checked")
				b.ReportMetric(float64(tracked)/float64(raw), "ratio")
				b.ReportMetric(float64(busy)/float64(marked), "busy-to-marked")
				b.ReportMetric(float64(tracked)/float64(marked), "ratio-to-marked")
			})
		}
	}
}

// BenchmarkCUDACrossing times one crossing from Go into C and back, the
// unit of docs/performance.md's predicted cost of the tracked pair: of a C
// function that does nothing (op=nothing), of one that calls the driver's
// cuCtxGetCurrent once (op=cuCtxGetCurrent), and of one that calls it ten
// times, per call (op=cuCtxGetCurrent-x10, ns/op divided by ten), which
// gives the driver call's own cost apart from the crossing's.
//
//	go test -tags cuda -run '^$' -bench CUDACrossing -count 5
func BenchmarkCUDACrossing(b *testing.B) {
	if _, err := CUDA(0); err != nil {
		b.Skip(err)
	}
	if err := cudatest.Load(); err != nil {
		b.Skip(err)
	}
	b.Run("op=nothing", func(b *testing.B) {
		for b.Loop() {
			cudatest.Nothing()
		}
	})
	for _, n := range []int{1, 10} {
		name := "op=cuCtxGetCurrent"
		if n > 1 {
			name += fmt.Sprintf("-x%d", n)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if r := cudatest.ThreadContextTimes(n); r != cudadrv.Success {
					b.Fatal(resultError("cuCtxGetCurrent", "", r))
				}
			}
		})
	}
}

// trackedWork is about the host time of the Go code of a tracked
// AllocAsync and FreeAsync on a 2-vCPU VM (the Device layer, the record
// and the device-side figure, without the driver calls), which
// BenchmarkCUDAAllocFree's tracked and backend pairs put at 120-150 ns.
const trackedWork = 150 * time.Nanosecond

// spinFor returns the argument of spin that keeps a core busy for about d.
func spinFor(d time.Duration) int {
	const n = 1 << 20
	best := time.Duration(1<<63 - 1)
	for range 5 {
		t0 := time.Now()
		spin(n)
		best = min(best, time.Since(t0))
	}
	return max(1, int(int64(n)*int64(d)/int64(max(best, 1))))
}

var spinSink int

// spin does n rounds of arithmetic that the compiler cannot drop.
//
//go:noinline
func spin(n int) {
	x := 0
	for i := range n {
		x += i * i
	}
	spinSink = x
}
