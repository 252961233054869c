//go:build cuda

package memtrack

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The driver calls of the stream-ordered pair and of learning that its
// frees have executed, as the fake driver counts them
// (internal/cudatest.DriverCalls); on a real driver, which counts none,
// these tests skip.

// TestCUDAReapQueriesPerStream: a reading learns which frees have executed
// by asking each stream with frees pending for the event after its newest
// one first (cuEventQuery). Where the stream has reached it, every older
// free of the stream has executed too (an event captures all the work
// enqueued on its stream before it): one query retires them all. Where it
// has not, the boundary is found by bisection, in at most 1+⌈log2 n⌉
// queries for n frees. The device-side figure stays exact: it counts the
// frees held back, and no other. The buffers are allocated on the legacy
// default stream, so that no allocation takes a free of the test's streams
// over.
func TestCUDAReapQueriesPerStream(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	driverCalls(t) // skips on a driver that counts no calls
	const size = 1 << 10
	for _, c := range []struct {
		name           string
		streams, frees int // frees per stream
		heldBack       int // of them, the last ones, enqueued behind a host function that holds the stream back
	}{
		{"one stream, every free executed", 1, 32, 0},
		{"three streams, every free executed", 3, 16, 0},
		{"one stream, half executed", 1, 32, 16},
		{"one stream, the oldest executed", 1, 32, 31},
		{"one stream, none executed", 1, 32, 32},
		{"two streams, each half executed", 2, 16, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			quietSide(t, d)
			streams := make([]Stream, c.streams)
			for i := range streams {
				streams[i] = newStream(t, d)
			}
			before := d.MemoryStats()
			freeOn := func(s Stream, n int) {
				for range n {
					// Allocated on the legacy stream, so that no allocation
					// takes over a free of s (the pool's reuse on a stream).
					b, err := d.AllocAsync(size, DefaultStream)
					require.NoError(t, err)
					require.NoError(t, b.FreeAsync(s)) // ordered after the legacy stream's allocation
				}
			}
			freeing := driverCalls(t, "cuEventQuery")
			for _, s := range streams {
				freeOn(s, c.frees-c.heldBack)
				syncStream(t, d, s)
			}
			defer cudatest.ReleaseStreams() // where the test stops before it does
			for _, s := range streams {
				if c.heldBack > 0 {
					inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(s))) })
					freeOn(s, c.heldBack)
				}
			}
			require.Zero(t, freeing()["cuEventQuery"], "every free is pending until the reading: none was asked about")

			most := c.streams // one query per stream
			if c.heldBack > 0 {
				most = c.streams * (1 + bits.Len(uint(c.frees-1))) // 1 + ⌈log2 frees⌉ per stream
			}
			calls := driverCalls(t, "cuEventQuery")
			st := d.MemoryStats()
			queries := calls()["cuEventQuery"]
			t.Logf("%d frees on %d streams, %d held back: %d queries", c.streams*c.frees, c.streams, c.streams*c.heldBack, queries)
			assert.LessOrEqual(t, queries, uint64(most), "queries of the reading")
			assert.Equal(t, before.Held+int64(c.streams*c.heldBack*size), st.Held, "the device-side figure counts the frees held back, and only them")
			if q, _ := readingQueries(t, d); c.heldBack > 0 {
				assert.NotZero(t, q, "the frees held back stay pending: the next reading asks about them")
			} else {
				assert.Zero(t, q, "no free pending")
			}

			cudatest.ReleaseStreams()
			for _, s := range streams {
				syncStream(t, d, s)
			}
			calls = driverCalls(t, "cuEventQuery")
			assert.Equal(t, before.Held, d.MemoryStats().Held, "every free executed")
			if c.heldBack > 0 {
				assert.Equal(t, uint64(c.streams), calls()["cuEventQuery"], "the newest event of each stream retires the others")
			}
			q, _ := readingQueries(t, d)
			assert.Zero(t, q, "no free pending")
		})
	}
}

// TestCUDAEventRecordsPerFree: each FreeAsync records one event after its
// free (cuEventRecord), which the device-side figure needs to learn of each
// free apart (docs/streams.md says why no fewer will do), and reuses an
// event reached before: a program that reads its figures creates and
// destroys none once it runs.
func TestCUDAEventRecordsPerFree(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	driverCalls(t)
	quietSide(t, d)
	s := newStream(t, d)
	const n = 32
	round := func() {
		for range n {
			b, err := d.AllocAsync(1<<10, s)
			require.NoError(t, err)
			require.NoError(t, b.FreeAsync(s))
		}
		syncStream(t, d, s)
		d.MemoryStats()
	}
	round() // creates the events
	calls := driverCalls(t, "cuEventRecord", "cuEventCreate", "cuEventDestroy")
	round()
	assert.Equal(t, map[string]uint64{"cuEventRecord": n, "cuEventCreate": 0, "cuEventDestroy": 0}, calls())
}

