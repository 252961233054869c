package held

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quiet raises h's peak to 1 MiB and back, so that no allocation of a test
// that holds less raises it (which would read the events first).
func (h *fig) quiet() {
	h.f.Add(1<<20, false)
	h.f.Drop(1<<20, false)
}

// TestReapPerStream: a reading asks the querier once, about each stream
// with frees pending, its frees in the stream's order, and retires those
// the stream has reached; the others stay pending, counted in the figure,
// and are asked about again by the next reading. Until the reading, every
// free is pending. Each retired free is kept, with its event, for reuse.
func TestReapPerStream(t *testing.T) {
	const size = 1 << 10
	for _, tc := range []struct {
		name    string
		streams []Stream
		frees   int // per stream
		ran     int // of them, the oldest, reached before the reading
	}{
		{"one stream, every free executed", []Stream{streamA}, 32, 32},
		{"three streams, every free executed", []Stream{streamA, streamB, streamC}, 16, 16},
		{"one stream, half executed", []Stream{streamA}, 32, 16},
		{"one stream, the oldest executed", []Stream{streamA}, 32, 1},
		{"one stream, none executed", []Stream{streamA}, 32, 0},
		{"two streams, each half executed", []Stream{streamA, streamB}, 16, 8},
		{"one handle in two contexts: two streams", []Stream{streamA, streamC}, 8, 4},
		{"a stream not ordered: each free asked alone", []Stream{unordered}, 8, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			h.quiet()
			events := map[Stream][]int{}
			for _, s := range tc.streams {
				for range tc.ran {
					events[s] = append(events[s], h.allocFree(s, size))
				}
				h.d.run(s)
			}
			for _, s := range tc.streams {
				for range tc.frees - tc.ran {
					events[s] = append(events[s], h.allocFree(s, size))
				}
			}
			nfrees := int64(len(tc.streams) * tc.frees)
			require.Equal(t, nfrees, h.f.npending.Load(), "every free is pending until the reading")
			require.Zero(t, h.q.queries, "no free asked about before the reading")

			left := int64(len(tc.streams) * (tc.frees - tc.ran))
			h.load("the reading", left*size, 1<<20, left, 1)
			var want [][]int
			for _, s := range slices.SortedFunc(slices.Values(tc.streams), func(a, b Stream) int {
				return byStream(&Free[int]{Stream: a}, &Free[int]{Stream: b})
			}) {
				if s.Ordered {
					want = append(want, events[s])
					continue
				}
				for _, e := range events[s] {
					want = append(want, []int{e})
				}
			}
			assert.Equal(t, want, h.q.asked, "each stream asked once, its frees in its order")
			assert.Equal(t, len(tc.streams)*tc.ran, h.spares(), "the retired kept, with their events")

			for _, s := range tc.streams {
				h.d.run(s)
			}
			queries := 1
			if left > 0 {
				queries++ // a reading with nothing pending asks nothing
			}
			h.load("after every stream ran", 0, 1<<20, 0, queries)
			assert.Equal(t, len(tc.streams)*tc.frees, h.spares())
			h.load("with nothing pending", 0, 1<<20, 0, queries)
		})
	}
}

