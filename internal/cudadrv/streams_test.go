//go:build cuda

package cudadrv_test

import (
	"fmt"
	"math/bits"
	"slices"
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
			events := append(slices.Clone(e1), e2...)
			ends := []int{len(e1), len(e1) + len(e2)}
			before := calls("cuEventQuery")
			q.Query(ctx, events, ends)
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
			q.Query(ctx, e1, []int{len(e1)})
			got, _ = q.Reached(0)
			assert.Equal(t, n, got, "after the synchronization")
			for _, e := range append(e1, e2...) {
				cudadrv.EventDestroy(e)
			}
		})
	}
}

// TestStreamEventsBadEnds: where the ends of the streams do not divide the
// events (a stream empty, or past the events), Query asks nothing about that
// stream or those after it, and answers for them that none is reached.
func TestStreamEventsBadEnds(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	if err := cudadrv.MemPools(); err != nil {
		t.Skip(err)
	}
	s := newStream(t, ctx)
	a := cudadrv.AllocAsync(ctx, 1<<10, s)
	require.Equal(t, cudadrv.Call{}, a.Call)
	f := cudadrv.FreeAsync(ctx, a.Ptr, s, cudadrv.Event{})
	require.Equal(t, cudadrv.Call{}, f.Call)
	defer cudadrv.EventDestroy(f.Event)
	onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s)) })
	events := []cudadrv.Event{f.Event, f.Event}
	for _, tc := range []struct {
		name    string
		ends    []int
		reached []int // per stream
		queries uint64
	}{
		{"well formed", []int{1, 2}, []int{1, 1}, 2},
		{"none", nil, nil, 0},
		{"a stream empty", []int{1, 1}, []int{1, 0}, 1},
		{"a stream past the events", []int{3}, []int{0}, 0},
		{"a stream before the one before", []int{2, 1}, []int{2, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q cudadrv.StreamEvents
			before := calls("cuEventQuery")
			q.Query(ctx, events, tc.ends)
			assert.Equal(t, tc.queries, calls("cuEventQuery")-before, "queries")
			for i, want := range tc.reached {
				n, r := q.Reached(i)
				assert.Equal(t, want, n, "stream %d", i)
				assert.Equal(t, cudadrv.Success, r)
			}
		})
	}
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