// TestCUDADriverCallsPerPair counts, by entry point, the driver calls of
// the tracked stream-ordered pair (AllocAsync and FreeAsync, with a reading
// of the figures every 32 pairs, which learns that their frees executed)
// against the raw pair (cuMemAllocAsync and cuMemFreeAsync, in one cgo call
// each that makes the primary context current and restores it, as
// memtrack's do), on the legacy default stream and on a stream of one's
// own, from a thread whose current context is the device's primary one and
// from one with none current. It prints the table of docs/streams.md.
func TestCUDADriverCallsPerPair(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	driverCalls(t)
	_, ctx, err := cudaDeviceOf(d.Ordinal(), "test")
	require.NoError(t, err)
	quietSide(t, d)
	own := newStream(t, d)
	names := []string{"cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice", "cuStreamGetCtx", "cuStreamGetCaptureInfo",
		"cuStreamIsCapturing", "cuMemAllocAsync", "cuMemFreeAsync", "cuThreadExchangeStreamCaptureMode",
		"cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventDestroy"}
	const pairs, rounds = 32, 4
	for _, c := range []struct {
		stream  string
		s       Stream
		thread  string
		current uintptr // the thread's current context
	}{
		{"the legacy default stream", DefaultStream, "the primary context current", uintptr(ctx)},
		{"the legacy default stream", DefaultStream, "no context current", 0},
		{"a stream of its own", own, "the primary context current", uintptr(ctx)},
		{"a stream of its own", own, "no context current", 0},
	} {
		t.Run(c.stream+", "+c.thread, func(t *testing.T) {
			tracked, raw := map[string]uint64{}, map[string]uint64{}
			add := func(to, from map[string]uint64) {
				for n, v := range from {
					to[n] += v
				}
			}
			require.Equal(t, cudadrv.Success, cudatest.InContext(c.current, func() {
				for r := range rounds + 1 { // the first round creates the events
					calls := driverCalls(t, names...)
					for range pairs {
						b, err := d.AllocAsync(1<<10, c.s)
						require.NoError(t, err)
						require.NoError(t, b.FreeAsync(c.s))
					}
					made := calls()
					syncStream(t, d, c.s)
					calls = driverCalls(t, names...)
					d.MemoryStats() // learns that the round's frees executed
					if r > 0 {
						add(tracked, made)
						add(tracked, calls())
					}

					calls = driverCalls(t, names...)
					for range pairs {
						require.NoError(t, rawAllocFreeAsync(ctx, 1<<10, c.s, 0))
					}
					made = calls()
					syncStream(t, d, c.s)
					if r > 0 {
						add(raw, made)
					}
				}
			}))

			var table strings.Builder
			fmt.Fprintf(&table, "driver calls per pair, %s, %s:\n%-24s %8s %8s\n", c.stream, c.thread, "entry point", "tracked", "raw")
			var sumTracked, sumRaw uint64
			for _, n := range names {
				if tracked[n]+raw[n] > 0 {
					fmt.Fprintf(&table, "%-24s %8.3f %8.3f\n", n, float64(tracked[n])/(pairs*rounds), float64(raw[n])/(pairs*rounds))
				}
				sumTracked += tracked[n]
				sumRaw += raw[n]
			}
			fmt.Fprintf(&table, "%-24s %8.3f %8.3f\n", "all", float64(sumTracked)/(pairs*rounds), float64(sumRaw)/(pairs*rounds))
			// The crossings into C: one per operation, and the reading's one
			// per round; the raw pair's one per operation.
			crossTracked, crossRaw := 2+1.0/pairs, 2.0
			fmt.Fprintf(&table, "%-24s %8.3f %8.3f\n", "crossings into C", crossTracked, crossRaw)
			predictOnH200(&table, c.s == DefaultStream, tracked, raw, pairs*rounds, crossTracked, crossRaw)
			t.Log("\n" + table.String())

			// Per round of 32 pairs and a reading: the pair's two calls,
			// each making the context current (cuCtxGetCurrent, and
			// cuCtxSetCurrent there and back where it is not) and asking
			// the stream's capture (cuStreamIsCapturing); the stream's
			// context, where the stream is not a default one
			// (cuStreamGetCtx); one event recorded per free; and the
			// reading's one cgo call, in relaxed capture mode
			// (cuThreadExchangeStreamCaptureMode there and back), one query
			// for the stream; the pair's own calls leave the mode as the
			// program set it.
			switches := func(cgoCalls uint64) uint64 {
				if c.current == 0 {
					return 2 * cgoCalls
				}
				return 0
			}
			getCtx := uint64(0)
			if c.s != DefaultStream {
				getCtx = 2 * pairs
			}
			want := map[string]uint64{
				"cuCtxGetCurrent": 2*pairs + 1, "cuCtxSetCurrent": switches(2*pairs + 1), "cuStreamGetCtx": getCtx,
				"cuStreamIsCapturing": 2 * pairs, "cuMemAllocAsync": pairs, "cuMemFreeAsync": pairs,
				"cuThreadExchangeStreamCaptureMode": 2, "cuEventRecord": pairs, "cuEventQuery": 1,
			}
			wantRaw := map[string]uint64{
				"cuCtxGetCurrent": 2 * pairs, "cuCtxSetCurrent": switches(2 * pairs), "cuMemAllocAsync": pairs, "cuMemFreeAsync": pairs,
			}
			perRounds := func(m map[string]uint64) map[string]uint64 {
				out := map[string]uint64{}
				for n, v := range m {
					if v > 0 {
						out[n] = v * rounds
					}
				}
				return out
			}
			assert.Equal(t, perRounds(want), withoutZeros(tracked), "the tracked pair")
			assert.Equal(t, perRounds(wantRaw), withoutZeros(raw), "the raw pair")
		})
	}
}

