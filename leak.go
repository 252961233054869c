package memtrack

import "time"

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
	_, f, err := lw.dev.features(use)
	if err != nil {
		return err
	}
	dl := &f.leaks
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
	_, f, err := lw.dev.features(start) // off stays off: nothing registered
	if err != nil || f == nil {
		return
	}
	dl := &f.leaks
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
	_, f, err := lw.dev.features(start) // a read: nothing registered
	if err != nil || f == nil {
		return false
	}
	dl := &f.leaks
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.userOn
}

// Stats returns the device's leak figures, as [Stats] holds them.
func (lw LeakWatcher) Stats() LeakStats {
	_, f, err := lw.dev.features(start) // a read: nothing registered
	if err != nil || f == nil {
		return LeakStats{}
	}
	return LeakStats{Leaks: f.leaks.leaks.Load(), LeakedBytes: f.leaks.leakedBytes.Load()}
}

// resetAccumulated sets the device's leak figures back to zero.
func (lw LeakWatcher) resetAccumulated() {
	if _, f, _ := lw.dev.features(read); f != nil {
		f.leaks.leaks.Store(0)
		f.leaks.leakedBytes.Store(0)
	}
}
