package held

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tests' driver: a device whose streams record events (ints, 0 being
// none) after frees and reach them when the test says, and a Querier of
// it that answers from what the streams have reached and keeps what each
// query was asked.

// fakeDevice is the driver's state of one device's streams and events.
type fakeDevice struct {
	mu      sync.Mutex
	last    int               // the last event created
	seq     map[Stream]uint64 // the last number each stream gave an event
	where   map[int]Stream    // the stream each event was last recorded on
	seqOf   map[int]uint64    // its number there
	done    map[int]bool      // the events their streams have reached
	failing map[int]bool      // the events whose query fails
	running map[Stream]bool   // streams that reach each event as it is recorded
	lost    bool              // the device cannot be asked: Query fails
	created int               // events created
}

func newFakeDevice() *fakeDevice {
	return &fakeDevice{seq: map[Stream]uint64{}, where: map[int]Stream{}, seqOf: map[int]uint64{}, done: map[int]bool{},
		failing: map[int]bool{}, running: map[Stream]bool{}}
}

// record records e (a new event where 0) on stream s, after a free, and
// returns it with its number along s.
func (d *fakeDevice) record(s Stream, e int) (int, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e == 0 {
		d.last++
		d.created++
		e = d.last
	}
	d.seq[s]++
	d.where[e], d.seqOf[e] = s, d.seq[s]
	d.done[e] = d.running[s]
	delete(d.failing, e)
	return e, d.seq[s]
}

// newEvent creates an event that is not recorded.
func (d *fakeDevice) newEvent() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last++
	d.created++
	return d.last
}

// run makes stream s reach every event recorded on it so far.
func (d *fakeDevice) run(s Stream) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for e, w := range d.where {
		if w == s {
			d.done[e] = true
		}
	}
}

// setRunning makes s reach each event as it is recorded (and those
// recorded before), or stop doing so.
func (d *fakeDevice) setRunning(s Stream, on bool) {
	d.mu.Lock()
	d.running[s] = on
	d.mu.Unlock()
	if on {
		d.run(s)
	}
}

// fail makes the query of e fail.
func (d *fakeDevice) fail(e int) {
	d.mu.Lock()
	d.failing[e] = true
	d.mu.Unlock()
}

// answered reports whether a query of e finds it reached or failing, and
// whether it failed.
func (d *fakeDevice) answered(e int) (reached, failed bool) {
	return d.done[e] || d.failing[e], d.failing[e]
}

// fakeQuerier is a Figure's Querier of a fakeDevice. For each stream it
// answers how many of the stream's events, from the oldest, are reached or
// failing, and false where one of those failed. It checks what the Querier's
// contract asks of the Figure: no free without an event, no stream empty
// (and the race detector, that no two reaps use it at once).
type fakeQuerier struct {
	t   testing.TB
	d   *fakeDevice
	out []answer

	// What the test reads, under d.mu.
	queries   int     // Query calls
	asked     [][]int // the events of each stream of the last query
	destroyed []int
}

type answer struct {
	n  int
	ok bool
}

func (q *fakeQuerier) Query(events []int, ends []int) bool {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	if q.d.lost {
		return false
	}
	q.queries++
	q.asked, q.out = q.asked[:0], q.out[:0]
	start := 0
	for _, end := range ends {
		if end <= start || end > len(events) {
			q.t.Errorf("a stream of events[%d:%d], of %d", start, end, len(events))
			return false
		}
		a := answer{ok: true}
		if slices.Contains(events[start:end], 0) {
			q.t.Error("a free without an event was asked about")
		}
		for _, e := range events[start:end] {
			reached, failed := q.d.answered(e)
			if !reached {
				break
			}
			a.n++
			a.ok = a.ok && !failed
		}
		q.out = append(q.out, a)
		q.asked = append(q.asked, slices.Clone(events[start:end]))
		start = end
	}
	if start != len(events) {
		q.t.Errorf("events past the last stream: %d of %d", start, len(events))
	}
	return true
}

func (q *fakeQuerier) Reached(i int) (int, bool) { return q.out[i].n, q.out[i].ok }

func (q *fakeQuerier) Destroy(e int) {
	q.d.mu.Lock()
	q.destroyed = append(q.destroyed, e)
	q.d.mu.Unlock()
}

// reads returns what the querier was asked so far: its queries, and the
// events it destroyed.
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
	f.Init(q)
	return &fig{t: t, d: d, q: q, f: f}
}

// allocFree allocates size bytes in stream order and frees them on s,
// recording the free's event after it, as a backend's FreeAsync does, and
// returns the event.
func (h *fig) allocFree(s Stream, size int64) int {
	h.f.Add(size, true)
	return h.free(s, size, false)
}

// free frees size bytes, counted pooled, on s: with an event of its own
// context, reused where there is a spare, or (foreign) with a new event of
// another context.
func (h *fig) free(s Stream, size int64, foreign bool) int {
	n := h.f.TakeSpare()
	e := 0
	if n != nil {
		e = n.Event
	}
	if foreign && n != nil {
		h.f.PutSpare(n) // the stream's context needs an event of its own
		n, e = nil, 0
	}
	e, seq := h.d.record(s, e)
	if n == nil {
		n = new(Free[int])
	}
	*n = Free[int]{Event: e, Stream: s, Seq: seq, Size: size, Foreign: foreign}
	h.f.Enqueue(n)
	return e
}

// spares returns how many frees the figure keeps for reuse.
func (h *fig) spares() int {
	h.f.spareMu.Lock()
	defer h.f.spareMu.Unlock()
	return len(h.f.spare)
}

// load reads the figure, and requires it of the figure's counts: cur
// (peak, where not -1), the frees pending, the queries made so far.
func (h *fig) load(msg string, cur, peak int64, pending int64, queries int) {
	h.t.Helper()
	c, p := h.f.Load()
	require.Equal(h.t, cur, c, "%s: the figure", msg)
	if peak >= 0 {
		require.Equal(h.t, peak, p, "%s: the peak", msg)
	}
	require.Equal(h.t, pending, h.f.npending.Load(), "%s: the frees pending", msg)
	q, _ := h.q.reads()
	require.Equal(h.t, queries, q, "%s: the queries", msg)
}

// Streams of the tests: two of one context, one of another, and one that
// is not ordered.
var (
	streamA   = Stream{Context: 1, Handle: 10, Ordered: true}
	streamB   = Stream{Context: 1, Handle: 20, Ordered: true}
	streamC   = Stream{Context: 2, Handle: 10, Ordered: true}
	unordered = Stream{Context: 1, Handle: 2}
)
