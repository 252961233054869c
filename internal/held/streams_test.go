package held

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mib int64 = 1 << 20

// TestNoEventPerFree: a free in stream order asks nothing of the driver;
// a reading asks each stream with frees pending once, and where the stream
// has run all its work, every one of its frees leaves, with no event
// recorded.
func TestNoEventPerFree(t *testing.T) {
	h := newFig(t)
	h.highPeak(64 * mib)
	for range 32 {
		h.allocFree(streamA, mib)
		h.allocFree(streamB, mib)
	}
	q, records, _ := h.q.reads()
	require.Zero(t, q, "the frees asked nothing")
	require.Equal(t, 2*mib, h.f.Pending(), "each stream's last free: the others were taken over by the next allocation")
	h.d.run(streamA.Handle)
	h.d.run(streamB.Handle)
	h.load("the streams idle", 0, 64*mib, 0)
	require.Equal(t, 1, h.queries())
	_, records, _ = h.q.reads()
	assert.Zero(t, records, "no event recorded: both streams were idle")
	assert.Equal(t, 2, h.q.asked, "one question per stream")
	assert.Zero(t, h.d.created)
}

// TestReadingMarksBusyStream: a reading that finds a stream busy records
// one event after its frees and keeps them; the next reading asks for that
// event alone; once reached, the event is kept for the stream's next
// readings, so that a stream that stays busy costs no event created per
// reading.
func TestReadingMarksBusyStream(t *testing.T) {
	h := newFig(t)
	h.alloc(streamA, 3*mib) // stays live
	h.alloc(streamB, mib)
	h.free(streamB, mib)
	h.load("busy", 4*mib, 4*mib, mib)
	require.Equal(t, 1, h.queries())
	_, records, _ := h.q.reads()
	require.Equal(t, 1, records, "one event, after the stream's frees")
	h.load("still busy", 4*mib, 4*mib, mib)
	require.Equal(t, 2, h.queries())
	_, records, _ = h.q.reads()
	require.Equal(t, 1, records, "the event awaits the stream: none other")

	h.d.run(streamB.Handle)
	h.load("the event reached", 3*mib, 4*mib, 0)
	require.Equal(t, 3, h.queries())
	require.Equal(t, 1, h.spares(), "the event kept for the stream")

	for range 3 {
		h.alloc(streamB, 2*mib)
		h.free(streamB, 2*mib)
		h.f.Load()
		h.d.run(streamB.Handle)
		h.f.Load()
	}
	assert.Equal(t, 1, h.d.created, "one event for all the readings")
	h.load("idle", 3*mib, 5*mib, 0)
	require.Equal(t, 9, h.queries())
}

// TestReuseOnStream: a buffer freed and a second of the same size
// allocated on the same stream, behind a busy stream: the pool hands the
// first's block to the second, so the device holds one buffer's bytes,
// and so does the figure, at every moment and at its peak.
func TestReuseOnStream(t *testing.T) {
	h := newFig(t)
	const size = 64 * mib
	h.alloc(streamA, size)
	h.free(streamA, size)
	h.alloc(streamA, size)
	h.free(streamA, size)
	h.load("both freed, the stream held back", size, size, size)
	require.Equal(t, 1, h.queries())
	assert.Equal(t, size, h.d.holds())
	h.d.run(streamA.Handle)
	h.load("run", 0, size, 0)
	require.Equal(t, 2, h.queries())
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
	require.Equal(t, 2, h.queries())
	h.d.run(streamA.Handle)
	h.load("A ran its free", size, 2*size, 0)
	require.Equal(t, 3, h.queries())
}

