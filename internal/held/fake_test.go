package held

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tests' driver: a device whose streams run their operations (frees
// and event records) when the test says, with a pool that hands a block
// freed on a stream to the next allocation on that stream at once, as
// CUDA's does; and a Querier of it that answers from what the streams
// have run and keeps what each query was asked.

// fakeDevice is the driver's state of one device's streams, events and
// pool.
type fakeDevice struct {
	mu      sync.Mutex
	streams map[uintptr]*fakeStream
	events  map[int]fakeMark // each event's last record
	last    int              // the last event created
	created int              // events created
	lost    bool             // the device cannot be asked: Query fails
	live    int64            // bytes of the allocations not freed
}

// fakeStream is one stream: its operations, those run, and the frees its
// pool still counts (enqueued, not run).
type fakeStream struct {
	ops, ran  int
	running   bool // runs each operation as it is enqueued
	failing   bool // its queries fail
	capturing bool // takes part in a capture: neither queried nor recorded on
	frees     []*fakeFree
}

// fakeFree is a free enqueued on a stream at pos, and the bytes of it the
// pool counts until the stream runs it (less what allocations on the
// stream took over).
type fakeFree struct {
	pos       int
	remaining int64
	// writtenOff says that a query of its stream failed (or the device
	// was lost) before it ran: the figure has done with it, and the
	// device's holds leaves it out.
	writtenOff bool
}

// writeOff marks the frees of s written off (d.mu held).
func (s *fakeStream) writeOff() {
	for _, f := range s.frees {
		f.writtenOff = true
	}
}

// fakeMark is where an event was last recorded.
type fakeMark struct {
	stream uintptr
	pos    int
}

func newFakeDevice() *fakeDevice {
	return &fakeDevice{streams: map[uintptr]*fakeStream{}, events: map[int]fakeMark{}}
}

// stream returns stream h (d.mu held).
func (d *fakeDevice) stream(h uintptr) *fakeStream {
	s := d.streams[h]
	if s == nil {
		s = &fakeStream{}
		d.streams[h] = s
	}
	return s
}

// enqueue enqueues an operation on s and returns its position (d.mu held).
func (s *fakeStream) enqueue() int {
	s.ops++
	if s.running {
		s.ran = s.ops
	}
	return s.ops
}

// alloc allocates size bytes on stream h: the pool takes over first the
// bytes of the frees on h not yet run, the newest first.
func (d *fakeDevice) alloc(h uintptr, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.live += size
	s := d.stream(h)
	need := size
	for i := len(s.frees) - 1; i >= 0 && need > 0; i-- {
		if f := s.frees[i]; f.pos > s.ran {
			t := min(need, f.remaining)
			f.remaining -= t
			need -= t
		}
	}
}

// allocNow allocates size bytes out of the pool; freeNow frees them.
func (d *fakeDevice) allocNow(size int64) { d.mu.Lock(); d.live += size; d.mu.Unlock() }
func (d *fakeDevice) freeNow(size int64)  { d.mu.Lock(); d.live -= size; d.mu.Unlock() }

// free enqueues a free of size bytes on stream h.
func (d *fakeDevice) free(h uintptr, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.live -= size
	s := d.stream(h)
	s.frees = append(s.frees, &fakeFree{pos: s.enqueue(), remaining: size})
}

// record records e (a new event where 0) on stream h and returns it.
func (d *fakeDevice) record(h uintptr, e int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e == 0 {
		d.last++
		d.created++
		e = d.last
	}
	s := d.stream(h)
	d.events[e] = fakeMark{h, s.enqueue()}
	return e
}

// run makes stream h run every operation enqueued on it so far.
func (d *fakeDevice) run(h uintptr) {
	d.mu.Lock()
	s := d.stream(h)
	s.ran = s.ops
	d.mu.Unlock()
}

// setRunning makes h run each operation as it is enqueued (and those
// enqueued before), or stop doing so.
func (d *fakeDevice) setRunning(h uintptr, on bool) {
	d.mu.Lock()
	s := d.stream(h)
	s.running = on
	if on {
		s.ran = s.ops
	}
	d.mu.Unlock()
}

// set sets a flag of stream h under the device's lock.
func (d *fakeDevice) set(h uintptr, flag func(*fakeStream)) {
	d.mu.Lock()
	flag(d.stream(h))
	d.mu.Unlock()
}

// holds returns the bytes the device holds: the live allocations, and the
// frees its streams have not run, less what allocations took over; the
// frees written off (a query failed) left out.
func (d *fakeDevice) holds() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.live
	for _, s := range d.streams {
		for _, f := range s.frees {
			if f.pos > s.ran && !f.writtenOff {
				n += f.remaining
			}
		}
	}
	return n
}

// fakeQuerier is a Figure's Querier of a fakeDevice. It checks what the
// Querier's contract asks of the Figure: each stream's events in the order
// it reaches them, no question with nothing to ask, a record only with a
// question of idleness (and the race detector, that no two readings use it
// at once).
type fakeQuerier struct {
	t testing.TB
	d *fakeDevice

	// What the test reads, under d.mu.
	queries   int        // Query calls answered
	asked     int        // streams asked about, over all queries
	records   int        // events recorded by readings
	log       []fakeMark // where they were recorded, for the fuzz test's model to take
	destroyed []int      // events destroyed
}