// TestReapStreamOrder: frees of one stream pushed out of their stream's
// order (as goroutines that record their events in one order and push
// them in another do), and frees that waited from an earlier reading, are
// asked about in the order of their events' numbers, so that a stream
// that reached some retires exactly those.
func TestReapStreamOrder(t *testing.T) {
	const size = 1 << 10
	for _, tc := range []struct {
		name   string
		record int   // frees recorded, numbered 1..record along the stream
		ran    int   // of them, the oldest, reached before the reading
		push   []int // the order the frees are pushed in, by number
		first  int   // of them, pushed and read before the others are pushed
	}{
		{"in order", 4, 2, []int{1, 2, 3, 4}, 0},
		{"reversed", 4, 2, []int{4, 3, 2, 1}, 0},
		{"interleaved", 6, 3, []int{2, 1, 4, 3, 6, 5}, 0},
		{"a later free pushed first, read alone", 4, 0, []int{3, 1, 2, 4}, 1},
		{"the waiting after the new", 5, 3, []int{4, 5, 1, 2, 3}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			h.quiet()
			frees := make([]*Free[int], tc.record+1)
			for i := 1; i <= tc.record; i++ {
				h.f.Add(size, true)
				e, seq := h.d.record(streamA, 0)
				require.Equal(t, uint64(i), seq)
				frees[i] = &Free[int]{Event: e, Stream: streamA, Seq: seq, Size: size}
				if i == tc.ran {
					h.d.run(streamA)
				}
			}
			for k, i := range tc.push {
				if k == tc.first && k > 0 {
					h.f.Load()
				}
				h.f.Enqueue(frees[i])
			}
			cur, _ := h.f.Load()
			left := int64(tc.record - tc.ran)
			assert.Equal(t, left*size, cur, "the frees the stream has not reached, and no other")
			assert.Equal(t, left, h.f.npending.Load())
			var want []int
			for _, n := range frees[1:] {
				want = append(want, n.Event)
			}
			if tc.ran > 0 || tc.first == 0 {
				assert.Equal(t, [][]int{want}, h.q.asked, "the stream's frees, in its order")
			}
			h.d.run(streamA)
			h.load("after the stream ran", 0, -1, 0, h.q.queries+1)
		})
	}
}

// TestRetire: a free leaves the figure once its stream has reached its
// event, or once the driver cannot answer for it; its event is kept for
// reuse where it is of the device's own context and reached (or the
// device is lost: never recorded again), destroyed where it is of another
// context, and left alone where its query failed.
func TestRetire(t *testing.T) {
	const size = 1 << 10
	for _, tc := range []struct {
		name             string
		foreign, reached bool
		failed, lost     bool
		pending          bool // the free stays pending
		spare, destroyed bool
	}{
		{name: "reached", reached: true, spare: true},
		{name: "not reached", pending: true},
		{name: "of another context, reached", foreign: true, reached: true, destroyed: true},
		{name: "of another context, not reached", foreign: true, pending: true},
		{name: "its query failed", failed: true},
		{name: "of another context, its query failed", foreign: true, failed: true, destroyed: true},
		{name: "the device lost", lost: true, spare: true},
		{name: "of another context, the device lost", foreign: true, lost: true, destroyed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			h.quiet()
			h.f.Add(size, true)
			e := h.free(streamA, size, tc.foreign)
			if tc.reached {
				h.d.run(streamA)
			}
			if tc.failed {
				h.d.fail(e)
			}
			h.d.lost = tc.lost
			var left int64
			if tc.pending {
				left = 1
			}
			queries := 1
			if tc.lost {
				queries = 0 // Query found the device lost
			}
			h.load(tc.name, left*size, 1<<20, left, queries)
			assert.Equal(t, left*size, h.f.Pooled(), "the pooled part")
			_, destroyed := h.q.reads()
			if tc.destroyed {
				assert.Equal(t, []int{e}, destroyed)
			} else {
				assert.Empty(t, destroyed)
			}
			if !tc.spare {
				assert.Zero(t, h.spares())
				return
			}
			require.Equal(t, 1, h.spares())
			n := h.f.TakeSpare()
			assert.Equal(t, &Free[int]{Event: e}, n, "a spare keeps its event alone")
			assert.Nil(t, h.f.TakeSpare())
			h.f.PutSpare(n)
			h.d.lost = false
			h.allocFree(streamB, size)
			assert.Equal(t, 1, h.d.created, "the next free records the spare event again")
		})
	}
}

