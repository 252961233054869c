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

// TestStreamEventsReached: of n events of FreeAsync on one stream, the
// stream has reached the first k, the others being enqueued behind a host
// function that holds it back; StreamEvents.Query finds k, for every k, in
// at most 1 + ceil(log2 n) queries, and in one where k is n. With two
// streams, it answers for each apart.
func TestStreamEventsReached(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	if err := cudadrv.MemPools(); err != nil {
		t.Skip(err)
	}
	s1, s2 := newStream(t, ctx), newStream(t, ctx)
	free := func(s uintptr) cudadrv.Event {
		a := cudadrv.AllocAsync(ctx, 1<<10, s)
		require.Equal(t, cudadrv.Call{}, a.Call)
		f := cudadrv.FreeAsync(ctx, a.Ptr, s, cudadrv.Event{})
		require.Equal(t, cudadrv.Call{}, f.Call)
		require.False(t, f.Retired)
		return f.Event
	}
	const n = 9
	for k := 0; k <= n; k++ {
		t.Run(fmt.Sprintf("%d of %d reached", k, n), func(t *testing.T) {
			// s1 reaches k of its n events, s2 all of its two.
			var e1, e2 []cudadrv.Event
			for range k {
				e1 = append(e1, free(s1))
			}
			e2 = append(e2, free(s2), free(s2))
			defer cudatest.ReleaseStreams() // where the test stops before it does
			onThread(t, ctx, func() {
				require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s1))
				require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s2))
				require.Equal(t, cudadrv.Success, cudatest.HoldStream(s1))
			})
			for range n - k {
				e1 = append(e1, free(s1))
			}
			var q cudadrv.StreamEvents
			q.Add(e1)
			q.Add(e2)
			before := calls("cuEventQuery")
			require.Equal(t, cudadrv.Success, q.Query(ctx))
			queries := calls("cuEventQuery") - before
			got, r := q.Reached(0)
			assert.Equal(t, k, got, "the first stream's events reached")
			assert.Equal(t, cudadrv.Success, r)
			got, r = q.Reached(1)
			assert.Equal(t, 2, got, "the second stream's")
			assert.Equal(t, cudadrv.Success, r)
			most := 1 + (1 + bits.Len(n-1)) // the second stream's newest, then the first's bound
			if k == n {
				most = 2
			}
			assert.LessOrEqual(t, queries, uint64(most), "queries")

			cudatest.ReleaseStreams()
			onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s1)) })
			q.Reset()
			q.Add(e1)
			require.Equal(t, cudadrv.Success, q.Query(ctx))
			got, _ = q.Reached(0)
			assert.Equal(t, n, got, "after the synchronization")
			for _, e := range append(e1, e2...) {
				cudadrv.EventDestroy(e)
			}
		})
	}
}

// TestStreamEventsEmpty: a stream of no event is not added, and a query of
// nothing asks the driver nothing.
func TestStreamEventsEmpty(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	var q cudadrv.StreamEvents
	q.Add(nil)
	assert.Zero(t, q.Streams())
	before := calls("cuEventQuery") + calls("cuCtxGetCurrent")
	assert.Equal(t, cudadrv.Success, q.Query(ctx))
	assert.Equal(t, before, calls("cuEventQuery")+calls("cuCtxGetCurrent"), "nothing asked")
}

// TestStreamEventsCapture: a reading made while a capture is under way in
// global mode, from another thread, asks in relaxed mode: the capture
// survives, and the event is answered for.
func TestStreamEventsCapture(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	if err := cudadrv.MemPools(); err != nil {
		t.Skip(err)
	}
	s, capturing := newStream(t, ctx), newStream(t, ctx)
	a := cudadrv.AllocAsync(ctx, 1<<10, s)
	require.Equal(t, cudadrv.Call{}, a.Call)
	f := cudadrv.FreeAsync(ctx, a.Ptr, s, cudadrv.Event{})
	require.Equal(t, cudadrv.Call{}, f.Call)
	defer cudadrv.EventDestroy(f.Event)
	onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s)) })
	begun, done, ended := make(chan bool), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		r := cudatest.InContext(uintptr(ctx), func() {
			ok := cudatest.BeginCapture(capturing, cudatest.CaptureGlobal) == cudadrv.Success
			begun <- ok
			if !ok {
				return
			}
			<-done
			_, r := cudatest.EndCapture(capturing)
			assert.Equal(t, cudadrv.Success, r, "the capture survived the reading")
		})
		assert.Equal(t, cudadrv.Success, r)
	}()
	require.True(t, <-begun, "the capture begun")
	var q cudadrv.StreamEvents
	q.Add([]cudadrv.Event{f.Event})
	require.Equal(t, cudadrv.Success, q.Query(ctx))
	n, r := q.Reached(0)
	close(done)
	<-ended
	assert.Equal(t, 1, n)
	assert.Equal(t, cudadrv.Success, r)
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
			onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(c.stream)) })
			cudadrv.EventDestroy(f.Event)
		})
	}
}
