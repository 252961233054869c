//go:build cuda

package cudadrv_test

import (
	"fmt"
	"math/bits"
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countsCalls skips t where the driver counts no calls (a real one).
func countsCalls(t *testing.T) {
	t.Helper()
	if _, ok := cudatest.DriverCalls("cuInit"); !ok {
		t.Skip("the driver counts no calls: needs the fake driver of testdata/fakecuda")
	}
}

// calls returns how many calls of entry point name the process has made.
func calls(name string) uint64 {
	n, _ := cudatest.DriverCalls(name)
	return n
}

// mark records an event on stream s, held back (busy), by a reading: the
// question of a stream with frees after its events, which records one
// where the stream is not idle.
func mark(t *testing.T, ctx cudadrv.Context, s uintptr) cudadrv.Event {
	t.Helper()
	var r cudadrv.Readings
	r.Add(s, ctx, nil, true, true, cudadrv.Event{})
	require.Equal(t, cudadrv.Success, r.Read(ctx))
	_, idle, e, res := r.Answer(0)
	require.Equal(t, cudadrv.Success, res)
	require.False(t, idle, "the stream is held back")
	require.False(t, e.IsZero(), "an event recorded")
	return e
}

// TestReadingsReached: of n events recorded on one stream, the stream has
// reached the first k, the others being recorded behind a host function
// that holds it back; Readings finds k, for every k, in at most
// 1 + ceil(log2 n) queries, and in one where k is n. With two streams, it
// answers for each apart.
func TestReadingsReached(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	s1, s2 := newStream(t, ctx), newStream(t, ctx)
	const n = 9
	for k := 0; k <= n; k++ {
		t.Run(fmt.Sprintf("%d of %d reached", k, n), func(t *testing.T) {
			// s1 reaches k of its n events, s2 all of its two.
			defer cudatest.ReleaseStreams() // where the test stops before it does
			onThread(t, ctx, func() {
				require.Equal(t, cudadrv.Success, cudatest.HoldStream(s1))
				require.Equal(t, cudadrv.Success, cudatest.HoldStream(s2))
			})
			var e1, e2 []cudadrv.Event
			for range k {
				e1 = append(e1, mark(t, ctx, s1))
			}
			e2 = append(e2, mark(t, ctx, s2), mark(t, ctx, s2))
			cudatest.ReleaseStreams()
			onThread(t, ctx, func() {
				require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s1))
				require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s2))
				require.Equal(t, cudadrv.Success, cudatest.HoldStream(s1))
			})
			for range n - k {
				e1 = append(e1, mark(t, ctx, s1))
			}
			var r cudadrv.Readings
			r.Add(s1, ctx, e1, false, false, cudadrv.Event{})
			r.Add(s2, ctx, e2, false, false, cudadrv.Event{})
			before := calls("cuEventQuery")
			require.Equal(t, cudadrv.Success, r.Read(ctx))
			queries := calls("cuEventQuery") - before
			got, _, _, res := r.Answer(0)
			assert.Equal(t, k, got, "the first stream's events reached")
			assert.Equal(t, cudadrv.Success, res)
			got, _, _, res = r.Answer(1)
			assert.Equal(t, 2, got, "the second stream's")
			assert.Equal(t, cudadrv.Success, res)
			most := 1 + (1 + bits.Len(n-1)) // the second stream's newest, then the first's bound
			if k == n {
				most = 2
			}
			assert.LessOrEqual(t, queries, uint64(most), "queries")

			cudatest.ReleaseStreams()
			onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s1)) })
			r.Reset()
			r.Add(s1, ctx, e1, false, false, cudadrv.Event{})
			require.Equal(t, cudadrv.Success, r.Read(ctx))
			got, _, _, _ = r.Answer(0)
			assert.Equal(t, n, got, "after the synchronization")
			for _, e := range append(e1, e2...) {
				cudadrv.EventDestroy(e)
			}
		})
	}
}

