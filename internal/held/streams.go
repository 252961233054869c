package held

import (
	"slices"
	"sync"
)

// Stream names the stream of a free as the adapter keys it: its handle,
// one for each stream of the device (the adapter folds the several handles
// of one stream, such as those of CUDA's legacy default stream, into one,
// and names a default stream in the device's own context), and the
// stream's context, in which its events are recorded. A handle names one
// stream at a time for the frees pending on it: a destroyed stream's
// resources are released once the device has completed its work
// (cuStreamDestroy, hipStreamDestroy), so that a stream created later with
// the same handle finds every free of the old one executed.
type Stream struct {
	Handle  uintptr
	Context uintptr // the stream's context, as the driver names it
	// Ordered says that the handle names one stream, which runs its frees
	// in the order they were enqueued: not so CUDA's per-thread default
	// stream, whose handle names another stream on each thread. The frees
	// of a stream not Ordered each come with an event of their own
	// (FreedWithEvent), and no allocation takes them over. It is the
	// stream's: the same for every free of one Handle.
	Ordered bool
}

// entry is what the Figure keeps of one stream: the frees pending on it,
// in the order they were counted, and the events its readings recorded.
type entry[E comparable] struct {
	handle  uintptr
	ordered bool

	mu   sync.Mutex
	gone bool    // dropped from the table: a free that finds it looks again
	ctx  uintptr // the stream's context, as the last free gave it
	last Order   // the newest free counted on the stream
	// open is the bytes of the frees counted since a reading last sealed
	// them into a segment, less what allocations took over.
	open int64
	// segs are the frees a reading sealed, oldest first: of an Ordered
	// stream, those with an event recorded after them, then at most one
	// without (sealed, no event recorded yet); of a stream not Ordered,
	// one per free, each with its event.
	segs []segment[E]
	// spares are events of the stream's context that it reached, for its
	// next readings to record again.
	spares []E
	quiet  int // readings in a row that found nothing pending on it (under reapMu)
}

// segment is frees of one stream counted together: their bytes, less what
// allocations took over, and the event recorded after them on the stream,
// or the zero E where none is yet.
type segment[E comparable] struct {
	event E
	bytes int64
}

// marked returns how many of e's segments, from the oldest, have their
// event (e.mu held).
func (e *entry[E]) marked() int {
	var none E
	if n := len(e.segs); n > 0 && e.segs[n-1].event == none {
		return n - 1
	}
	return len(e.segs)
}

// table is the Figure's streams, replaced whole when one is added or
// dropped, so that a free or an allocation finds its stream's entry
// without a lock.
type table[E comparable] struct {
	list     []*entry[E]
	byHandle map[uintptr]*entry[E] // where there are more than tableScan
}

// tableScan is how many streams a table finds by looking through its list;
// past it, by a map.
const tableScan = 8

func (t *table[E]) find(h uintptr) *entry[E] {
	if t.byHandle != nil {
		return t.byHandle[h]
	}
	for _, e := range t.list {
		if e.handle == h {
			return e
		}
	}
	return nil
}

// newTable returns the table of list.
func newTable[E comparable](list []*entry[E]) *table[E] {
	t := &table[E]{list: list}
	if len(list) > tableScan {
		t.byHandle = make(map[uintptr]*entry[E], len(list))
		for _, e := range list {
			t.byHandle[e.handle] = e
		}
	}
	return t
}

// lockEntry returns the entry of stream s, made where there is none,
// locked.
func (f *Figure[E, Q]) lockEntry(s Stream) *entry[E] {
	for {
		e := f.streams.Load().find(s.Handle)
		if e == nil {
			e = f.addEntry(s)
		}
		e.mu.Lock()
		if !e.gone {
			return e
		}
		e.mu.Unlock()
	}
}

// addEntry returns the entry of stream s, adding one to the table where
// it has none.
func (f *Figure[E, Q]) addEntry(s Stream) *entry[E] {
	f.tableMu.Lock()
	defer f.tableMu.Unlock()
	t := f.streams.Load()
	if e := t.find(s.Handle); e != nil {
		return e
	}
	e := &entry[E]{handle: s.Handle, ordered: s.Ordered}
	f.streams.Store(newTable(append(slices.Clip(t.list), e)))
	return e
}

// Freed counts a free of size bytes in stream order on s, an Ordered
// stream, enqueued (the driver's free returned): the figure keeps its
// bytes until a reading learns that s has run it, or an allocation on s
// takes them over. It calls no driver.
func (f *Figure[E, Q]) Freed(s Stream, size int64) {
	e := f.lockEntry(s)
	e.ctx = s.Context
	e.last = Order(f.seq.Add(1))
	e.open += size
	f.pending.Add(size)
	e.mu.Unlock()
}

// FreedWithEvent counts a free of size bytes in stream order on s, a
// stream not Ordered, with event recorded after it on the stream: the
// figure keeps its bytes until a reading finds the event reached. Once
// PendingBound such frees wait, it reads itself, unless another reading
// is under way, so that a program that never reads its figures keeps few
// of them, and their events, waiting.
func (f *Figure[E, Q]) FreedWithEvent(s Stream, size int64, event E) {
	e := f.lockEntry(s)
	e.ctx = s.Context
	e.segs = append(e.segs, segment[E]{event: event, bytes: size})
	f.pending.Add(size)
	e.mu.Unlock()
	if f.unordered.Add(1) >= PendingBound && f.reapMu.TryLock() {
		f.reapLocked()
		f.reapMu.Unlock()
	}
}

// takeOver takes, for an allocation of size bytes in stream order on
// stream, asked of the driver after at, the bytes of the frees pending on
// the stream, the newest first, and returns how many it took: none where
// a free was counted on the stream after at, which may have come after
// the allocation there (taking none then only overstates the figure).
func (f *Figure[E, Q]) takeOver(stream uintptr, at Order, size int64) int64 {
	e := f.streams.Load().find(stream)
	if e == nil || !e.ordered {
		return 0
	}
	e.mu.Lock()
	if e.gone || e.last > at {
		e.mu.Unlock()
		return 0
	}
	take := min(size, e.open)
	e.open -= take
	for i := len(e.segs) - 1; i >= 0 && take < size; i-- {
		t := min(size-take, e.segs[i].bytes)
		e.segs[i].bytes -= t
		take += t
	}
	f.pending.Add(-take)
	e.mu.Unlock()
	return take
}

// TakeSpare returns an event of the device's own context that its stream
// has reached, for a free on a stream not Ordered to record again, and
// false where there is none. An event taken and not handed to
// FreedWithEvent goes back by PutSpare.
func (f *Figure[E, Q]) TakeSpare() (E, bool) {
	f.spareMu.Lock()
	defer f.spareMu.Unlock()
	k := len(f.spare)
	if k == 0 {
		var none E
		return none, false
	}
	e := f.spare[k-1]
	f.spare = f.spare[:k-1]
	return e, true
}

// PutSpare keeps e, an event of the device's own context that no stream
// has yet to reach, for reuse.
func (f *Figure[E, Q]) PutSpare(e E) {
	f.spareMu.Lock()
	f.spare = append(f.spare, e)
	f.spareMu.Unlock()
}
