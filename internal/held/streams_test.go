package held

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mib int64 = 1 << 20

// TestOneQuestionPerStream: each free comes with its event; a reading asks
// each stream with frees pending once, in one query, and where the stream
// has reached its newest event, every free of it leaves; the events are
// kept and recorded again, so that a running program creates none.
func TestOneQuestionPerStream(t *testing.T) {
	h := newFig(t)
	h.highPeak(64 * mib)
	for range 8 {
		h.allocFree(streamA, mib)
		h.allocFree(streamB, mib)
	}
	require.Zero(t, h.queries(), "the frees asked nothing")
	require.Equal(t, 2*mib, h.f.Pending(), "each stream's last free: the others were taken over by the next allocation")
	h.d.run(streamA.Handle)
	h.d.run(streamB.Handle)
	h.load("the streams ran", 0, 64*mib, 0)
	require.Equal(t, 1, h.queries())
	assert.Equal(t, 2, h.q.asked, "one question per stream")
	assert.Equal(t, 16, h.spares(), "every event kept")
	for range 8 {
		h.allocFree(streamA, mib)
	}
	assert.Equal(t, 16, h.d.created, "no event created once the program runs")
}

// TestHeldBack: a stream held back keeps its frees; the reading asks about
// them again until the stream has run them, and retires them in its order.
func TestHeldBack(t *testing.T) {
	h := newFig(t)
	h.alloc(streamA, 3*mib) // stays live
	h.alloc(streamB, mib)
	h.free(streamB, mib)
	h.load("busy", 4*mib, 4*mib, mib)
	h.load("still busy", 4*mib, 4*mib, mib)
	require.Equal(t, 2, h.queries())
	h.d.run(streamB.Handle)
	h.load("reached", 3*mib, 4*mib, 0)
	require.Equal(t, 1, h.spares())
}

// TestReuseOnStream: a buffer freed and a second of the same size
// allocated on the same stream, behind a busy stream: the pool hands the
// first's block to the second, so the device holds one buffer's bytes, and
// so does the figure, at every moment and at its peak.
func TestReuseOnStream(t *testing.T) {
	h := newFig(t)
	const size = 64 * mib
	h.alloc(streamA, size)
	h.free(streamA, size)
	h.alloc(streamA, size)
	h.free(streamA, size)
	h.load("both freed, the stream held back", size, size, size)
	assert.Equal(t, size, h.d.holds())
	h.d.run(streamA.Handle)
	h.load("run", 0, size, 0)
}

// TestReuseOtherStream: a free on one stream is not taken over by an
// allocation on another: the device holds both buffers until the first
// stream runs the free.
func TestReuseOtherStream(t *testing.T) {
	h := newFig(t)
	const size = 64 * mib
	h.alloc(streamA, size)
	h.free(streamA, size)
	h.alloc(streamB, size) // raises the peak: reads first (A busy)
	require.Equal(t, 1, h.queries())
	h.load("the free pending on A, B's buffer live", 2*size, 2*size, size)
	h.d.run(streamA.Handle)
	h.load("A ran its free", size, 2*size, 0)
}

// TestReuseNewestFirst: an allocation takes over the frees pending on its
// stream from the newest; a free the stream runs leaves with what no
// allocation took.
func TestReuseNewestFirst(t *testing.T) {
	h := newFig(t)
	for _, n := range []int64{1, 2, 3, 4} {
		h.alloc(streamB, n*mib) // each its own block: B's frees are none
		h.free(streamA, n*mib)  // ordered after its allocation, as the driver requires
	}
	require.Equal(t, 10*mib, h.f.Pending())
	h.alloc(streamA, 5*mib) // 4 from the newest free, 1 from the one before
	require.Equal(t, 5*mib, h.f.Pending())
	h.load("taken over", 10*mib, 10*mib, 5*mib)
	assert.Equal(t, h.d.holds(), 10*mib, "the device took over the same bytes")
	e := h.f.streams.Load().find(streamA.Handle)
	assert.Equal(t, []int64{mib, 2 * mib, 2 * mib, 0}, []int64{e.segs[0].bytes, e.segs[1].bytes, e.segs[2].bytes, e.segs[3].bytes})
}

