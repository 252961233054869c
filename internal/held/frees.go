package held

import (
	"cmp"
	"slices"
)

// Querier is how a [Figure] learns that its frees in stream order have
// executed: the driver's queries of events recorded on streams, bound to
// the device whose figure it is (the driver's context to ask in). The
// Figure calls it with one reap at a time.
type Querier[E comparable] interface {
	// Query asks the driver, in one call, how far each of some streams
	// has come through its events: stream i's are events[ends[i-1]:ends[i]]
	// (from 0 for the first), none empty, in the order the stream reaches
	// them. It asks each stream's newest first, every older one being
	// reached where it is. It returns false where the device cannot be
	// asked (it is lost): nothing will run on it again, and every event
	// counts as reached. The slices are the Figure's, and not to be kept.
	Query(events []E, ends []int) bool
	// Reached returns how many of stream i's events, from the oldest, the
	// stream has reached, as Query found, and false where a query failed
	// (the event or its context is gone): those count as reached, and
	// their events are not to be recorded again.
	Reached(i int) (n int, ok bool)
	// Destroy destroys e, an event of another context than the device's
	// own, once reached: only events of the device's own context are kept
	// for reuse.
	Destroy(e E)
}

// Stream names the stream of a free, as the adapter keys it: its handle in
// the stream's context, one handle for each stream (the adapter folds the
// several handles of one stream, such as those of CUDA's legacy default
// stream, into one). A handle names one stream at a time for the frees
// pending on it: a destroyed stream's resources are released once the
// device has completed its work (cuStreamDestroy, hipStreamDestroy), so
// that a stream created later with the same handle finds every event of
// the old one reached.
type Stream struct {
	Context uintptr // the stream's context, as the driver names it
	Handle  uintptr
	// Ordered says that the stream reaches the events of its frees in the
	// order of their numbers (Free.Seq): not so on CUDA's per-thread
	// default stream, whose handle names another stream on each thread.
	// The frees of a stream not Ordered are asked about one by one. It is
	// the stream's: the same for every free of one Context and Handle.
	Ordered bool
}

// same reports whether s and t name one stream.
func (s Stream) same(t Stream) bool { return s.Context == t.Context && s.Handle == t.Handle }

// Free is one buffer freed in stream order, awaiting the event recorded
// after the free on its stream. The adapter fills it in, in a Free of
// TakeSpare or a new one, and hands it to Enqueue or Executed, which own it
// from then on: once its stream has reached the event, the Figure keeps it
// with its event, for another free to record again (TakeSpare).
type Free[E comparable] struct {
	Event   E      // recorded after the free; the zero E where none was
	Stream  Stream // the free's stream
	Seq     uint64 // the event's number, which rises along its stream's order
	Size    int64  // the buffer's bytes
	Foreign bool   // Event is of another context than the device's own: destroyed once reached, not kept
	next    *Free[E]
}

// PendingBound is how many frees may wait for their events before
// [Figure.Enqueue] reaps them itself.
const PendingBound = 64

// TakeSpare returns a Free whose event its stream has reached, for the next
// free in stream order to record again, or nil where there is none. A
// Free taken and not handed to Enqueue or Executed goes back by PutSpare.
func (f *Figure[E, Q]) TakeSpare() *Free[E] {
	f.spareMu.Lock()
	defer f.spareMu.Unlock()
	k := len(f.spare)
	if k == 0 {
		return nil
	}
	n := f.spare[k-1]
	f.spare[k-1] = nil
	f.spare = f.spare[:k-1]
	return n
}

// PutSpare keeps n, a Free of TakeSpare whose event no free recorded, for
// reuse.
func (f *Figure[E, Q]) PutSpare(n *Free[E]) {
	f.spareMu.Lock()
	f.spare = append(f.spare, n)
	f.spareMu.Unlock()
}

// Enqueue counts free n as enqueued on its stream, its event recorded
// after it: the figure keeps its bytes until a reading finds the stream
// has reached the event. Once PendingBound frees wait (or twice what the
// last reading left, where more), it learns of executed frees itself,
// unless another reading is under way, so that a program that never reads
// its figures keeps few frees, and events, waiting.
func (f *Figure[E, Q]) Enqueue(n *Free[E]) {
	for {
		n.next = f.pending.Load()
		if f.pending.CompareAndSwap(n.next, n) {
			break
		}
	}
	if f.npending.Add(1) >= max(f.reapAt.Load(), PendingBound) && f.reapMu.TryLock() {
		f.reapLocked()
		f.reapMu.Unlock()
	}
}

