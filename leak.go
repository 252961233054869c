package memtrack

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/siterec"
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
	// is another binding's. The mappings of a [Reservation] dropped
	// without [Reservation.Release] are unmapped, their memory given back;
	// the reservation's address space stays reserved, and counted in
	// AddressSpace, until the process ends.
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
	dl, err := lw.watch(use)
	if err != nil {
		return err
	}
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
	dl, _ := lw.watch(start) // off stays off: nothing registered
	if dl == nil {
		return
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
	dl, _ := lw.watch(start) // a read: nothing registered
	if dl == nil {
		return false
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.userOn
}

// Stats returns the device's leak figures, as [Stats] holds them.
func (lw LeakWatcher) Stats() LeakStats {
	dl, _ := lw.watch(start) // a read: nothing registered
	if dl == nil {
		return LeakStats{}
	}
	return LeakStats{Leaks: dl.leaks.Load(), LeakedBytes: dl.leakedBytes.Load()}
}

// resetAccumulated sets the device's leak figures back to zero.
func (lw LeakWatcher) resetAccumulated() {
	if dl, _ := lw.watch(read); dl != nil {
		dl.leaks.Store(0)
		dl.leakedBytes.Store(0)
	}
}

// watch returns the device's leak watch, made where a is use; for read and
// start, nil where the device never used one. It fails as Device.lookup
// does.
func (lw LeakWatcher) watch(a access) (*deviceLeaks, error) {
	d := lw.dev
	s, _, err := d.lookup(a)
	if err != nil || s == nil {
		return nil, err
	}
	var newState func() *deviceLeaks
	if a == use {
		newState = func() *deviceLeaks { return &deviceLeaks{s: s, ordinal: d.ordinal} }
	}
	return slotOf(s, d.ordinal, leaksSlot, newState), nil
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
	dl   *deviceLeaks
	mark uint64 // the entries made before the check

	sites siteOverride // what End puts back of the recording of sites
	ended bool
}

// StartCheck starts a [LeakCheck] of the device. It fails where the
// device does not exist.
func (lw LeakWatcher) StartCheck() (*LeakCheck, error) {
	d := lw.dev
	dl, err := lw.watch(use)
	if err != nil {
		return nil, err
	}
	c := &LeakCheck{dev: d, dl: dl}
	c.sites = d.Sites().recordEvery(leakCheckDepth)
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
		if w != nil && w.seq > c.mark && !w.reported && w.state.Load() != watchFreed {
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
	c.dev.Sites().restore(c.sites)
}

// The states of a watched entry: a release claims it (live to freed)
// before it releases anything, the collector's cleanup claims it (live to
// leaked), so that the memory is released by exactly one of them.
const (
	watchLive uint32 = iota
	watchFreed
	watchLeaked
)

// leaksSlot is the leak watch's slot (hooks.go): after the allocation
// sites', whose marks its copy of an allocation keeps.
const leaksSlot = 2

// deviceLeaks is the leak watch of one device, in its state: the watched
// entries in slots (a watched allocation holds its slot's number in
// allocation.entry, never 0), the watch's settings and the leak figures.
// It outlives watching, since allocations keep their entries: once it
// watched, it is the device's marker for good (hooks.go), and while the
// device is watched it is in the device's hook set too, so that the
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
	alloc    allocation // the allocation as it was counted; its entry is 0
	born     time.Time
	cleanup  runtime.Cleanup
}

// tracked reports whether the entry is a Tracked handle's.
func (w *watched) tracked() bool { return w.alloc.from == fromAddress }

// switchOn publishes the device as watched. dl.mu is held.
func (dl *deviceLeaks) switchOn() {
	dl.s.setClaimer(dl.ordinal, dl)
	dl.s.setHook(dl.ordinal, leaksSlot, dl)
}

// switchOff stops watching the device once neither Leaks().Enable nor a
// LeakCheck wants it. dl.mu is held.
func (dl *deviceLeaks) switchOff() {
	if dl.userOn || dl.checks > 0 {
		return
	}
	dl.s.setHook(dl.ordinal, leaksSlot, nil)
	dl.epoch++
}

// watch makes the entry of a, the allocation of a Buffer or Tracked
// handle just counted on the device, and registers its cleanup on a's
// object. It returns the entry's slot. A handle indexed by address is
// listed by LeakChecks but never collected (the index holds it), so no
// cleanup is registered for it.
func (dl *deviceLeaks) watch(a *allocation) uint32 {
	w := &watched{dl: dl, owner: uintptr(unsafe.Pointer(a)), alloc: *a, born: time.Now()}
	if h, ok := dl.s.b.(heapBacked); ok && h.goHeap(a.size) {
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

// allocated watches a, the allocation of a Buffer or Tracked handle that
// r asked for, marking it with its entry; a count at an address only,
// which nothing would collect, is not watched.
func (dl *deviceLeaks) allocated(a *allocation, _ ledger, _ Stream, _ int, handle bool) {
	if a.from != fromAddress || handle {
		a.entry = dl.watch(a)
	}
}

// claim claims the entry of a, the allocation at owner, for a release that
// has just moved it from live (claimMarks): it reports false where the
// collector's cleanup claimed it first, and the release must not go on.
// An allocation whose entry went since (see ownEntry) is claimed.
func (dl *deviceLeaks) claim(entry uint32, owner uintptr) bool {
	w := dl.ownEntry(entry, owner)
	return w == nil || w.state.CompareAndSwap(watchLive, watchFreed)
}

// ownEntry returns the entry of a, the allocation at owner, or nil if it
// has none any more: a slot another entry took since is not a's (that
// entry's owner, still reachable, holds another address).
func (dl *deviceLeaks) ownEntry(entry uint32, owner uintptr) *watched {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if w, o := dl.slots.At(entry); o == owner {
		return w
	}
	return nil
}

// unclaim gives the entry of a back after a release that failed.
func (dl *deviceLeaks) unclaim(entry uint32, owner uintptr) {
	if w := dl.ownEntry(entry, owner); w != nil {
		w.state.CompareAndSwap(watchFreed, watchLive)
	}
}

// end forgets the entry of a, the allocation at owner, released (whether
// or not the ledger uncounted it): the
// release claimed it (claim), or, for a Tracked handle, which a release
// ends whatever the collector did, it is claimed now. Its cleanup is
// cancelled while the object is still reachable (the release keeps it
// alive past this call). A leak's copy (owner 0) is the watch's own, whose
// entry collected removes.
func (dl *deviceLeaks) end(entry uint32, owner uintptr) {
	if owner == 0 {
		return
	}
	dl.mu.Lock()
	if w, o := dl.slots.At(entry); w != nil && o == owner && (w.state.Load() == watchFreed || w.tracked()) {
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
		how := freeLeak
		if w.alloc.from == fromMapping {
			how = unmapNow // a mapping of a reservation dropped without Release
		}
		released, err = dl.s.release(&w.alloc, dl.s.records.Lookup(dl.ordinal), how, DefaultStream, 0)
		l.Freed, l.Err = released && err == nil, fillError(err, l.Device, l.Size, nil)
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
	if st := siteOf(&w.alloc); st != nil && st.Stack() != nil {
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

// DefaultLeakLogInterval is the least time between two warnings about one
// allocation site from the [LeakLogger] that [LeakWatcher.Enable] uses
// when no handler is given.
const DefaultLeakLogInterval = time.Minute

// maxLeakLogSites bounds the sites a LeakLogger remembers; leaks from
// further sites share the rate of leaks without a site.
const maxLeakLogSites = 1024

// LeakLogger reports leaks as structured warnings on a [slog.Logger], at
// most one per allocation site (and device) per interval: the first leak
// from a site is logged at once, and the leaks that follow within the
// interval are counted and logged with the next warning from that site.
// Leaks whose site was not recorded share one rate per device. Its Handle
// method is a [LeakWatch] handler; it is safe for concurrent use.
type LeakLogger struct {
	logger *slog.Logger // nil: slog.Default() at each warning
	every  time.Duration

	mu    sync.Mutex
	sites map[leakSiteKey]*leakSiteLog
}

type leakSiteKey struct {
	dev  Device
	hash uint64 // hashStack of the stack; 0 for none, or past maxLeakLogSites
}

// leakSiteLog is what a LeakLogger remembers of one site: when it last
// warned, and the leaks it has not reported since.
type leakSiteLog struct {
	last         time.Time
	pending      int64
	pendingBytes int64
	everReported bool
}

// NewLeakLogger returns a LeakLogger that warns on l (nil: [slog.Default]
// as it is at each warning) at most once per site per every (every <= 0:
// at every leak).
func NewLeakLogger(l *slog.Logger, every time.Duration) *LeakLogger {
	return &LeakLogger{logger: l, every: every, sites: make(map[leakSiteKey]*leakSiteLog)}
}

// Handle reports l, or counts it for the site's next warning.
func (g *LeakLogger) Handle(l Leak) { g.handle(l, time.Now()) }

// handle is Handle of a leak that comes at now.
func (g *LeakLogger) handle(l Leak, now time.Time) {
	key := leakSiteKey{dev: l.Device}
	if l.Stack != nil {
		key.hash = siterec.HashStack(l.Stack)
	}
	g.mu.Lock()
	s := g.sites[key]
	if s == nil {
		if len(g.sites) >= maxLeakLogSites {
			key.hash = 0
			s = g.sites[key]
		}
		if s == nil {
			s = new(leakSiteLog)
			g.sites[key] = s
		}
	}
	s.pending++
	s.pendingBytes += l.Size
	if s.everReported && now.Sub(s.last) < g.every {
		g.mu.Unlock()
		return
	}
	n, bytes := s.pending, s.pendingBytes
	s.last, s.pending, s.pendingBytes, s.everReported = now, 0, 0, true
	g.mu.Unlock()

	logger := g.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(context.Background(), slog.LevelWarn, leakMessage(l), leakAttrs(l, n, bytes)...)
}

func leakMessage(l Leak) string {
	what := "buffer"
	if l.Tracked {
		what = "tracked handle"
	}
	msg := "memtrack: leaked " + what + ": the garbage collector found it unreachable without a free"
	if !l.Collected {
		msg = "memtrack: leaked " + what + ": still live"
	}
	return msg
}

// leakAttrs describes l, and the leaks from its site since the site's last
// warning (n of them, bytes in all, l included).
func leakAttrs(l Leak, n, bytes int64) []slog.Attr {
	fn, file := l.Site()
	attrs := []slog.Attr{
		slog.String("device", l.Device.String()),
		slog.Int64("bytes", l.Size),
		slog.Duration("age", l.Age),
		slog.String("site", fn),
		slog.String("file", file),
		slog.Bool("freed", l.Freed),
		slog.Int64("leaks", n),
		slog.Int64("leaked_bytes", bytes),
	}
	if l.Err != nil {
		attrs = append(attrs, slog.String("error", l.Err.Error()))
	}
	if len(l.Stack) > 1 {
		attrs = append(attrs, slog.String("stack", l.StackString()))
	}
	return attrs
}

// Site names the innermost frame of the leak's allocation stack: its
// function ("main.loadWeights") and its file's base name and line
// ("main.go:42"); "unknown" and "" where the site was not recorded.
func (l Leak) Site() (function, file string) {
	if len(l.Stack) == 0 {
		return "unknown", ""
	}
	f, _ := runtime.CallersFrames(l.Stack).Next()
	return f.Function, filepath.Base(f.File) + ":" + strconv.Itoa(f.Line)
}

// StackString writes the leak's allocation stack on one line, innermost
// first: "main.loadWeights (main.go:42) < main.main (main.go:17)"; empty
// where the site was not recorded.
func (l Leak) StackString() string {
	var b strings.Builder
	frames := runtime.CallersFrames(l.Stack)
	for {
		f, more := frames.Next()
		if f.Function != "" || f.File != "" {
			if b.Len() > 0 {
				b.WriteString(" < ")
			}
			b.WriteString(f.Function + " (" + filepath.Base(f.File) + ":" + strconv.Itoa(f.Line) + ")")
		}
		if !more {
			return b.String()
		}
	}
}

// String describes the leak on one line: "4096 B on cuda:0, allocated at
// main.loadWeights (main.go:42) 1.5s before, unreachable without a free".
func (l Leak) String() string {
	what := ""
	if l.Tracked {
		what = " (tracked)"
	}
	fn, file := l.Site()
	at := fn
	if file != "" {
		at += " (" + file + ")"
	}
	state := "still live"
	if l.Collected {
		state = "unreachable without a free"
		if l.Freed {
			state += ", freed"
		}
	}
	return bytesize.Exact(l.Size) + what + " on " + l.Device.String() + ", allocated at " + at + " " + l.Age.Round(time.Millisecond).String() + " before, " + state
}
