package memtrack

import (
	"cmp"
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

// LeakWatch configures the watching of a device's buffers for leaks; see
// [LeakWatcher.Enable].
type LeakWatch struct {
	// Handler receives each leak the garbage collector finds. It runs on
	// the runtime's cleanup goroutines, which may run several at once, and
	// should return quickly; a panic in it is recovered and logged. nil
	// reports through a [LeakLogger] of [slog.Default] at
	// [DefaultLeakLogInterval]: one structured warning per allocation site
	// at a bounded rate.
	Handler func(Leak)
	// FreeLeaks frees a leaked buffer's memory, through the backend and the
	// device (for CUDA, the device's primary context) that allocated it,
	// and uncounts it as [Buffer.Free] would: it is counted as a free.
	// Off by default: the leaked memory then stays held and counted until
	// the process ends. Tracked handles are never freed, since the memory
	// is another binding's.
	FreeLeaks bool
}

// Leak is a buffer that was never freed: one that the garbage collector
// found unreachable without [Buffer.Free] while its device was watched
// ([LeakWatcher.Enable]), or one that a [LeakCheck] found still live
// when it ended.
type Leak struct {
	Device    Device
	Size      int64         // bytes
	AllocTime time.Time     // when it was allocated
	Age       time.Duration // from its allocation to when it was found
	// Stack is where it was allocated, innermost first, as
	// [runtime.Callers] writes it (read it with [runtime.CallersFrames]);
	// nil where the device did not record the buffer's allocation site
	// ([SiteRecorder.Enable]; a [LeakCheck] records every site).
	Stack []uintptr
	// Tracked is true for a [Tracked] handle, false for a [Buffer].
	Tracked bool
	// Category is the category it was allocated or tracked through
	// ([Category.Alloc], [Category.Track]), or "" for none.
	Category string
	// Collected is true where the garbage collector found it unreachable;
	// false for a buffer still reachable when a LeakCheck ended.
	Collected bool
	// Freed is true where its memory was freed and uncounted
	// ([LeakWatch].FreeLeaks); Err says why a free that was asked failed.
	Freed bool
	Err   error
}

// LeakStats are a device's figures of leaks found by the garbage collector
// while the device was watched, cumulative like [Stats].Allocs: they go back
// to zero with [Device.ResetAccumulatedMemoryStats].
type LeakStats struct {
	Leaks       int64 // buffers and tracked handles found unreachable without a free
	LeakedBytes int64 // their bytes
}

// LeakWatcher is the leak watch of one device: its controls, its figures
// and its checks. Obtain it with [Device.Leaks]; it is a small comparable
// value, as [Device] is.
type LeakWatcher struct{ dev Device }

// Leaks returns the device's leak watch.
func (d Device) Leaks() LeakWatcher { return LeakWatcher{dev: d} }

// Device returns the device the watch is of.
func (lw LeakWatcher) Device() Device { return lw.dev }

// Enable starts watching the buffers and tracked handles that are
// allocated on the device from now on: one that the garbage collector finds
// unreachable before [Buffer.Free] (or [Tracked.Release]) is a leak, counted
// in [Stats].Leaks and [Stats].LeakedBytes, reported to w.Handler and, if
// w.FreeLeaks, freed. Buffers allocated before are not watched. On a device
// already watched it replaces the handler and the choice to free, for the
// buffers watched already too.
//
// A leak is found by the garbage cycle after the buffer became unreachable
// ([runtime.AddCleanup]), so some time after; a program that never collects
// finds none. The allocation site is reported where the device records
// sites ([SiteRecorder.Enable]).
//
// A tracked handle with an address stays reachable through the index of
// addresses ([Kind.TrackedAt] finds it), so the collector never finds it; a
// [LeakCheck] lists it. Memory counted by [Device.TrackAddr] has no handle
// and is not watched.
//
// Watching costs, per watched allocation, a registration with the garbage
// collector, a clock reading and a bookkeeping entry under a per-device
// mutex, and as much again to undo them at the free (docs/leaks.md has the
// figures); a device not watched pays one atomic load per allocation, as
// for allocation sites.
func (lw LeakWatcher) Enable(w LeakWatch) error {
	d := lw.dev
	s, _, err := d.resolve()
	if err != nil {
		return err
	}
	dl := s.leaks.device(s, d.ordinal)
	dl.mu.Lock()
	defer dl.mu.Unlock()
	cfg := w
	if cfg.Handler == nil {
		cfg.Handler = NewLeakLogger(nil, DefaultLeakLogInterval).Handle
	}
	dl.cfg.Store(&cfg)
	if !dl.userOn {
		dl.userOn = true
		dl.switchOn()
	}
	return nil
}

// Disable stops watching the device: later allocations are not
// watched, and the buffers watched before are no longer reported, counted
// or freed when they are collected. A [LeakCheck] in progress keeps the
// device watched until it ends: the leaks the collector finds meanwhile are
// counted and listed by the check, but neither reported to a handler nor
// freed. Watching that is off stays off; enabling it again watches the
// allocations that follow only.
func (lw LeakWatcher) Disable() {
	d := lw.dev
	s, err := d.state() // off stays off: nothing registered
	if err != nil {
		return
	}
	dl := s.leaks.all.lookup(d.ordinal)
	if dl == nil {
		return // never watched
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if !dl.userOn {
		return
	}
	dl.userOn = false
	dl.cfg.Store(nil)
	dl.switchOff()
}

// Enabled reports whether [LeakWatcher.Enable] is in effect
// on the device.
func (lw LeakWatcher) Enabled() bool {
	d := lw.dev
	s, err := d.state() // a read: nothing registered
	if err != nil {
		return false
	}
	if dl := s.leaks.all.lookup(d.ordinal); dl != nil {
		dl.mu.Lock()
		defer dl.mu.Unlock()
		return dl.userOn
	}
	return false
}

// Stats returns the device's leak figures, as [Stats] holds them.
func (lw LeakWatcher) Stats() LeakStats {
	d := lw.dev
	s, err := d.state() // a read: nothing registered
	if err != nil {
		return LeakStats{}
	}
	return s.leaks.stats(d.ordinal)
}

// leakTable holds the leak bookkeeping of one kind's devices: all, by
// ordinal, the bookkeeping of every device ever watched (it outlives
// watching, since buffers keep an entry of it). A device's bookkeeping is
// in its hook set (kindState.hooks) while it is watched, so that the
// allocation path pays nothing more while none is.
type leakTable struct {
	mu  sync.Mutex // serialises the creation of entries in all
	all recorders[deviceLeaks]
}

// device returns the bookkeeping of ordinal i of s, creating it.
func (t *leakTable) device(s *kindState, i int) *deviceLeaks {
	if dl := t.all.lookup(i); dl != nil {
		return dl
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var dl *deviceLeaks
	t.all.update(i, func(old *deviceLeaks) *deviceLeaks {
		if old == nil {
			old = &deviceLeaks{state: s, ordinal: i}
		}
		dl = old
		return old
	})
	return dl
}

// stats returns the leak figures of ordinal i.
func (t *leakTable) stats(i int) LeakStats {
	if dl := t.all.lookup(i); dl != nil {
		return LeakStats{Leaks: dl.leaks.Load(), LeakedBytes: dl.leakedBytes.Load()}
	}
	return LeakStats{}
}

// resetAccumulated sets the leak figures of ordinal i back to zero.
func (t *leakTable) resetAccumulated(i int) {
	if dl := t.all.lookup(i); dl != nil {
		dl.leaks.Store(0)
		dl.leakedBytes.Store(0)
	}
}

// The states of a watched entry: a free claims it (live to freed) before
// it releases anything, the collector's cleanup claims it (live to leaked),
// so that the memory is released by exactly one of them.
const (
	watchLive uint32 = iota
	watchFreed
	watchLeaked
)

// deviceLeaks is the leak bookkeeping of one device: the watched entries in
// slots (a buffer holds its slot's index, never 0), the watch's settings and
// the leak figures.
type deviceLeaks struct {
	state   *kindState // the device table it belongs to
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

// watched is the entry of one watched buffer or handle. It holds what the
// cleanup needs to report and free the buffer, and no pointer to the buffer,
// which the collector could then never collect.
type watched struct {
	dl       *deviceLeaks
	s        *kindState // the device table that allocated it
	owner    uintptr    // the buffer's or handle's address: not a reference, an identity while it lives
	state    atomic.Uint32
	slot     uint32
	epoch    uint32
	tracked  bool
	pooled   bool  // from the device's pool (Device.AllocAsync)
	cat      uint8 // its Category, 1-based, or 0
	reported bool  // listed by a LeakCheck; under dl.mu
	freed    bool  // a leak whose memory was freed; under dl.mu
	seq      uint64
	size     int64
	mem      memory
	site     *site
	born     time.Time
	cleanup  runtime.Cleanup
}

// switchOn publishes the device as watched. dl.mu is held.
func (dl *deviceLeaks) switchOn() {
	dl.state.setHooks(dl.ordinal, func(h *hooks) { h.leaks = dl })
}

// switchOff stops watching the device once neither Leaks().Enable nor a
// LeakCheck wants it. dl.mu is held.
func (dl *deviceLeaks) switchOff() {
	if dl.userOn || dl.checks > 0 {
		return
	}
	dl.state.setHooks(dl.ordinal, func(h *hooks) { h.leaks = nil })
	dl.epoch++
}

// watch makes the entry of a buffer or handle of size bytes just counted
// on the device of s, and registers its cleanup on obj. It returns the
// entry's slot.
func watch[T any](dl *deviceLeaks, s *kindState, obj *T, size int64, mem memory, st *site, tracked, pooled bool, cat uint8, collectable bool) uint32 {
	w := &watched{dl: dl, s: s, owner: uintptr(unsafe.Pointer(obj)), tracked: tracked, pooled: pooled, cat: cat, size: size, mem: mem, site: st, born: time.Now()}
	if s.kind == KindCPU && size < mmapThreshold {
		// Go heap memory, which may share the Buffer's own allocation:
		// the cleanup must not hold it, and needs nothing to free it.
		w.mem.host = nil
	}
	dl.mu.Lock()
	dl.seq++
	w.seq, w.epoch = dl.seq, dl.epoch
	w.slot = dl.slots.Put(w, w.owner)
	slot := w.slot
	if collectable {
		w.cleanup = runtime.AddCleanup(obj, collected, w)
	}
	dl.mu.Unlock()
	return slot
}

// leakGone is what the slot of a leak holds for good, with the buffer's
// address, once its entry is gone: a free of the buffer, which no program
// can reach but a test can, finds it and refuses, so that a leak's memory
// is freed once at most. It costs a slot (16 bytes) per leak.
var leakGone = &watched{}

// remove forgets the entry w, and keeps it for the LeakChecks in progress
// if it is a leak. dl.mu is held.
func (dl *deviceLeaks) remove(w *watched) {
	leaked := w.state.Load() == watchLeaked && w.epoch == dl.epoch
	if v, _ := dl.slots.At(w.slot); v == w {
		if leaked {
			dl.slots.Keep(w.slot, leakGone)
		} else {
			dl.slots.Free(w.slot)
		}
	}
	if leaked && dl.checks > 0 {
		dl.leaksSeen = append(dl.leaksSeen, w)
	}
}

// watchedEntry returns the entry in slot of device ordinal o in s.
func watchedEntry(s *kindState, o int32, slot uint32) *watched {
	dl := s.leaks.all.lookup(int(o))
	if dl == nil {
		return nil
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	w, _ := dl.slots.At(slot)
	return w
}

// watchNewBuffer watches b, just allocated and counted on the device of s,
// which dl watches: the allocation path calls it last.
func watchNewBuffer(dl *deviceLeaks, s *kindState, b *Buffer) {
	b.wslot = watch(dl, s, b, b.size, b.mem, b.site, false, b.pooled, b.cat, true)
}

// claimWatched claims the entry of b for a free that has just moved b to
// bufFreed; it reports false if b's memory was freed as a leak (which only
// a test can arrange, since a leak is unreachable), and the free must not
// go on. Unwatched (b.wslot == 0), it is a branch, inlined into Free
// (TestIntendedInlining).
func claimWatched(b *Buffer) bool {
	return b.wslot == 0 || claimEntry(b)
}

func claimEntry(b *Buffer) bool {
	w := ownEntry(b.kind, b.ordinal, b.wslot, uintptr(unsafe.Pointer(b)))
	return w == nil || w != leakGone && w.state.CompareAndSwap(watchLive, watchFreed)
}

// ownEntry returns the entry in slot of device o of kind k if it is the
// one of the object at owner, leakGone if its memory was freed as a leak,
// and nil if it has none any more: its entry went when watching went off
// (it then frees as an unwatched buffer). A slot another entry took since
// is not the object's: its owner, still reachable, still holds its
// address. The object was watched, so the table of k exists.
func ownEntry(k Kind, o int32, slot uint32, owner uintptr) *watched {
	dl := tables[k].p.Load().leaks.all.lookup(int(o))
	if dl == nil {
		return nil
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if w, o := dl.slots.At(slot); o == owner {
		return w
	}
	return nil
}

// unclaimWatched gives the entry of b back after a free that failed.
func unclaimWatched(b *Buffer) {
	if b.wslot == 0 {
		return
	}
	if w := ownEntry(b.kind, b.ordinal, b.wslot, uintptr(unsafe.Pointer(b))); w != nil && w != leakGone {
		w.state.CompareAndSwap(watchFreed, watchLive)
	}
}

// unwatchBuffer forgets the entry of b, freed: its cleanup is cancelled
// while b is still reachable (the caller keeps it alive past this call).
func unwatchBuffer(b *Buffer) {
	if b.wslot == 0 {
		return
	}
	unwatch(b.kind, b.ordinal, b.wslot, uintptr(unsafe.Pointer(b)))
}

// unwatch forgets the entry in slot of device o of kind k of the object
// at owner, once its free has claimed it (or claiming it now, for a
// tracked handle, which a release ends whatever the collector did). The
// object was watched, so the table of k exists.
func unwatch(k Kind, o int32, slot uint32, owner uintptr) {
	dl := tables[k].p.Load().leaks.all.lookup(int(o))
	if dl == nil {
		return
	}
	dl.mu.Lock()
	if w, o := dl.slots.At(slot); w != nil && w != leakGone && o == owner && (w.state.Load() == watchFreed || w.tracked) {
		w.state.Store(watchFreed)
		w.cleanup.Stop()
		dl.remove(w)
	}
	dl.mu.Unlock()
}

// watchTracked watches t, just counted on the device of s, which dl
// watches. A handle indexed by address is listed by LeakChecks but never
// collected, so no cleanup is registered for it.
func watchTracked(dl *deviceLeaks, s *kindState, t *Tracked) {
	t.wslot = watch(dl, s, t, t.size, memory{ptr: t.ptr}, t.site, true, false, t.cat, t.ptr == 0)
}

// unwatchTracked forgets the entry of t, released; the caller keeps t
// alive past this call.
func unwatchTracked(t *Tracked) {
	if t.wslot != 0 {
		unwatch(t.dev.kind, int32(t.dev.ordinal), t.wslot, uintptr(unsafe.Pointer(t)))
	}
}

// collected is the cleanup of a watched buffer or handle: the collector
// found it unreachable. If no free claimed it first, it is a leak.
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
	dl.leakedBytes.Add(w.size)
	l := w.leak(time.Now(), true)
	released := false
	if cfg != nil && cfg.FreeLeaks && !w.tracked {
		var err error
		released, err = releaseMemory(w.s, Device{kind: w.s.kind, ordinal: dl.ordinal}, w.size, &w.mem, w.site, w.pooled, w.cat)
		l.Freed, l.Err = released && err == nil, err
	}
	// The entry goes, its slot marked for good; a LeakCheck in progress
	// keeps it.
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
	l := Leak{
		Device:    Device{kind: w.s.kind, ordinal: w.dl.ordinal},
		Size:      w.size,
		AllocTime: w.born,
		Age:       now.Sub(w.born),
		Tracked:   w.tracked,
		Category:  w.s.cats.lookup(w.dl.ordinal).name(w.cat),
		Collected: collected,
	}
	if w.site != nil && w.site.Stack() != nil {
		l.Stack = slices.Clone(w.site.Stack())
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

// leakCheckDepth is the stack depth a LeakCheck records sites with where
// the device recorded none.
const leakCheckDepth = 32

// LeakCheck lists the buffers and tracked handles allocated on one device
// since it started that are not freed yet: what a test leaks. Package
// [github.com/memtrack/memtrack/memtest] runs one per device around a test.
//
// While a check runs, its device is watched for leaks ([LeakWatcher.Enable]
// without a handler, if it was not watched) and records the allocation
// site of every buffer ([SiteRecorder.Enable] at rate 1); [LeakCheck.End]
// puts both back as they were. The device's figures are process-wide: a
// check sees every goroutine's allocations, so checks of one device must
// not overlap unless one is inside the other (a check started and ended
// while another runs), as with tests that do not run in parallel.
type LeakCheck struct {
	dev  Device
	s    *kindState
	dl   *deviceLeaks
	mark uint64 // the entries made before the check

	sites siteOverride // what End puts back of the recording of sites
	ended bool
}

// StartCheck starts a [LeakCheck] of the device. It fails where the
// device does not exist.
func (lw LeakWatcher) StartCheck() (*LeakCheck, error) {
	d := lw.dev
	s, _, err := d.resolve()
	if err != nil {
		return nil, err
	}
	c := &LeakCheck{dev: d, s: s, dl: s.leaks.device(s, d.ordinal)}
	c.sites = s.recordEverySite(d.ordinal, leakCheckDepth)
	dl := c.dl
	dl.mu.Lock()
	dl.checks++
	dl.switchOn()
	c.mark = dl.seq
	dl.mu.Unlock()
	return c, nil
}

// Device returns the device the check watches.
func (c *LeakCheck) Device() Device { return c.dev }

// Leaks returns the buffers and tracked handles allocated on the device
// since the check started and not freed: those still reachable, and those
// the garbage collector found unreachable (Collected), freed or not. Each
// is returned once, by the first call of Leaks of any check that sees it,
// so that a check inside another does not report its leaks twice.
func (c *LeakCheck) Leaks() []Leak {
	now := time.Now()
	dl := c.dl
	var ws []*watched
	dl.mu.Lock()
	take := func(w *watched) {
		if w != nil && w != leakGone && w.seq > c.mark && !w.reported && w.state.Load() != watchFreed {
			w.reported = true
			ws = append(ws, w)
		}
	}
	dl.slots.Each(take)
	for _, w := range dl.leaksSeen {
		take(w)
	}
	slices.SortFunc(ws, func(a, b *watched) int { return cmp.Compare(a.seq, b.seq) })
	ls := make([]Leak, len(ws))
	for i, w := range ws {
		ls[i] = w.leak(now, w.state.Load() == watchLeaked)
		ls[i].Freed = w.freed
	}
	dl.mu.Unlock()
	return ls
}

// End ends the check: the device is watched and records sites again as it
// did before the check. Calling End again does nothing.
func (c *LeakCheck) End() {
	dl := c.dl
	dl.mu.Lock()
	if c.ended {
		dl.mu.Unlock()
		return
	}
	c.ended = true
	dl.checks--
	if dl.checks == 0 {
		clear(dl.leaksSeen)
		dl.leaksSeen = dl.leaksSeen[:0]
	}
	dl.switchOff()
	dl.mu.Unlock()
	c.s.restoreSites(c.sites)
}