// Executed uncounts free n, which is known to have executed (its stream
// was synchronized where its event could not be recorded), and keeps its
// event, never recorded, for reuse where it has one (or destroys it, where
// Foreign).
func (f *Figure[E, Q]) Executed(n *Free[E]) {
	f.Drop(n.Size, true)
	var none E
	if n.Event != none {
		f.retire([]*Free[E]{n}, true)
	}
}

// reap uncounts the pending frees whose streams have executed them, and
// keeps the others pending. It asks each stream with frees pending, in one
// call of the querier: the newest event first, which retires all of them
// where the stream has reached it, and otherwise the first one not reached.
// A query that fails (the event or its context is gone) retires the free
// too: nothing would ever reach it.
func (f *Figure[E, Q]) reap() {
	if f.npending.Load() == 0 {
		if f.reapAt.Load() != 0 {
			f.reapAt.Store(0)
		}
		return
	}
	f.reapMu.Lock()
	f.reapLocked()
	f.reapMu.Unlock()
}

// reapLocked is reap, with reapMu held.
func (f *Figure[E, Q]) reapLocked() {
	// Enqueue reaps next at twice what this reap leaves, so that a stream
	// far behind is not queried at every free, and a reap that leaves
	// little brings the bound back down.
	defer func() { f.reapAt.Store(2 * f.npending.Load()) }()
	w := f.waiting
	k := len(w)
	for n := f.pending.Swap(nil); n != nil; n = n.next {
		w = append(w, n)
	}
	if len(w) == 0 {
		return
	}
	// The stack gives the newest first: reversed, the frees of one stream
	// that one goroutine pushed come in their stream's order, after those
	// that waited already, and the frees need no sort.
	slices.Reverse(w[k:])
	if !slices.IsSortedFunc(w, byStream[E]) {
		slices.SortFunc(w, byStream[E])
	}
	// The frees of one Ordered stream are asked about together, each of
	// another alone.
	events, ends := f.events[:0], f.ends[:0]
	for i, n := range w {
		events = append(events, n.Event)
		if i+1 == len(w) || !w[i+1].Stream.same(n.Stream) || !n.Stream.Ordered {
			ends = append(ends, i+1)
		}
	}
	f.events, f.ends = events, ends
	asked := f.queries.Query(events, ends)
	kept, start, retired, bytes := w[:0], 0, int64(0), int64(0)
	for i, end := range ends {
		reached, ok := end-start, true // a lost device: nothing would ever reach them, retired
		if asked {
			reached, ok = f.queries.Reached(i)
			reached = min(max(reached, 0), end-start)
		}
		done := w[start : start+reached]
		for _, n := range done {
			bytes += n.Size
		}
		retired += int64(len(done))
		f.retire(done, ok)
		kept = append(kept, w[start+reached:end]...)
		start = end
	}
	clear(w[len(kept):]) // the retired, held by the slice no more
	f.waiting = kept
	f.npending.Add(-retired)
	f.Drop(bytes, true)
}

// retire ends the wait of frees, whose stream has reached their events
// (ok) or whose query failed: an event of the device's own context is
// kept, with its Free, for the next frees; one of another context is
// destroyed; one whose query failed is left alone.
func (f *Figure[E, Q]) retire(frees []*Free[E], ok bool) {
	for _, n := range frees {
		if n.Foreign {
			f.queries.Destroy(n.Event)
		}
	}
	if !ok || len(frees) == 0 {
		return
	}
	// Once kept, a Free is another goroutine's to take (TakeSpare): it is
	// read no more here.
	f.spareMu.Lock()
	for _, n := range frees {
		if !n.Foreign {
			*n = Free[E]{Event: n.Event}
			f.spare = append(f.spare, n)
		}
	}
	f.spareMu.Unlock()
}

// byStream orders frees by stream, then in each stream's order.
func byStream[E comparable](a, b *Free[E]) int {
	if c := cmp.Compare(a.Stream.Context, b.Stream.Context); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Stream.Handle, b.Stream.Handle); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}
