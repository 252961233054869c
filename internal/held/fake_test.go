package held

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tests' driver: a device whose streams run their operations (frees
// and the events recorded after them) when the test says, with a pool
// that hands a block freed on a stream to the next allocation on that
// stream at once, as CUDA's does; and a Querier of it that answers from
// what the streams have run and keeps what each query was asked.

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
	ops, ran int
	running  bool // runs each operation as it is enqueued
	failing  bool // its queries fail
	frees    []*fakeFree
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

// recordSeq records e (a new event where 0) on stream h and returns it,
// with its number along h: its position there.
func (d *fakeDevice) recordSeq(h uintptr, e int) (int, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e == 0 {
		d.last++
		d.created++
		e = d.last
	}
	s := d.stream(h)
	d.events[e] = fakeMark{h, s.enqueue()}
	return e, uint64(d.events[e].pos)
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
// Querier's contract asks of the Figure: each question's events of one
// stream, in the order it reaches them, none empty (and the race detector,
// that no two readings use it at once).
type fakeQuerier struct {
	t testing.TB
	d *fakeDevice

	// What the test reads, under d.mu.
	queries   int   // Query calls answered
	asked     int   // questions asked, over all queries
	destroyed []int // events destroyed
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
		if len(a.Events) == 0 {
			q.t.Error("a stream asked nothing")
			continue
		}
		var stream uintptr
		last := 0
		for j, e := range a.Events {
			m, ok := d.events[e]
			if !ok || j > 0 && (m.stream != stream || m.pos <= last) {
				q.t.Errorf("event %d asked out of its stream's order (recorded at %+v)", e, m)
			}
			stream, last = m.stream, m.pos
		}
		s := d.stream(stream)
		if s.failing {
			a.Gone = true
			s.writeOff()
			continue
		}
		for _, e := range a.Events {
			if d.events[e].pos > s.ran {
				break
			}
			a.Reached++
		}
	}
	return true
}

func (q *fakeQuerier) Destroy(e int) {
	q.d.mu.Lock()
	q.destroyed = append(q.destroyed, e)
	q.d.mu.Unlock()
}

// reads returns what the querier did so far: its queries, and the events
// it destroyed.
func (q *fakeQuerier) reads() (queries int, destroyed []int) {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.queries, slices.Clone(q.destroyed)
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
// does: with an event recorded after it, a spare where there is one, and
// numbered along the stream.
func (h *fig) free(s Stream, size int64) {
	h.free2(s, size, false)
}

// free2 is free; foreign, an event of another context: a new one, never
// a spare.
func (h *fig) free2(s Stream, size int64, foreign bool) int {
	h.d.free(s.Handle, size)
	e := 0
	if !foreign {
		e, _ = h.f.TakeSpare()
	}
	e, seq := h.d.recordSeq(s.Handle, e)
	h.f.Freed(Free[int]{Event: e, Stream: s, Seq: seq, Size: size, Foreign: foreign})
	return e
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

// spares returns how many events the figure keeps for reuse.
func (h *fig) spares() int {
	h.f.spareMu.Lock()
	defer h.f.spareMu.Unlock()
	return len(h.f.spare)
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
	q, _ := h.q.reads()
	return q
}

// Streams of the tests: three, and one that is not ordered.
var (
	streamA   = Stream{Handle: 10, Ordered: true}
	streamB   = Stream{Handle: 20, Ordered: true}
	streamC   = Stream{Handle: 30, Ordered: true}
	unordered = Stream{Handle: 2}
)