// TestReuseOrder: a free counted after an allocation's Order may have come
// after the allocation on the stream: the allocation takes none of the
// stream's frees, and the figure overstates rather than understates.
func TestReuseOrder(t *testing.T) {
	h := newFig(t)
	h.alloc(streamA, mib)
	at := h.f.Order() // the allocation below is asked of the driver now
	h.d.alloc(streamA.Handle, 2*mib)
	h.free(streamA, mib) // another goroutine's free, counted before the allocation's Add
	h.f.Add(2*mib, true, streamA.Handle, at)
	require.Equal(t, mib, h.f.Pending(), "nothing taken over")
	h.load("the free pending, the second buffer live", 3*mib, 3*mib, mib)
	h.alloc(streamA, mib) // its Order is after the free: taken over
	require.Zero(t, h.f.Pending())
}

// TestOutOfOrder: two goroutines that free on one stream at once may count
// their frees in another order than the stream's; the events' numbers put
// them back in the stream's order, so that a reading keeps the one the
// stream has not reached.
func TestOutOfOrder(t *testing.T) {
	h := newFig(t)
	h.highPeak(64 * mib)
	h.alloc(streamA, mib)
	h.alloc(streamA, 2*mib)
	h.d.free(streamA.Handle, mib)
	e1, s1 := h.d.recordSeq(streamA.Handle, 0)
	h.d.run(streamA.Handle) // the stream reaches the first free's event
	h.d.free(streamA.Handle, 2*mib)
	e2, s2 := h.d.recordSeq(streamA.Handle, 0)
	h.f.Freed(Free[int]{Event: e2, Stream: streamA, Seq: s2, Size: 2 * mib}) // counted first
	h.f.Freed(Free[int]{Event: e1, Stream: streamA, Seq: s1, Size: mib})
	h.load("the first free ran, the second not", 2*mib, 64*mib, 2*mib)
}

// TestPendingBound: frees that nothing reads stay bounded: once
// PendingBound wait, a free reads itself, then at twice what that reading
// left, and a reading that leaves little brings the bound back down.
func TestPendingBound(t *testing.T) {
	h := newFig(t)
	h.highPeak(1 << 30)
	for i := range PendingBound - 1 {
		h.alloc(streamB, mib)
		h.free(streamA, mib)
		require.Zero(t, h.queries(), "free %d", i)
	}
	h.alloc(streamB, mib)
	h.free(streamA, mib)
	require.Equal(t, 1, h.queries(), "at the bound, the free read")
	require.Equal(t, int64(2*PendingBound), h.f.reapAt.Load(), "none ran: the next at twice as many")
	h.d.setRunning(streamA.Handle, true)
	for range PendingBound {
		h.alloc(streamB, mib)
		h.free(streamA, mib)
	}
	require.Equal(t, 2, h.queries())
	assert.Zero(t, h.f.reapAt.Load(), "every free ran: the bound back down")
	assert.Zero(t, h.f.npending.Load())
}

// TestFailedQuery: where a stream's query fails (the event or its context
// is gone, or the device met a sticky error), its frees count as executed;
// where the device cannot be asked at all, every free does.
func TestFailedQuery(t *testing.T) {
	h := newFig(t)
	h.alloc(streamB, 8*mib)
	h.free(streamA, 4*mib)
	h.free(streamB, 4*mib)
	h.load("both busy", 8*mib, 8*mib, 8*mib)
	h.d.set(streamA.Handle, func(s *fakeStream) { s.failing = true })
	h.f.Load()
	require.Equal(t, 4*mib, h.f.Pending(), "A's free done with, B's kept")
	assert.Zero(t, h.spares(), "no event whose query failed is kept")
	h.d.lost = true
	c, _ := h.f.Load()
	assert.Zero(t, c, "a lost device: every free done with")
	assert.Zero(t, h.f.Pending())
	assert.Zero(t, h.f.Pooled())
}

