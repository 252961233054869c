package memtrack

import (
	"fmt"
	"log/slog"
	"sync"

	"go.uber.org/atomic"
)

// OutOfMemoryObserver is a function registered with [Device.OnOutOfMemory]
// to run on every refused allocation of a device; remove it with
// [OutOfMemoryObserver.Remove].
type OutOfMemoryObserver struct {
	dev     Device
	f       func(*OutOfMemoryError)
	removed atomic.Bool
}

// oomObservers is the observers of one device, published as an immutable
// slice, and whether they are running.
type oomObservers struct {
	mu      sync.Mutex // serialises changes of list
	list    atomic.Pointer[[]*OutOfMemoryObserver]
	running atomic.Bool
}

// OnOutOfMemory registers f to run on every allocation of the device that
// is refused with an [*OutOfMemoryError] (by the memory limit, the device
// or the tracker's capacity), with that error and its report, before the
// allocation returns it. f runs on the goroutine whose allocation was
// refused, after the refusal is counted and with no lock of this package
// held, so it may read the device's figures, write profiles or allocate;
// package [github.com/memtrack/memtrack/oomdump] is such an observer,
// ready-made. f receives a deep copy of the error, its own down to every
// slice (Sites and their stacks, OtherProcesses, Categories) and every
// error of this package it holds (MemInfoErr, PerProcessErr, and what they
// wrap): changing it changes nothing the caller sees, nor what the next
// observer receives.
//
// The rules, each tested:
//   - Observers run in the order they were registered. Each call is a
//     registration of its own: the same function registered twice runs
//     twice per refusal, and each registration is removed by its own
//     [OutOfMemoryObserver.Remove].
//   - A panic of f is recovered and logged with [slog.Error]; the
//     allocation returns its error as it would have, the figures are
//     unchanged, and the next observers still run.
//   - While observers of a device run, further refusals on that device
//     (theirs, such as an allocation of a dump that fails, or another
//     goroutine's) return their errors without running the observers
//     again: no observer recurses into itself, and a burst of refusals
//     runs them once. Refusals on other devices run their own observers
//     meanwhile: a slow observer holds up only the allocation that is
//     running it.
//
// It fails with [ErrInvalidArgument] for a nil f, and where the device
// does not exist.
func (d Device) OnOutOfMemory(f func(*OutOfMemoryError)) (*OutOfMemoryObserver, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: OnOutOfMemory of %v: nil function", ErrInvalidArgument, d)
	}
	_, feat, err := d.features(use)
	if err != nil {
		return nil, err
	}
	o := &OutOfMemoryObserver{dev: d, f: f}
	obs := &feat.oom
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var list []*OutOfMemoryObserver
	if p := obs.list.Load(); p != nil {
		list = append(list, *p...)
	}
	list = append(list, o)
	obs.list.Store(&list)
	return o, nil
}

// Remove unregisters the observer: refusals that begin after Remove
// returns do not run it. It does not wait for a run under way, so an
// observer may remove itself. Removing it again changes nothing and
// returns an error matching [ErrInvalidArgument].
func (o *OutOfMemoryObserver) Remove() error {
	if o == nil {
		return fmt.Errorf("%w: Remove of a nil *OutOfMemoryObserver", ErrInvalidArgument)
	}
	if !o.removed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: out-of-memory observer of %v removed twice", ErrInvalidArgument, o.dev)
	}
	obs := o.dev.observers() // OnOutOfMemory made them
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var list []*OutOfMemoryObserver
	if p := obs.list.Load(); p != nil {
		for _, x := range *p {
			if x != o {
				list = append(list, x)
			}
		}
	}
	if len(list) == 0 {
		obs.list.Store(nil)
	} else {
		obs.list.Store(&list)
	}
	return nil
}

// observers returns the device's observers, or nil where it has none.
func (d Device) observers() *oomObservers {
	if _, f, _ := d.features(read); f != nil {
		return &f.oom
	}
	return nil
}

// notify runs the observers on e, unless they are running already.
func (obs *oomObservers) notify(e *OutOfMemoryError) {
	if obs == nil {
		return
	}
	p := obs.list.Load()
	if p == nil || !obs.running.CompareAndSwap(false, true) {
		return
	}
	defer obs.running.Store(false)
	for _, o := range *p {
		if !o.removed.Load() {
			o.run(e)
		}
	}
}

// run calls the observer with a deep copy of the error of its own,
// recovering a panic.
func (o *OutOfMemoryObserver) run(e *OutOfMemoryError) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("memtrack: an out-of-memory observer panicked; the allocation's error is returned as it was",
				"device", o.dev.String(), "panic", fmt.Sprint(p))
		}
	}()
	o.f(e.clone())
}