// TestExecuted: a free known to have executed at once (its stream was
// synchronized where its event could not be recorded) leaves the figure at
// once, asking nothing, and its event, never recorded, is kept for reuse,
// or destroyed where it is of another context.
func TestExecuted(t *testing.T) {
	const size = 1 << 10
	for _, tc := range []struct {
		name             string
		event, foreign   bool
		spare, destroyed bool
	}{
		{name: "no event"},
		{name: "an event", event: true, spare: true},
		{name: "an event of another context", event: true, foreign: true, destroyed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			h.quiet()
			h.f.Add(size, true)
			n := &Free[int]{Stream: streamA, Size: size, Foreign: tc.foreign}
			if tc.event {
				n.Event = h.d.newEvent()
			}
			h.f.Executed(n)
			assert.Zero(t, h.f.Pooled())
			assert.Equal(t, 0, h.q.queries)
			h.load(tc.name, 0, 1<<20, 0, 0)
			_, destroyed := h.q.reads()
			if tc.destroyed {
				assert.Equal(t, []int{n.Event}, destroyed)
			} else {
				assert.Empty(t, destroyed)
			}
			if tc.spare {
				assert.Equal(t, 1, h.spares())
			} else {
				assert.Zero(t, h.spares())
			}
		})
	}
}

// TestAddReaps: an addition that stays within the peak asks nothing; one
// that would raise it learns of executed frees first, so that the peak
// leaves out every free known to have executed and counts those that have
// not; with a peak scope open, every addition learns first.
func TestAddReaps(t *testing.T) {
	const size = 1 << 10
	for _, tc := range []struct {
		name     string
		peak     int64 // raised before, by an allocation freed at once
		ran      bool  // the stream reached the free pending
		scope    bool  // a peak scope is open
		add      int64
		queries  int
		cur, top int64 // the figure and its peak after the addition
	}{
		{name: "within the peak", peak: 4 * size, ran: true, add: size, queries: 0, cur: 2 * size, top: 4 * size},
		{name: "raising the peak, the free executed", ran: true, add: 2 * size, queries: 1, cur: 2 * size, top: 2 * size},
		{name: "raising the peak, the free pending", add: 2 * size, queries: 1, cur: 3 * size, top: 3 * size},
		{name: "within the peak, a scope open", peak: 4 * size, scope: true, add: size, queries: 1, cur: 2 * size, top: 4 * size},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			if tc.peak > 0 {
				h.f.Add(tc.peak, false)
				h.f.Drop(tc.peak, false)
			}
			h.allocFree(streamA, size)
			if tc.ran {
				h.d.run(streamA)
			}
			if tc.scope {
				sc := h.f.OpenScope() // reads first: the free's bytes leave
				defer func() { assert.NoError(t, h.f.CloseScope(sc)) }()
				tc.queries++
			}
			h.f.Add(tc.add, false)
			q, _ := h.q.reads()
			assert.Equal(t, tc.queries, q, "queries")
			assert.Equal(t, tc.cur, h.f.held.Current())
			assert.Equal(t, tc.top, h.f.held.Peak())
		})
	}
}

// TestScopes: a peak scope opens on the figure without the frees known to
// have executed; its peak, read or closed while open, learns of executed
// frees first; once closed, reading it asks nothing, and closing it again
// fails.
func TestScopes(t *testing.T) {
	const size = 1 << 10
	h := newFig(t)
	h.quiet()
	h.allocFree(streamA, size)
	h.d.run(streamA)
	sc := h.f.OpenScope()
	assert.Equal(t, 1, h.q.queries, "opening reads")
	assert.Equal(t, int64(0), h.f.ScopePeak(sc), "the scope starts without the executed free")
	h.allocFree(streamA, 2*size) // pending: the stream does not reach it
	require.Equal(t, 1, h.q.queries)
	h.f.Add(size, false)
	assert.Equal(t, 2, h.q.queries, "an addition with a scope open reads, though within the peak")
	assert.Equal(t, int64(3*size), h.f.ScopePeak(sc))
	assert.Equal(t, 3, h.q.queries, "the open scope's peak reads")
	h.d.run(streamA)
	require.NoError(t, h.f.CloseScope(sc))
	assert.Equal(t, 4, h.q.queries, "closing an open scope reads")
	h.allocFree(streamA, size) // pending
	assert.Equal(t, int64(3*size), h.f.ScopePeak(sc))
	assert.Error(t, h.f.CloseScope(sc), "closed twice")
	assert.Equal(t, 4, h.q.queries, "a closed scope reads nothing")
}

