package held

import (
	"slices"
	"sync"
)

// Stream names the stream of a free as the adapter keys it: its handle,
// one for each stream of the device (the adapter folds the several handles
// of one stream, such as those of CUDA's legacy default stream, into one,
// and names a default stream in the device's own context). A handle names
// one stream at a time for the frees pending on it: a destroyed stream's
// resources are released once the device has completed its work
// (cuStreamDestroy, hipStreamDestroy), so that a stream created later with
// the same handle finds every event of the old one reached.
type Stream struct {
	Handle uintptr
	// Ordered says that the handle names one stream, which reaches the
	// events of its frees in the order of their numbers (Free.Seq): not so
	// CUDA's per-thread default stream, whose handle names another stream
	// on each thread. The frees of a stream not Ordered are asked about one
	// by one, and no allocation takes them over. It is the stream's: the
	// same for every free of one Handle.
	Ordered bool
}

// Free is one buffer freed in stream order, with the event recorded after
// it on its stream.
type Free[E comparable] struct {
	Event   E      // recorded after the free
	Stream  Stream // the free's stream
	Seq     uint64 // the event's number, which rises along its stream's order
	Size    int64  // the buffer's bytes
	Foreign bool   // Event is of another context than the device's own: destroyed once reached, not kept
}

// entry is what the Figure keeps of one stream: the frees pending on it.
type entry[E comparable] struct {
	handle  uintptr
	ordered bool

	mu   sync.Mutex
	gone bool  // dropped from the table: a free that finds it looks again
	last Order // the newest free counted on the stream
	// segs are the frees pending on the stream: of an Ordered stream in
	// the order of their events' numbers, which is the order the stream
	// reaches them; of a stream not Ordered, as they came. Each keeps the
	// bytes no allocation took over.
	segs  []segment[E]
	quiet int // readings in a row that found nothing pending on it (under reapMu)
}

// segment is a free pending on a stream: its event, its number there, and
// its bytes, less what allocations on the stream took over.
type segment[E comparable] struct {
	event   E
	seq     uint64
	bytes   int64
	foreign bool
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

// Freed counts n, a free in stream order enqueued with its event recorded
// after it: the figure keeps its bytes until a reading finds its stream
// has reached the event, or an allocation on the stream takes them over.
// Once PendingBound frees wait (or twice what the last reading left, where
// more), it learns of executed frees itself, unless another reading is
// under way, so that a program that never reads its figures keeps few
// frees, and events, waiting.
func (f *Figure[E, Q]) Freed(n Free[E]) {
	e := f.lockEntry(n.Stream)
	e.last = Order(f.seq.Add(1))
	s := segment[E]{event: n.Event, seq: n.Seq, bytes: n.Size, foreign: n.Foreign}
	if i := len(e.segs); i == 0 || !e.ordered || e.segs[i-1].seq < n.Seq {
		e.segs = append(e.segs, s)
	} else {
		// Two goroutines that free on one stream at once may count their
		// frees in another order than the stream's: the events' numbers
		// give the stream's.
		for i > 0 && e.segs[i-1].seq > n.Seq {
			i--
		}
		e.segs = slices.Insert(e.segs, i, s)
	}
	f.pending.Add(n.Size)
	e.mu.Unlock()
	if f.npending.Add(1) >= max(f.reapAt.Load(), PendingBound) && f.reapMu.TryLock() {
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
	var take int64
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
// has reached, for the next free in stream order to record again, and
// false where there is none. An event taken and not handed to Freed goes
// back by PutSpare.
func (f *Figure[E, Q]) TakeSpare() (E, bool) {
	f.spareMu.Lock()
	k := len(f.spare)
	if k == 0 {
		f.spareMu.Unlock()
		var none E
		return none, false
	}
	e := f.spare[k-1]
	f.spare = f.spare[:k-1]
	f.spareMu.Unlock()
	return e, true
}

// PutSpare keeps e, an event of the device's own context that no stream
// has yet to reach, for reuse.
func (f *Figure[E, Q]) PutSpare(e E) {
	f.spareMu.Lock()
	f.spare = append(f.spare, e)
	f.spareMu.Unlock()
}