// h200CallNs is what each driver call took on an H200 (driver 580.159.04,
// CUDA 13.0), called from C in a loop of its own: the medians of that
// run's driver-costs-and-graph-memory.txt (callcost.c's output),
// cuThreadExchangeStreamCaptureMode half of the pair there
// and back. cuEventCreate and cuEventDestroy, which a running program's
// pairs do not make, were not timed.
var h200CallNs = map[string]float64{
	"cuCtxGetCurrent": 12.3, "cuCtxSetCurrent": 25.3, "cuStreamGetCtx": 27.4, "cuStreamIsCapturing": 17.2,
	"cuStreamGetCaptureInfo": 32.9, "cuThreadExchangeStreamCaptureMode": 10.0, "cuEventRecord": 227.1,
	"cuEventQuery": 278.8, "cuStreamQuery": 297.9,
}

// h200PairNs is what cuMemAllocAsync and cuMemFreeAsync took together on
// the H200, by size and stream (callcost.c; the legacy stream was timed at
// 1 KiB alone, and its 1 MiB pair is taken as the own stream's), and
// h200CrossingNs the range of one crossing from Go into C there
// (cgo-cost.txt: an empty C function 46.8 ns, one calling cuCtxGetCurrent
// 41.3 ns).
var (
	h200PairNs = map[bool]map[string]float64{
		false: {"1 KiB": 746.7, "1 MiB": 635.5},
		true:  {"1 KiB": 707.2, "1 MiB": 635.5},
	}
	h200CrossingNs = [2]float64{41.3, 46.8}
)

// predictOnH200 writes the predicted cost of the tracked and the raw pair
// on the H200: each call per pair weighted by what it took there
// (h200CallNs, the pair's own h200PairNs), and the crossings into C at
// h200CrossingNs; then their ratio per size. memtrack's own Go code is not
// in it.
func predictOnH200(w *strings.Builder, legacy bool, tracked, raw map[string]uint64, pairs int, crossTracked, crossRaw float64) {
	calls := func(m map[string]uint64) (ns float64) {
		for n, v := range m {
			ns += float64(v) / float64(pairs) * h200CallNs[n]
		}
		return ns
	}
	ct, cr := calls(tracked), calls(raw)
	fmt.Fprintf(w, "predicted on the H200, beside the pair: calls %.1f ns tracked, %.1f ns raw; crossings at %.1f-%.1f ns\n",
		ct, cr, h200CrossingNs[0], h200CrossingNs[1])
	for _, size := range []string{"1 KiB", "1 MiB"} {
		pair := h200PairNs[legacy][size]
		lo := (pair + ct + crossTracked*h200CrossingNs[0]) / (pair + cr + crossRaw*h200CrossingNs[0])
		hi := (pair + ct + crossTracked*h200CrossingNs[1]) / (pair + cr + crossRaw*h200CrossingNs[1])
		fmt.Fprintf(w, "  %s: tracked %.0f-%.0f ns, raw %.0f-%.0f ns, tracked/raw %.3f-%.3f\n", size,
			pair+ct+crossTracked*h200CrossingNs[0], pair+ct+crossTracked*h200CrossingNs[1],
			pair+cr+crossRaw*h200CrossingNs[0], pair+cr+crossRaw*h200CrossingNs[1], min(lo, hi), max(lo, hi))
	}
}

// withoutZeros returns m without its entries of 0.
func withoutZeros(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for n, v := range m {
		if v > 0 {
			out[n] = v
		}
	}
	return out
}
