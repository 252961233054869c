package memtrack

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/memtrack/memtrack/internal/slots"
	"go.uber.org/atomic"
)

// The states of a watched entry: a release claims it (live to freed)
// before it releases anything, the collector's cleanup claims it (live to
// leaked), so that the memory is released by exactly one of them.
const (
	watchLive uint32 = iota
	watchFreed
	watchLeaked
)

// init makes dl the leak watch of device ordinal of table s.
func (dl *deviceLeaks) init(s *deviceTable, ordinal int) { dl.s, dl.ordinal = s, ordinal }

// deviceLeaks is the leak watch of one device, in its features: the
// watched entries in slots (a watched allocation holds its slot's number,
// never 0), the watch's settings and the leak figures. It outlives
// watching, since allocations keep their entries. While the device is
// watched it is in the device's hook set (hooks.leaks), so that the
// allocation path pays nothing more while no device is.
type deviceLeaks struct {
	s       *deviceTable // the device table it belongs to
	ordinal int

	leaks, leakedBytes atomic.Int64
	cfg                atomic.Pointer[LeakWatch] // nil unless userOn

	mu     sync.Mutex
	userOn bool                 // Leaks().Enable is in effect
	checks int                  // LeakChecks in progress
	epoch  uint32               // changes each time watching goes off: older entries are not reported
	seq    uint64               // entries made, for LeakCheck's marks
	slots  slots.Table[watched] // the entries, by slot
	// leaksSeen holds the leaks the collector found while a LeakCheck was
	// in progress, which their slots no longer hold.
	leaksSeen []*watched
}

// watched is the entry of one watched allocation, a Buffer's or a Tracked
// handle's. It holds what the cleanup needs to report and free the
// memory: a copy of the allocation, and no pointer to the object, which
// the collector could then never collect.
type watched struct {
	dl       *deviceLeaks
	owner    uintptr // the allocation's address: not a reference, an identity while it lives
	state    atomic.Uint32
	slot     uint32
	epoch    uint32
	reported bool // listed by a LeakCheck; under dl.mu
	freed    bool // a leak whose memory was freed; under dl.mu
	seq      uint64
	alloc    allocation // the allocation as it was counted; its wslot is 0
	born     time.Time
	cleanup  runtime.Cleanup
}

// tracked reports whether the entry is a Tracked handle's.
func (w *watched) tracked() bool { return w.alloc.from == fromAddress }

// switchOn publishes the device as watched. dl.mu is held.
func (dl *deviceLeaks) switchOn() {
	dl.s.setHooks(dl.ordinal, func(h *hooks) { h.leaks = dl })
}

// switchOff stops watching the device once neither Leaks().Enable nor a
// LeakCheck wants it. dl.mu is held.
func (dl *deviceLeaks) switchOff() {
	if dl.userOn || dl.checks > 0 {
		return
	}
	dl.s.setHooks(dl.ordinal, func(h *hooks) { h.leaks = nil })
	dl.epoch++
}

// watch makes the entry of a, the allocation of a Buffer or Tracked
// handle just counted on the device, and registers its cleanup on a's
// object. It returns the entry's slot. A handle indexed by address is
// listed by LeakChecks but never collected (the index holds it), so no
// cleanup is registered for it.
func (dl *deviceLeaks) watch(a *allocation) uint32 {
	w := &watched{dl: dl, owner: uintptr(unsafe.Pointer(a)), alloc: *a, born: time.Now()}
	if a.kind == KindCPU && a.size < mmapThreshold {
		// Go heap memory, which may share the Buffer's own allocation:
		// the cleanup must not hold it, and needs nothing to free it.
		w.alloc.mem.host = nil
	}
	collectable := a.from != fromAddress || a.mem.ptr == 0
	dl.mu.Lock()
	dl.seq++
	w.seq, w.epoch = dl.seq, dl.epoch
	w.slot = dl.slots.Put(w, w.owner)
	slot := w.slot
	if collectable {
		w.cleanup = runtime.AddCleanup(a, collected, w)
	}
	dl.mu.Unlock()
	return slot
}

// remove forgets the entry w, and keeps it for the LeakChecks in progress
// if it is a leak. dl.mu is held.
func (dl *deviceLeaks) remove(w *watched) {
	leaked := w.state.Load() == watchLeaked && w.epoch == dl.epoch
	if v, _ := dl.slots.At(w.slot); v == w {
		dl.slots.Free(w.slot)
	}
	if leaked && dl.checks > 0 {
		dl.leaksSeen = append(dl.leaksSeen, w)
	}
}

