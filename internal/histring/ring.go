package histring

import (
	"sync"
	// sync/atomic, not go.uber.org/atomic: the ring's 64-bit words must
	// be 8-byte aligned on 32-bit platforms, which sync/atomic's types
	// guarantee and go.uber.org/atomic's do not.
	"sync/atomic"
	"time"
	"unsafe"
)

// The states of a slot, in the low bits of its sequence word; the high
// bits hold the event's number plus one (0: never written).
const (
	slotWriting uint64 = 1 // a writer owns the slot
	slotDone    uint64 = 2 // the slot holds the event
	slotReading uint64 = 3 // a reader is copying the event
	slotMask    uint64 = 3
)

// Event is one event as the ring holds it. Action, Category and Mark are
// the caller's codes, which the ring does not read.
type Event[S any] struct {
	Seq             uint64 // the event's number, from 0
	Time            time.Time
	Action          uint8
	Category        uint8
	Size            int64
	Tracked         int64 // the device's figure just after the event
	CategoryTracked int64 // the category's figure just after the event
	Stream          uintptr
	Mark            uint32
	Site            *S // nil for none
}

// Gap is a run of events a read could not give: dropped by their writers,
// or being written as it read.
type Gap struct {
	After, Before uint64    // the numbers of the events read on either side
	From, To      time.Time // their times
}

// Ring is one device's ring of events.
type Ring[S any] struct {
	head   atomic.Uint64 // the next event's number
	lost   atomic.Uint64 // events dropped by writers
	readMu sync.Mutex    // readers take turns; writers never take it
	start  time.Time     // the clock of the events' times
	slots  []slot
	sites  atomic.Pointer[[]*S] // by slot; written and read as the slot is
}

// slot is one event in the ring, 64 bytes, with no pointer.
type slot struct {
	seq    atomic.Uint64 // (number+1)<<2 | state
	nanos  int64         // since start
	size   int64
	cur    int64
	stream uintptr
	ccur   int64 // the category's tracked bytes
	action uint8
	cat    uint8
	mark   uint32
	_      [64 - 56]byte
}

// New returns a ring of n >= 1 events, its memory touched now, so that the
// OS maps it at once rather than in page faults on the allocation path.
func New[S any](n int) *Ring[S] {
	h := &Ring[S]{start: time.Now(), slots: make([]slot, n)}
	const perPage = 4096 / int(unsafe.Sizeof(slot{}))
	for i := 0; i < n; i += perPage {
		h.slots[i].nanos = -1
		h.slots[i].nanos = 0
	}
	return h
}

// Len returns how many events the ring holds when full.
func (h *Ring[S]) Len() int { return len(h.slots) }

// Start returns the moment the ring was made: the clock of its events.
func (h *Ring[S]) Start() time.Time { return h.start }

// Record writes one event into the ring, or counts it lost, and returns
// its number.
func (h *Ring[S]) Record(action uint8, size, cur int64, site *S, stream uintptr, cat uint8, ccur int64, mark uint32) uint64 {
	nanos := int64(time.Since(h.start))
	t := h.head.Add(1) - 1
	if sl := h.claim(t); sl != nil {
		sl.nanos, sl.size, sl.cur, sl.stream, sl.action, sl.cat, sl.ccur, sl.mark = nanos, size, cur, stream, action, cat, ccur, mark
		if p := h.sites.Load(); p != nil {
			(*p)[t%uint64(len(h.slots))] = site
		} else if site != nil {
			(*h.makeSites())[t%uint64(len(h.slots))] = site
		}
		sl.seq.Store((t+1)<<2 | slotDone)
	}
	return t
}

// makeSites makes the array of the events' sites, once.
func (h *Ring[S]) makeSites() *[]*S {
	p := new([]*S)
	*p = make([]*S, len(h.slots))
	if h.sites.CompareAndSwap(nil, p) {
		return p
	}
	return h.sites.Load()
}

// claim makes the writer of event t the owner of its slot, or counts the
// event lost and returns nil: if a reader or another writer holds the slot,
// or it already holds a newer event. The owner publishes the event by
// storing (t+1)<<2|slotDone into the slot's seq.
func (h *Ring[S]) claim(t uint64) *slot {
	sl := &h.slots[t%uint64(len(h.slots))]
	old := sl.seq.Load()
	if st := old & slotMask; st == slotWriting || st == slotReading || old>>2 > t ||
		!sl.seq.CompareAndSwap(old, (t+1)<<2|slotWriting) {
		h.lost.Add(1)
		return nil
	}
	return sl
}

// Read gives f the events still in the ring, the oldest first, until f
// returns false; before the first, it tells begin (unless nil) how many
// slots it will read. It returns the gaps between the events f was given,
// the events overwritten before the read (the ring's lap) and the events
// writers dropped. Each event's slot is claimed while it is copied and let
// go before f runs; readers take turns for the whole read, so f must not
// read the ring itself.
func (h *Ring[S]) Read(begin func(slots uint64), f func(Event[S]) bool) (gaps []Gap, overwritten, lost uint64) {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	head := h.head.Load()
	n := uint64(len(h.slots))
	if head > n {
		overwritten = head - n
	}
	if begin != nil {
		begin(head - overwritten)
	}
	sites := h.sites.Load()
	var prev Event[S]
	read := false
	for t := overwritten; t < head; t++ {
		sl := &h.slots[t%n]
		done := (t+1)<<2 | slotDone
		if sl.seq.Load() != done || !sl.seq.CompareAndSwap(done, (t+1)<<2|slotReading) {
			continue // being written, lapped, or dropped
		}
		e := Event[S]{
			Seq:             t,
			Time:            h.start.Add(time.Duration(sl.nanos)),
			Action:          sl.action,
			Category:        sl.cat,
			Size:            sl.size,
			Tracked:         sl.cur,
			CategoryTracked: sl.ccur,
			Stream:          sl.stream,
			Mark:            sl.mark,
		}
		if sites != nil {
			e.Site = (*sites)[t%n]
		} else if sites = h.sites.Load(); sites != nil { // made since
			e.Site = (*sites)[t%n]
		}
		sl.seq.Store(done)
		if read && t != prev.Seq+1 {
			gaps = append(gaps, Gap{After: prev.Seq, Before: t, From: prev.Time, To: e.Time})
		}
		prev, read = e, true
		if !f(e) {
			break
		}
	}
	return gaps, overwritten, h.lost.Load()
}
