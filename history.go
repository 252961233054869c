package memtrack

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// MaxHistoryEntries is the most events [Device.EnableMemoryHistory] keeps
// per device: 4 Mi events, 256 MiB of ring at 64 bytes an event (and 32 MiB
// more once allocation sites are recorded).
const MaxHistoryEntries = 1 << 22

// HistoryAction is what happened in a [HistoryEvent].
type HistoryAction uint8

// The actions a history records.
const (
	HistoryAlloc       HistoryAction = iota + 1 // a buffer was allocated
	HistoryFree                                 // a buffer was freed
	HistoryLimit                                // an allocation was refused by the memory limit
	HistoryOutOfMemory                          // an allocation was refused by the device (or the record's capacity)
	HistoryFailed                               // an allocation failed in the backend for another reason
	HistoryMark                                 // a named instant (Device.Mark, mark.go)
	HistoryBegin                                // the start of a named span (Device.BeginSpan)
	HistoryEnd                                  // the end of a span (Span.End)
)

var historyActionNames = [...]string{
	HistoryAlloc:       "alloc",
	HistoryFree:        "free",
	HistoryLimit:       "limit",
	HistoryOutOfMemory: "oom",
	HistoryFailed:      "failed",
	HistoryMark:        "mark",
	HistoryBegin:       "begin",
	HistoryEnd:         "end",
}