// claimEntry claims the entry of a, the allocation at owner, for a
// release that has just moved it from live (claimMarks): it reports false
// where the collector's cleanup claimed it first, and the release must not
// go on. An allocation whose entry went since (see ownEntry) is claimed.
func claimEntry(a *allocation, owner uintptr) bool {
	w := ownEntry(a, owner)
	return w == nil || w.state.CompareAndSwap(watchLive, watchFreed)
}

// ownEntry returns the entry of a, the allocation at owner, or nil if it
// has none any more: a slot another entry took since is not a's (that
// entry's owner, still reachable, holds another address). a was watched,
// so its device has features.
func ownEntry(a *allocation, owner uintptr) *watched {
	dl := &tableOf(a.kind).featuresOf(int(a.ordinal)).leaks
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if w, o := dl.slots.At(a.wslot); o == owner {
		return w
	}
	return nil
}

// unclaimEntry gives the entry of a back after a release that failed.
func unclaimEntry(a *allocation, owner uintptr) {
	if w := ownEntry(a, owner); w != nil {
		w.state.CompareAndSwap(watchFreed, watchLive)
	}
}

// unwatch forgets the entry of a, the allocation at owner, released: the
// release claimed it (claimEntry), or, for a Tracked handle, which a
// release ends whatever the collector did, it is claimed now. Its cleanup
// is cancelled while the object is still reachable (the release keeps it
// alive past this call).
func unwatch(a *allocation, owner uintptr) {
	dl := &tableOf(a.kind).featuresOf(int(a.ordinal)).leaks
	dl.mu.Lock()
	if w, o := dl.slots.At(a.wslot); w != nil && o == owner && (w.state.Load() == watchFreed || w.tracked()) {
		w.state.Store(watchFreed)
		w.cleanup.Stop()
		dl.remove(w)
	}
	dl.mu.Unlock()
}

// collected is the cleanup of a watched allocation: the collector found
// its object unreachable. If no release claimed it first, it is a leak.
func collected(w *watched) {
	if !w.state.CompareAndSwap(watchLive, watchLeaked) {
		return
	}
	dl := w.dl
	dl.mu.Lock()
	if w.epoch != dl.epoch {
		// Watched before watching went off: not reported.
		dl.remove(w)
		dl.mu.Unlock()
		return
	}
	cfg := dl.cfg.Load() // nil where only a LeakCheck watches
	dl.mu.Unlock()

	dl.leaks.Add(1)
	dl.leakedBytes.Add(w.alloc.size)
	l := w.leak(time.Now(), true)
	released := false
	if cfg != nil && cfg.FreeLeaks && !w.tracked() {
		var err error
		// The buffer was counted in its device's record, which is never removed.
		released, err = dl.s.release(&w.alloc, dl.s.records.Lookup(dl.ordinal), freeLeak, DefaultStream, 0)
		l.Freed, l.Err = released && err == nil, err
	}
	// The entry goes; a LeakCheck in progress keeps it.
	dl.mu.Lock()
	w.freed = released
	dl.remove(w)
	dl.mu.Unlock()
	if cfg == nil {
		return // watched for a LeakCheck only, which lists it
	}
	report(cfg.Handler, l)
}

// leak describes the entry as a Leak found at now.
func (w *watched) leak(now time.Time, collected bool) Leak {
	d := w.alloc.device()
	l := Leak{
		Device:    d,
		Size:      w.alloc.size,
		AllocTime: w.born,
		Age:       now.Sub(w.born),
		Tracked:   w.tracked(),
		Category:  d.categoryName(w.alloc.cat),
		Collected: collected,
	}
	if st := w.alloc.site; st != nil && st.Stack() != nil {
		l.Stack = slices.Clone(st.Stack())
	}
	return l
}

// report calls the handler h with l, and logs a panic of h rather than let
// it end the program from the runtime's cleanup goroutine.
func report(h func(Leak), l Leak) {
	defer func() {
		if r := recover(); r != nil {
			slog.Default().LogAttrs(context.Background(), slog.LevelError, "memtrack: the leak handler panicked",
				slog.String("device", l.Device.String()), slog.String("panic", fmt.Sprint(r)))
		}
	}()
	h(l)
}