func (q *fakeQuerier) Query(qs []Query[int]) bool {
	d := q.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost {
		for _, s := range d.streams {
			s.writeOff()
		}
		return false
	}
	q.queries++
	q.asked += len(qs)
	for i := range qs {
		a := &qs[i]
		if len(a.Events) == 0 && !a.Ask {
			q.t.Error("a stream asked nothing")
		}
		if a.Record && !a.Ask {
			q.t.Error("a record without a question of idleness")
		}
		s := d.stream(a.Stream)
		if s.failing {
			a.Gone = true
			s.writeOff()
			continue
		}
		last := 0
		for _, e := range a.Events {
			m, ok := d.events[e]
			if !ok || m.stream != a.Stream || m.pos <= last {
				q.t.Errorf("event %d asked of stream %#x out of its order (recorded at %+v)", e, a.Stream, m)
			}
			last = m.pos
			if m.pos > s.ran {
				break
			}
			a.Reached++
		}
		if !a.Ask || a.Reached < len(a.Events) && !a.Record || s.capturing {
			continue
		}
		if a.Reached == len(a.Events) && s.ran == s.ops {
			a.Idle = true
			continue
		}
		if a.Record {
			e := a.Spare
			if e == 0 {
				d.last++
				d.created++
				e = d.last
			}
			d.events[e] = fakeMark{a.Stream, s.enqueue()}
			a.Recorded = e
			q.records++
			q.log = append(q.log, d.events[e])
		}
	}
	return true
}

func (q *fakeQuerier) Destroy(e int) {
	q.d.mu.Lock()
	q.destroyed = append(q.destroyed, e)
	q.d.mu.Unlock()
}

// takeRecord takes from the log the position of the first event recorded
// on stream h, and false where none was.
func (q *fakeQuerier) takeRecord(h uintptr) (int, bool) {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	for i, m := range q.log {
		if m.stream == h {
			q.log = slices.Delete(q.log, i, i+1)
			return m.pos, true
		}
	}
	return 0, false
}

// reads returns what the querier did so far: its queries, the events it
// recorded and those it destroyed.
func (q *fakeQuerier) reads() (queries, records int, destroyed []int) {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.queries, q.records, slices.Clone(q.destroyed)
}

// fig is a Figure on a fake device, driven as a backend's adapter drives
// it.
type fig struct {
	t *testing.T
	d *fakeDevice
	q *fakeQuerier
	f *Figure[int, *fakeQuerier]
}

func newFig(t *testing.T) *fig {
	d := newFakeDevice()
	q := &fakeQuerier{t: t, d: d}
	f := new(Figure[int, *fakeQuerier])
	f.Init(q, true)
	return &fig{t: t, d: d, q: q, f: f}
}

// alloc allocates size bytes in stream order on s, as a backend's
// AllocAsync does: the Order taken before the driver is asked.
func (h *fig) alloc(s Stream, size int64) {
	at := h.f.Order()
	h.d.alloc(s.Handle, size)
	h.f.Add(size, true, s.Handle, at)
}

// free frees size bytes in stream order on s, as a backend's FreeAsync
// does: on an Ordered stream the free alone; on another, with an event
// recorded after it (a spare where there is one).
func (h *fig) free(s Stream, size int64) {
	h.d.free(s.Handle, size)
	if s.Ordered {
		h.f.Freed(s, size)
		return
	}
	e, _ := h.f.TakeSpare()
	h.f.FreedWithEvent(s, size, h.d.record(s.Handle, e))
}

// highPeak raises the figure's peak to n above the figure, with a buffer
// allocated and freed at once, so that no allocation of the test raises
// it (which reads first).
func (h *fig) highPeak(n int64) {
	h.f.Add(n, false, 0, 0)
	h.f.Drop(n, false)
}

// allocFree allocates size bytes on s and frees them there.
func (h *fig) allocFree(s Stream, size int64) {
	h.alloc(s, size)
	h.free(s, size)
}

// spares returns how many events the figure keeps for reuse: its own and
// its streams'.
func (h *fig) spares() int {
	h.f.spareMu.Lock()
	n := len(h.f.spare)
	h.f.spareMu.Unlock()
	for _, e := range h.f.streams.Load().list {
		e.mu.Lock()
		n += len(e.spares)
		e.mu.Unlock()
	}
	return n
}

// load reads the figure, and requires it of the figure's counts: cur
// (peak, where not -1), the bytes pending; and that it is never below what
// the device holds.
func (h *fig) load(msg string, cur, peak, pending int64) {
	h.t.Helper()
	c, p := h.f.Load()
	require.Equal(h.t, cur, c, "%s: the figure", msg)
	if peak >= 0 {
		require.Equal(h.t, peak, p, "%s: the peak", msg)
	}
	require.Equal(h.t, pending, h.f.Pending(), "%s: the bytes pending", msg)
	require.GreaterOrEqual(h.t, c, h.d.holds(), "%s: below what the device holds", msg)
}

// queries returns the queries the figure made so far.
func (h *fig) queries() int {
	q, _, _ := h.q.reads()
	return q
}

// Streams of the tests: two of one context, one of another, and one that
// is not ordered.
var (
	streamA   = Stream{Handle: 10, Context: 1, Ordered: true}
	streamB   = Stream{Handle: 20, Context: 1, Ordered: true}
	streamC   = Stream{Handle: 30, Context: 2, Ordered: true}
	unordered = Stream{Handle: 2, Context: 1}
)