// TestReuseNewestFirst: an allocation takes over the frees pending on its
// stream from the newest: those counted since the last reading, then the
// segments the readings sealed, newest first; a free the allocation's
// stream ran leaves as the stream reaches it, less what was taken.
func TestReuseNewestFirst(t *testing.T) {
	h := newFig(t)
	for _, n := range []int64{1, 2, 3} {
		h.alloc(streamB, n*mib) // each its own block: B's frees are none
		h.free(streamA, n*mib)  // ordered after its allocation, as the driver requires
		h.f.Load()              // seals the free, with an event after it (A is busy)
	}
	h.alloc(streamB, 4*mib)
	h.free(streamA, 4*mib) // open
	require.Equal(t, 10*mib, h.f.Pending())
	h.alloc(streamA, 5*mib) // 4 from the open frees, 1 from the newest segment
	require.Equal(t, 5*mib, h.f.Pending())
	h.load("taken over", 10*mib, 10*mib, 5*mib)
	assert.Equal(t, h.d.holds(), int64(10*mib), "the device took over the same bytes")
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

// TestMaxWaiting: a stream that stays busy gets at most MaxWaiting events
// awaiting it, however often it is read; once it has run its work, one
// reading uncounts every free of it, those counted after the last event
// too.
func TestMaxWaiting(t *testing.T) {
	h := newFig(t)
	h.highPeak(1 << 30)
	h.alloc(streamB, 100*mib)
	h.free(streamA, 100*mib)
	for i := range 3 * MaxWaiting {
		h.alloc(streamB, mib)
		h.free(streamA, mib)
		h.f.Load()
		_, records, _ := h.q.reads()
		require.Equal(t, min(i+1, MaxWaiting), records, "reading %d", i)
	}
	h.d.run(streamA.Handle)
	q, _, _ := h.q.reads()
	h.load("every free run", 0, -1, 0)
	require.Equal(t, q+1, h.queries())
	assert.Equal(t, MaxWaiting, h.spares(), "the events kept for the stream")
}

// TestFailedQuery: where a stream's query fails (the stream is gone, or
// the device met a sticky error), its frees count as executed, those
// counted since too; where the device cannot be asked at all, every free
// does.
func TestFailedQuery(t *testing.T) {
	h := newFig(t)
	h.alloc(streamB, 8*mib)
	h.free(streamA, 4*mib)
	h.free(streamB, 4*mib)
	h.load("both busy", 8*mib, 8*mib, 8*mib)
	require.Equal(t, 1, h.queries())
	h.alloc(streamC, mib)
	h.free(streamA, mib) // after the event
	h.d.set(streamA.Handle, func(s *fakeStream) { s.failing = true })
	h.f.Load()
	require.Equal(t, 4*mib, h.f.Pending(), "A's frees done with, B's kept")
	h.d.lost = true
	c, _ := h.f.Load()
	assert.Zero(t, c, "a lost device: every free done with")
	assert.Zero(t, h.f.Pending())
	assert.Zero(t, h.f.Pooled())
}

// TestCapturingStream: a stream that takes part in a capture is neither
// queried nor recorded on; its frees wait until the capture ends.
func TestCapturingStream(t *testing.T) {
	h := newFig(t)
	h.alloc(streamA, mib)
	h.free(streamA, mib)
	h.d.run(streamA.Handle)
	h.d.set(streamA.Handle, func(s *fakeStream) { s.capturing = true })
	h.load("capturing", mib, mib, mib)
	require.Equal(t, 1, h.queries())
	_, records, _ := h.q.reads()
	require.Zero(t, records)
	h.d.set(streamA.Handle, func(s *fakeStream) { s.capturing = false })
	h.load("the capture ended", 0, mib, 0)
	require.Equal(t, 2, h.queries())
}

// TestUnorderedStream: the frees of a stream not Ordered each come with
// an event, and are asked about one by one: a reading keeps those not
// reached, whatever the order; no allocation takes them over; their
// events are reused. Once PendingBound of them wait, a free reads itself.
func TestUnorderedStream(t *testing.T) {
	h := newFig(t)
	h.highPeak(64 * mib)
	h.alloc(unordered, mib)
	h.free(unordered, mib)
	h.alloc(unordered, mib) // not taken over
	require.Equal(t, mib, h.f.Pending())
	h.free(unordered, mib)
	h.load("both pending", 2*mib, 64*mib, 2*mib)
	require.Equal(t, 1, h.queries())
	h.d.run(unordered.Handle)
	h.load("both reached", 0, 64*mib, 0)
	require.Equal(t, 2, h.queries())
	require.Equal(t, 2, h.spares())

	h.d.setRunning(unordered.Handle, false)
	for range PendingBound - 1 {
		h.allocFree(unordered, mib)
	}
	q, _, _ := h.q.reads()
	require.Equal(t, 2, q, "below the bound, no reading")
	h.allocFree(unordered, mib)
	q, _, _ = h.q.reads()
	require.Equal(t, 3, q, "at the bound, the free read")
	assert.Equal(t, PendingBound, int(h.f.unordered.Load()), "none reached")
	h.d.run(unordered.Handle)
	h.f.Load()
	assert.Zero(t, h.f.unordered.Load())
	assert.Equal(t, PendingBound, h.d.created, "each event in use at once, reused after")
}

// TestQuietStreamDropped: a stream with nothing pending at two readings
// in a row leaves the table, its events destroyed; a free on it later
// makes a new entry.
func TestQuietStreamDropped(t *testing.T) {
	h := newFig(t)
	h.alloc(streamB, mib)
	h.free(streamA, mib)
	h.f.Load() // A busy: an event recorded
	h.d.run(streamA.Handle)
	h.f.Load() // reached: kept as a spare
	require.Equal(t, 1, h.spares())
	keep := func() { h.alloc(streamC, mib); h.free(streamC, mib); h.f.Load(); h.d.run(streamC.Handle) }
	keep() // A quiet once (C keeps the readings coming)
	require.NotNil(t, h.f.streams.Load().find(streamA.Handle))
	keep() // twice
	assert.Nil(t, h.f.streams.Load().find(streamA.Handle), "A dropped")
	_, _, destroyed := h.q.reads()
	assert.Len(t, destroyed, 1, "its event destroyed")
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