// TestReadingsIdleOrRecord: a question of a stream with frees after its
// events asks whether it is idle (cuStreamQuery) once it has reached them
// all: where it is, nothing is recorded, and no event made; where it is
// held back, the spare given is recorded (or a new event, where none is
// given), and where recording is not asked, nothing is. A stream that has
// not reached its events is not queried: the event is recorded at once.
func TestReadingsIdleOrRecord(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	s := newStream(t, ctx)
	names := []string{"cuStreamQuery", "cuStreamIsCapturing", "cuEventRecord", "cuEventCreate", "cuEventQuery"}
	count := func() map[string]uint64 {
		m := map[string]uint64{}
		for _, n := range names {
			m[n] = calls(n)
		}
		return m
	}
	since := func(before map[string]uint64) map[string]uint64 {
		m := map[string]uint64{}
		for _, n := range names {
			if d := calls(n) - before[n]; d > 0 {
				m[n] = d
			}
		}
		return m
	}
	read := func(events []cudadrv.Event, ask, record bool, spare cudadrv.Event) (int, bool, cudadrv.Event) {
		var r cudadrv.Readings
		r.Add(s, ctx, events, ask, record, spare)
		require.Equal(t, cudadrv.Success, r.Read(ctx))
		reached, idle, e, res := r.Answer(0)
		require.Equal(t, cudadrv.Success, res)
		return reached, idle, e
	}

	before := count()
	_, idle, e := read(nil, true, true, cudadrv.Event{})
	assert.True(t, idle, "a stream with nothing enqueued")
	assert.True(t, e.IsZero())
	assert.Equal(t, map[string]uint64{"cuStreamIsCapturing": 1, "cuStreamQuery": 1}, since(before))

	defer cudatest.ReleaseStreams()
	onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(s)) })
	before = count()
	_, idle, e = read(nil, true, false, cudadrv.Event{})
	assert.False(t, idle)
	assert.True(t, e.IsZero(), "no record asked")
	assert.Equal(t, map[string]uint64{"cuStreamIsCapturing": 1, "cuStreamQuery": 1}, since(before))

	before = count()
	_, idle, made := read(nil, true, true, cudadrv.Event{})
	assert.False(t, idle)
	require.False(t, made.IsZero(), "a new event, recorded")
	assert.Equal(t, map[string]uint64{"cuStreamIsCapturing": 1, "cuStreamQuery": 1, "cuEventCreate": 1, "cuEventRecord": 1}, since(before))

	before = count()
	reached, idle, again := read([]cudadrv.Event{made}, true, true, made)
	assert.Zero(t, reached)
	assert.False(t, idle)
	assert.Equal(t, made, again, "the spare recorded")
	assert.Equal(t, map[string]uint64{"cuEventQuery": 1, "cuStreamIsCapturing": 1, "cuEventRecord": 1}, since(before),
		"the event not reached: recorded again without a query of the stream")

	cudatest.ReleaseStreams()
	onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s)) })
	reached, idle, e = read([]cudadrv.Event{made}, true, true, cudadrv.Event{})
	assert.Equal(t, 1, reached)
	assert.True(t, idle)
	assert.True(t, e.IsZero())
	cudadrv.EventDestroy(made)
}

// TestReadingsCapture: a stream that takes part in a capture is neither
// queried nor recorded on by a reading, which answers that nothing is
// known, and the capture ends with its graph, empty.
func TestReadingsCapture(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	s := newStream(t, ctx)
	onThread(t, ctx, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureGlobal))
		var r cudadrv.Readings
		r.Add(s, ctx, nil, true, true, cudadrv.Event{})
		before := calls("cuStreamQuery") + calls("cuEventRecord")
		require.Equal(t, cudadrv.Success, r.Read(ctx))
		reached, idle, e, res := r.Answer(0)
		assert.Equal(t, cudadrv.Success, res)
		assert.Zero(t, reached)
		assert.False(t, idle)
		assert.True(t, e.IsZero(), "nothing recorded in the capture")
		assert.Equal(t, before, calls("cuStreamQuery")+calls("cuEventRecord"))
		nodes, res := cudatest.EndCapture(s)
		assert.Equal(t, cudadrv.Success, res, "the capture survives")
		assert.Zero(t, nodes)
	})
}

// TestReadingsContextGone: where the context of a question cannot be made
// current (destroyed), that failure is its answer, after which its frees
// count as executed; the thread's context is put back.
func TestReadingsContextGone(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	own, r := cudatest.CtxCreate(0)
	require.Equal(t, cudadrv.Success, r)
	require.Equal(t, cudadrv.Success, cudatest.CtxDestroy(own))
	var rd cudadrv.Readings
	rd.Add(0, cudadrv.Context(own), nil, true, true, cudadrv.Event{})
	rd.Add(0, ctx, nil, true, true, cudadrv.Event{})
	onThread(t, 0, func() {
		require.Equal(t, cudadrv.Success, rd.Read(ctx))
		assert.Zero(t, current(t), "the thread's context put back")
	})
	_, _, _, res := rd.Answer(0)
	assert.NotEqual(t, cudadrv.Success, res, "the destroyed context")
	_, idle, _, res := rd.Answer(1)
	assert.Equal(t, cudadrv.Success, res)
	assert.True(t, idle)
}

// TestDefaultStreamContext: a default stream's handle names the default
// stream of the thread's current context, so the stream-ordered calls ask
// the driver for the stream's context (cuStreamGetCtx) only for a stream
// of one's own; each reports the stream's context.
func TestDefaultStreamContext(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	if err := cudadrv.MemPools(); err != nil {
		t.Skip(err)
	}
	own := newStream(t, ctx)
	for _, c := range []struct {
		name   string
		stream uintptr
		asks   uint64
	}{
		{"NULL", 0, 0},
		{"CU_STREAM_LEGACY", cudadrv.StreamLegacy, 0},
		{"CU_STREAM_PER_THREAD", cudadrv.StreamPerThread, 0},
		{"a stream of its own", own, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := calls("cuStreamGetCtx")
			a := cudadrv.AllocAsync(ctx, 1<<10, c.stream)
			require.Equal(t, cudadrv.Call{}, a.Call)
			assert.Equal(t, ctx, a.StreamCtx)
			assert.False(t, a.Foreign)
			f := cudadrv.FreeAsync(ctx, a.Ptr, c.stream, cudadrv.Event{})
			require.Equal(t, cudadrv.Call{}, f.Call)
			assert.Equal(t, ctx, f.StreamCtx)
			assert.Equal(t, 2*c.asks, calls("cuStreamGetCtx")-before)
			assert.Equal(t, c.stream == cudadrv.StreamPerThread, !f.Event.IsZero(), "an event after the free on the per-thread stream alone")
			onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(c.stream)) })
			if !f.Event.IsZero() {
				cudadrv.EventDestroy(f.Event)
			}
		})
	}
}