// TestResetPeak: the peak is reset to the figure without the frees known
// to have executed.
func TestResetPeak(t *testing.T) {
	const size = 1 << 10
	h := newFig(t)
	h.quiet()
	h.allocFree(streamA, size)
	h.allocFree(streamB, size)
	h.d.run(streamA)
	h.f.ResetPeak()
	assert.Equal(t, 1, h.q.queries)
	h.load("after the reset", size, size, 1, 2)
}

// TestPendingBound: where nothing reads the figure, Enqueue learns of
// executed frees itself once PendingBound wait, then at twice what its
// last reading left, so that the frees (and events) waiting stay bounded;
// a stream far behind raises the bound, and a reading that retires every
// free brings it back down.
func TestPendingBound(t *testing.T) {
	const size = 1 << 10
	// run makes a free loop on s, synchronizing it every PendingBound
	// frees, and returns the most frees that waited at once.
	run := func(h *fig, s Stream, frees int) int64 {
		most := int64(0)
		for i := range frees {
			h.allocFree(s, size)
			most = max(most, h.f.npending.Load())
			if i%PendingBound == PendingBound-1 {
				h.d.run(s)
			}
		}
		return most
	}
	for _, tc := range []struct {
		name     string
		behind   int  // frees first left waiting on a stream that runs nothing
		leftover bool // a bound left high with no free pending, as a reading that raced frees may leave it
	}{
		{name: "from no frees waiting"},
		{name: "after a stream far behind", behind: 5 * PendingBound},
		{name: "a bound left high with nothing pending", leftover: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			h.quiet()
			if tc.behind > 0 {
				for range tc.behind {
					h.allocFree(streamB, size)
				}
				// Reads at PendingBound, twice it, four times it: none
				// retired, each doubles the bound.
				assert.Equal(t, 3, h.q.queries)
				assert.Equal(t, int64(8*PendingBound), h.f.reapAt.Load(), "the bound raised")
				h.d.run(streamB)
				h.load("a reading that retires every free", 0, 1<<20, 0, 4)
				assert.Zero(t, h.f.reapAt.Load(), "the bound brought down")
			}
			if tc.leftover {
				h.f.reapAt.Store(10 * PendingBound)
				h.load("a reading with nothing pending", 0, 1<<20, 0, 0)
				assert.Zero(t, h.f.reapAt.Load(), "the bound brought down")
			}
			queries := h.q.queries
			const rounds = 20 * PendingBound
			most := run(h, streamA, rounds)
			assert.LessOrEqual(t, most, int64(2*PendingBound), "frees pending after %d frees", rounds)
			assert.Greater(t, h.q.queries, queries, "the frees read themselves")
			h.d.run(streamA)
			h.load("at the end", 0, 1<<20, 0, h.q.queries+1)
			assert.Zero(t, h.f.reapAt.Load())
			assert.LessOrEqual(t, h.d.created, tc.behind+2*PendingBound, "events created")
		})
	}
}

// TestPooled: the pooled part of the figure moves with the stream-ordered
// buffers alone, and drops for a free in stream order once it is retired.
func TestPooled(t *testing.T) {
	const size = 1 << 10
	h := newFig(t)
	h.f.Add(3*size, false)
	h.f.Add(2*size, true)
	assert.Equal(t, int64(2*size), h.f.Pooled())
	h.free(streamA, 2*size, false)
	assert.Equal(t, int64(2*size), h.f.Pooled(), "pending: still pooled")
	h.d.run(streamA)
	h.f.Load()
	assert.Zero(t, h.f.Pooled())
	h.f.Drop(3*size, false)
	cur, peak := h.f.Load()
	assert.Equal(t, [2]int64{0, 5 * size}, [2]int64{cur, peak})
}