// TestForeignEvents: an event of another context than the device's own is
// destroyed once reached, and never kept for reuse.
func TestForeignEvents(t *testing.T) {
	h := newFig(t)
	h.highPeak(64 * mib)
	h.alloc(streamC, mib)
	e := h.free2(streamC, mib, true)
	h.d.run(streamC.Handle)
	h.load("reached", 0, 64*mib, 0)
	_, destroyed := h.q.reads()
	assert.Equal(t, []int{e}, destroyed)
	assert.Zero(t, h.spares())
}

// TestUnorderedStream: the frees of a stream not Ordered are asked about
// one by one: a reading keeps those not reached, whatever the order; no
// allocation takes them over.
func TestUnorderedStream(t *testing.T) {
	h := newFig(t)
	h.highPeak(64 * mib)
	h.alloc(unordered, mib)
	h.free(unordered, mib)
	h.alloc(unordered, mib) // not taken over
	require.Equal(t, mib, h.f.Pending())
	h.free(unordered, mib)
	h.load("both pending", 2*mib, 64*mib, 2*mib)
	assert.Equal(t, 2, h.q.asked, "a question per free")
	h.d.run(unordered.Handle)
	h.load("both reached", 0, 64*mib, 0)
	require.Equal(t, 2, h.spares())
}

// TestQuietStreamDropped: a stream with nothing pending at two readings
// in a row leaves the table; a free on it later makes a new entry.
func TestQuietStreamDropped(t *testing.T) {
	h := newFig(t)
	h.alloc(streamB, mib)
	h.free(streamA, mib)
	h.d.run(streamA.Handle)
	h.f.Load() // retired
	keep := func() { h.alloc(streamC, mib); h.free(streamC, mib); h.d.run(streamC.Handle); h.f.Load() }
	keep() // A quiet once (C keeps the readings coming)
	require.NotNil(t, h.f.streams.Load().find(streamA.Handle))
	keep() // twice
	assert.Nil(t, h.f.streams.Load().find(streamA.Handle), "A dropped")
	h.allocFree(streamA, mib)
	h.d.run(streamA.Handle)
	h.f.Load()
	assert.Zero(t, h.f.Pending())
}

// TestTableMap: past tableScan streams, the table finds them by a map,
// the same entries.
func TestTableMap(t *testing.T) {
	h := newFig(t)
	h.highPeak(1 << 30)
	for i := range 3 * tableScan {
		s := Stream{Handle: uintptr(100 + i), Ordered: true}
		h.alloc(s, mib)
		h.free(s, mib)
	}
	tb := h.f.streams.Load()
	require.NotNil(t, tb.byHandle)
	for _, e := range tb.list {
		assert.Same(t, e, tb.find(e.handle))
	}
	h.load("all pending", 3*tableScan*mib, -1, 3*tableScan*mib)
	require.Equal(t, 1, h.queries())
}

// TestPeakReads: an allocation that would raise the peak reads first, so
// that the peak leaves out the frees learned executed; one within the
// peak asks nothing.
func TestPeakReads(t *testing.T) {
	h := newFig(t)
	h.alloc(streamB, 8*mib)
	h.free(streamB, 8*mib) // B is busy
	require.Zero(t, h.queries())
	h.alloc(streamC, 4*mib) // 8 pending + 4 raises the peak: reads (B busy: kept)
	require.Equal(t, 1, h.queries())
	h.d.run(streamB.Handle)
	h.alloc(streamC, 2*mib) // raises it again: reads, and B's free leaves first
	require.Equal(t, 2, h.queries())
	h.load("B's free learned executed", 6*mib, 12*mib, 0)
	h.free(streamC, 2*mib)
	h.alloc(streamA, mib) // within the peak: no reading
	assert.Equal(t, 2, h.queries())
	h.load("C's free pending", 7*mib, 12*mib, 2*mib)
}