// String returns "alloc", "free", "limit", "oom", "failed", "mark",
// "begin" or "end".
func (a HistoryAction) String() string {
	if int(a) < len(historyActionNames) && historyActionNames[a] != "" {
		return historyActionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Refused reports whether the action is an allocation that did not happen:
// [HistoryLimit], [HistoryOutOfMemory] or [HistoryFailed].
func (a HistoryAction) Refused() bool { return a >= HistoryLimit && a <= HistoryFailed }

// HistoryEvent is one allocation, free or refused allocation on a device,
// or one of its marks ([Device.Mark], [Device.BeginSpan]).
type HistoryEvent struct {
	// Seq numbers the device's events from 0, in the order they took their
	// place in the history; a number missing between two events is a gap.
	Seq    uint64
	Time   time.Time     // when it happened (with a monotonic reading)
	Action HistoryAction // what happened
	Size   int64         // the bytes allocated, freed or asked for
	// Tracked is the device's tracked bytes ([Device.MemoryAllocated]) read
	// just after the event. With no other allocation or free running on the
	// device at once it is exact; under concurrency it is a figure the
	// device held at some moment between the event and its recording.
	Tracked int64
	// Stack is the allocation site of the buffer, innermost frame first, as
	// [Site].Stack, when [Device.EnableAllocationSites] recorded it (only
	// sampled allocations have one, unless [Device.SetAllocationSiteRate]
	// set the rate to 1); nil otherwise. Events of one site share the slice: do not modify it.
	Stack []uintptr
	// SiteBytes is what the event added to (an allocation) or took from (a
	// free) the bytes of its allocation site, [Site].Bytes: Size scaled by
	// the sampling weight the buffer was recorded with (Size itself at
	// rate 1), rounded to the byte; 0 where the buffer has no recorded
	// site. An event whose site is [OtherSite] has a SiteBytes and no
	// Stack. Undoing the events' SiteBytes from the newest walks the
	// figures of [Device.AllocationSites] back in time.
	SiteBytes int64
	// Stream is the stream of a stream-ordered event ([Device.AllocAsync],
	// [Buffer.FreeAsync]); 0, the default stream, for every other event.
	Stream uintptr
	// Category is the category of the buffer or the request
	// ([Category.Alloc]), or "" for none, and CategoryTracked the
	// category's tracked bytes read just after the event (as Tracked is
	// the device's); 0 for none.
	Category        string
	CategoryTracked int64
	// Mark is the name of a mark ([HistoryMark], [HistoryBegin],
	// [HistoryEnd]); "" for every other event. Span pairs a span's begin
	// and end: it is the Seq of the span's [HistoryBegin], in both; 0 for
	// every other event. A mark's Size is 0 and its Tracked the device's
	// tracked bytes at the mark.
	Mark string
	Span uint64
}

// HistoryGap is a run of events missing between two recorded ones: a viewer
// must not draw a line from the event before it to the event after it.
// Events go missing when a writer was lapped (the ring wrapped past it
// before it finished), or when its slot was being read at that moment.
type HistoryGap struct {
	After, Before uint64    // the Seq of the events either side
	Missing       uint64    // Before - After - 1
	From, To      time.Time // the times of the events either side
}

// History is the recorded allocation history of one device, the oldest
// event first.
type History struct {
	Device     Device
	MaxEntries int       // the most events the ring keeps
	Start      time.Time // when recording began
	Events     []HistoryEvent
	Gaps       []HistoryGap
	// Overwritten counts the events older than Events that the ring let go,
	// Lost the events that never made it into the ring (see [HistoryGap]),
	// both since recording began.
	Overwritten, Lost uint64
}

// EnableMemoryHistory starts recording every allocation, free and refused
// allocation on the device into a ring of maxEntries events (1 <=
// maxEntries <= [MaxHistoryEntries]): once full, each event replaces the
// oldest. The ring takes 64 bytes an event, allocated and touched now, holding no
// pointer (so the garbage collector does not scan it), and 8 bytes more an
// event once an event has an allocation site; recording adds no lock and no
// allocation to Alloc and Free. Read it with
// [Device.MemoryHistory]. On a device already recording with the same
// maxEntries it changes nothing; with another it starts a new, empty ring.
// Recording is the model of PyTorch's
// torch.cuda.memory._record_memory_history(max_entries=...).
func (d Device) EnableMemoryHistory(maxEntries int) error {
	if maxEntries < 1 || maxEntries > MaxHistoryEntries {
		return fmt.Errorf("%w: history of %d events on %v: want 1 to %d", ErrInvalidArgument, maxEntries, d, MaxHistoryEntries)
	}
	if _, _, err := d.resolve(); err != nil {
		return err
	}
	tables[d.kind].history.enable(d.ordinal, maxEntries)
	return nil
}

// DisableMemoryHistory stops recording the device's history and drops what
// was recorded. Recording that is off stays off.
func (d Device) DisableMemoryHistory() {
	if _, _, err := d.resolve(); err == nil {
		tables[d.kind].history.disable(d.ordinal)
	}
}

// MemoryHistory returns the device's recorded events, the oldest first,
// with the gaps between them. It fails with an error matching
// [ErrHistoryNotRecorded] unless [Device.EnableMemoryHistory] was called.
// Reading does not stop recording; an event being written as it reads is
// left out (and, if newer events were read, reported as a gap). Readers
// of one device take turns, so that no reader leaves out an event that
// another is reading.
func (d Device) MemoryHistory() (History, error) {
	s, _, err := d.resolve()
	if err != nil {
		return History{Device: d}, err
	}
	h := tables[d.kind].history.lookup(d.ordinal)
	if h == nil {
		return History{Device: d}, fmt.Errorf("%w on %v: call Device.EnableMemoryHistory first", ErrHistoryNotRecorded, d)
	}
	hist := h.snapshotIn(s.cats.lookup(d.ordinal))
	hist.Device = d
	return hist, nil
}

// RangeMemoryHistory gives f the device's recorded events one by one, the
// oldest first, as [Device.MemoryHistory] returns them, until f returns
// false, and returns the history without its Events: its Gaps (between the
// events f was given), Overwritten and Lost. It reads the ring in place, so
// that a reader that keeps little of each event needs memory for what it
// keeps only, however long the history (package
// github.com/memtrack/memtrack/web plots a ring of millions of events this
// way). Recording goes on while it reads, as with MemoryHistory; readers
// of one device take turns for the whole read, so f must not read the
// device's history itself. It fails as MemoryHistory does, calling f never.
func (d Device) RangeMemoryHistory(f func(HistoryEvent) bool) (History, error) {
	if f == nil {
		return History{Device: d}, fmt.Errorf("%w: RangeMemoryHistory of %v: nil function", ErrInvalidArgument, d)
	}
	s, _, err := d.resolve()
	if err != nil {
		return History{Device: d}, err
	}
	h := tables[d.kind].history.lookup(d.ordinal)
	if h == nil {
		return History{Device: d}, fmt.Errorf("%w on %v: call Device.EnableMemoryHistory first", ErrHistoryNotRecorded, d)
	}
	hist := h.each(s.cats.lookup(d.ordinal), nil, f)
	hist.Device = d
	return hist, nil
}

// historyTable holds the histories of one kind's devices, by ordinal.
type historyTable struct {
	recorders[history]
}

func (t *historyTable) enable(i, n int) {
	t.update(i, func(old *history) *history {
		if old != nil && len(old.slots) == n {
			return old
		}
		return newHistory(n)
	})
}

func (t *historyTable) disable(i int) {
	t.update(i, func(*history) *history { return nil })
}

// refused records a refused allocation of size bytes on device i, if its
// history is recorded. err is the refusal: a limit (tracker.ErrLimitExceeded,
// or nil for memtrack's own check of the limit), an *OutOfMemoryError or
// another failure.
func (t *historyTable) refused(i int, size int64, rec *tracker.Record, err error) {
	t.refusedIn(i, size, rec, err, 0, nil)
}

// refusedIn is refused for a request in category cat (1-based) whose
// record is crec, or 0 and nil for none.
func (t *historyTable) refusedIn(i int, size int64, rec *tracker.Record, err error, cat uint8, crec *tracker.Record) {
	h := t.lookup(i)
	if h == nil {
		return
	}
	var oom *OutOfMemoryError
	a := HistoryFailed
	switch {
	case err == nil || errors.Is(err, tracker.ErrLimitExceeded):
		a = HistoryLimit
	case errors.As(err, &oom), errors.Is(err, tracker.ErrCapacity):
		a = HistoryOutOfMemory
	}
	h.recordIn(a, size, rec.Tracked(), nil, 0, cat, trackedOf(crec))
}

// The states of a history slot, in the low bits of its sequence word; the
// high bits hold the event's number plus one (0: never written).
const (
	slotWriting uint64 = 1 // a writer owns the slot
	slotDone    uint64 = 2 // the slot holds the event
	slotReading uint64 = 3 // a reader is copying the event
	slotMask    uint64 = 3
)

// history is one device's ring of events. Writers take a ticket (the
// event's number) with one atomic add and own slot ticket%len(slots) while
// they write it: they claim it with a compare-and-swap from an older,
// finished event, write the plain fields, and publish with a store. A writer
// never waits: if the slot is held (by a reader, or by a lapped writer still
// writing), or already holds a newer event, the event is dropped and counted
// as lost. Readers claim each slot the same way while they copy it, one
// reader at a time (readMu): a reader that met another's claim could not
// tell it from a writer's. The claims order the plain writes and reads, so
// the race detector agrees.
//
// The slots hold no pointer, so that the garbage collector need not scan a
// ring of millions of events; the events' sites are kept beside them, by
// slot, in an array made on the first event that has a site.
type history struct {
	head   atomic.Uint64 // the next event's number
	lost   atomic.Uint64 // events dropped by writers
	readMu sync.Mutex    // readers take turns; writers never take it
	start  time.Time     // the clock of the events' times
	slots  []historySlot
	sites  atomic.Pointer[[]*site] // by slot; written and read as the slot is
	marks  markNames               // the names of its marks (mark.go)
}

// historySlot is one event in the ring, 64 bytes.
type historySlot struct {
	seq    atomic.Uint64 // (number+1)<<2 | state
	nanos  int64         // since start
	size   int64
	cur    int64
	stream uintptr
	ccur   int64 // the category's tracked bytes
	action HistoryAction
	cat    uint8  // the category, 1-based; 0 for none
	mark   uint32 // the mark's name in the history's names (mark.go), 1-based; 0 for none
	_      [64 - 56]byte
}

func newHistory(n int) *history {
	h := &history{start: time.Now(), slots: make([]historySlot, n)}
	// Touch every page now, so that the OS maps them at enabling rather
	// than in a page fault on the allocation path the first time round.
	const perPage = 4096 / int(unsafe.Sizeof(historySlot{}))
	for i := 0; i < n; i += perPage {
		h.slots[i].nanos = -1
		h.slots[i].nanos = 0
	}
	return h
}

// alloc records an allocation; s is its site, if recorded, and stream the
// stream of a stream-ordered allocation.
func (h *history) alloc(size int64, s *site, rec *tracker.Record, stream Stream) {
	h.recordIn(HistoryAlloc, size, rec.Tracked(), s, stream, 0, 0)
}

// free records a free; s is the buffer's site, if recorded, and stream the
// stream of a stream-ordered free.
func (h *history) free(size int64, s *site, rec *tracker.Record, stream Stream) {
	h.recordIn(HistoryFree, size, rec.Tracked(), s, stream, 0, 0)
}

// allocIn and freeIn are alloc and free in category cat (1-based; 0 for
// none) whose record is crec (nil for none).
func (h *history) allocIn(size int64, s *site, rec *tracker.Record, stream Stream, cat uint8, crec *tracker.Record) {
	h.recordIn(HistoryAlloc, size, rec.Tracked(), s, stream, cat, trackedOf(crec))
}

func (h *history) freeIn(size int64, s *site, rec *tracker.Record, stream Stream, cat uint8, crec *tracker.Record) {
	h.recordIn(HistoryFree, size, rec.Tracked(), s, stream, cat, trackedOf(crec))
}

// trackedOf returns the bytes r tracks, or 0 for nil.
func trackedOf(r *tracker.Record) int64 {
	if r == nil {
		return 0
	}
	return r.Tracked()
}

// record writes one event without a category into the ring, or counts it
// lost.
func (h *history) record(a HistoryAction, size, cur int64, s *site, stream Stream) {
	h.recordIn(a, size, cur, s, stream, 0, 0)
}

// recordIn writes one event of category cat (0: none), which tracks ccur
// bytes after it, into the ring, or counts it lost.
func (h *history) recordIn(a HistoryAction, size, cur int64, s *site, stream Stream, cat uint8, ccur int64) {
	h.put(a, size, cur, s, stream, cat, ccur, 0)
}

// put writes one event into the ring, or counts it lost, and returns its
// number; mark is a mark's name (mark.go), 0 for none.
func (h *history) put(a HistoryAction, size, cur int64, s *site, stream Stream, cat uint8, ccur int64, mark uint32) uint64 {
	nanos := int64(time.Since(h.start))
	t := h.head.Add(1) - 1
	if sl := h.claim(t); sl != nil {
		sl.nanos, sl.size, sl.cur, sl.stream, sl.action, sl.cat, sl.ccur, sl.mark = nanos, size, cur, uintptr(stream), a, cat, ccur, mark
		if p := h.sites.Load(); p != nil {
			(*p)[t%uint64(len(h.slots))] = s
		} else if s != nil {
			(*h.makeSites())[t%uint64(len(h.slots))] = s
		}
		sl.seq.Store((t+1)<<2 | slotDone)
	}
	return t
}

// makeSites makes the array of the events' sites, once.
func (h *history) makeSites() *[]*site {
	p := new([]*site)
	*p = make([]*site, len(h.slots))
	if h.sites.CompareAndSwap(nil, p) {
		return p
	}
	return h.sites.Load()
}

// claim makes the writer of event t the owner of its slot, or counts the
// event lost and returns nil: if a reader or another writer holds the slot,
// or it already holds a newer event. The owner publishes the event by
// storing (t+1)<<2|slotDone into the slot's seq.
func (h *history) claim(t uint64) *historySlot {
	sl := &h.slots[t%uint64(len(h.slots))]
	old := sl.seq.Load()
	if st := old & slotMask; st == slotWriting || st == slotReading || old>>2 > t ||
		!sl.seq.CompareAndSwap(old, (t+1)<<2|slotWriting) {
		h.lost.Inc()
		return nil
	}
	return sl
}

// snapshot copies the events still in the ring, the oldest first, and the
// gaps between them.
func (h *history) snapshot() History { return h.snapshotIn(nil) }

// snapshotIn is snapshot, with the events' categories named from cats.
func (h *history) snapshotIn(cats *categorySet) History {
	var events []HistoryEvent
	out := h.each(cats, func(n uint64) { events = make([]HistoryEvent, 0, n) }, func(e HistoryEvent) bool {
		events = append(events, e)
		return true
	})
	out.Events = events
	return out
}

// each reads the events still in the ring, the oldest first, and gives
// each to f until f returns false; before the first, it tells begin how
// many slots it will read. It returns the history without its events: the
// gaps between those f was given, and the counts. Each event's slot is
// claimed while it is copied and let go before f runs; readers take turns
// for the whole read. cats names the events' categories (nil names none).
func (h *history) each(cats *categorySet, begin func(slots uint64), f func(HistoryEvent) bool) History {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	head := h.head.Load()
	n := uint64(len(h.slots))
	first := uint64(0)
	if head > n {
		first = head - n
	}
	out := History{MaxEntries: len(h.slots), Start: h.start, Overwritten: first}
	if begin != nil {
		begin(head - first)
	}
	stacks := make(map[*stack][]uintptr) // one copy of each site's stack
	sites := h.sites.Load()
	var prev HistoryEvent
	read := false
	for t := first; t < head; t++ {
		sl := &h.slots[t%n]
		done := (t+1)<<2 | slotDone
		if sl.seq.Load() != done || !sl.seq.CompareAndSwap(done, (t+1)<<2|slotReading) {
			continue // being written, lapped, or dropped
		}
		e := HistoryEvent{
			Seq:             t,
			Time:            h.start.Add(time.Duration(sl.nanos)),
			Action:          sl.action,
			Size:            sl.size,
			Tracked:         sl.cur,
			Stream:          sl.stream,
			Category:        cats.name(sl.cat),
			CategoryTracked: sl.ccur,
		}
		if sl.mark != 0 {
			h.readMark(&e, sl.mark) // mark.go
		}
		var s *site
		if sites != nil {
			s = (*sites)[t%n]
		} else if sites = h.sites.Load(); sites != nil { // made since
			s = (*sites)[t%n]
		}
		sl.seq.Store(done)
		if s != nil {
			e.SiteBytes = int64(math.Round(s.bytes))
		}
		if s != nil && s.st != nil && s.st.pcs != nil {
			st, ok := stacks[s.st]
			if !ok {
				st = append([]uintptr(nil), s.st.pcs...)
				stacks[s.st] = st
			}
			e.Stack = st
		}
		if read && e.Seq != prev.Seq+1 {
			out.Gaps = append(out.Gaps, HistoryGap{After: prev.Seq, Before: e.Seq, Missing: e.Seq - prev.Seq - 1, From: prev.Time, To: e.Time})
		}
		prev, read = e, true
		if !f(e) {
			break
		}
	}
	out.Lost = h.lost.Load()
	return out
}
