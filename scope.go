package memtrack

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack/tracker"
)

// ErrScopeClosed: [PeakScope.Close] on a scope already closed. It is
// [tracker.ErrScopeClosed], so that errors of either layer match it.
var ErrScopeClosed = tracker.ErrScopeClosed

// PeakScope is a peak scope on one device: the exact high-water mark of the
// device's tracked bytes ([Device.MemoryAllocated]) from
// [Device.OpenPeakScope] to [PeakScope.Close], and of the device-side
// figure ([Stats].Held) beside it. Scopes nest and overlap freely: a device
// has any number open at once, opened and closed from any goroutines, each
// with its own peak, and neither another scope, a [Device.Measure] nor
// [Device.ResetPeakMemoryStats] moves it. This is what lets a library
// measure inside its caller's measurement without destroying the caller's
// peak (PyTorch's reset_peak_memory_stats cannot do this; tracemalloc's
// reset_peak is the same one-per-process point).
//
// The peak is the device's, not the goroutine's: allocations of every
// goroutine while the scope is open count. An allocation that runs while the
// scope opens or closes may count in it or not.
//
// While no scope is open on a device, its allocations pay one atomic load
// for the scopes; while scopes are open, an allocation that raises the
// tracked figure pays one load per open scope, and a compare-and-swap where
// a scope's peak rises (figures in docs/performance.md).
type PeakScope struct {
	dev     Device
	tracked *tracker.Scope
	held    *tracker.Scope // the device-side figure's, where the backend keeps one (heldFigure); nil elsewhere
	hf      heldFigure
}

// OpenPeakScope opens a [PeakScope] on the device, its peak starting at the
// bytes tracked now. Close it when done: an open scope costs every
// allocation on the device a load. It fails where the device does not
// exist.
func (d Device) OpenPeakScope() (*PeakScope, error) {
	s, r, err := d.lookup(use)
	if err != nil {
		return nil, err
	}
	sc := &PeakScope{dev: d}
	if s.held != nil {
		sc.hf, sc.held = s.held, s.held.openHeldScope(d.ordinal)
	}
	sc.tracked = r.OpenScope()
	return sc, nil
}

// Device returns the device the scope measures.
func (s *PeakScope) Device() Device {
	if s == nil {
		return Device{}
	}
	return s.dev
}

// PeakTracked returns the high-water mark of the device's tracked bytes since the
// scope opened: while it is open, never below the figure read before it;
// once it is closed, the peak at [PeakScope.Close], which later
// allocations do not move (reading a closed scope is not an error). A nil
// scope's peak is 0.
func (s *PeakScope) PeakTracked() int64 {
	if s == nil {
		return 0
	}
	return s.tracked.Peak()
}

// PeakHeld returns the high-water mark of the device-side figure
// ([Stats].Held) since the scope opened, as [PeakScope.PeakTracked] does for the
// tracked bytes. It equals PeakTracked except on CUDA devices, where buffers freed
// with [Buffer.FreeAsync] count until their streams execute the frees.
func (s *PeakScope) PeakHeld() int64 {
	if s == nil {
		return 0
	}
	if s.held == nil {
		return s.tracked.Peak()
	}
	return s.hf.heldScopePeak(s.dev.ordinal, s.held)
}

// Closed reports whether [PeakScope.Close] was called.
func (s *PeakScope) Closed() bool { return s != nil && s.tracked.Closed() }

// Close ends the scope and fixes its peaks, which [PeakScope.PeakTracked] and
// [PeakScope.PeakHeld] return from then on. Closing a scope again changes
// nothing and returns an error matching [ErrScopeClosed]; closing a nil
// scope returns an error matching [ErrInvalidArgument].
func (s *PeakScope) Close() error {
	if s == nil {
		return fmt.Errorf("%w: Close of a nil *PeakScope", ErrInvalidArgument)
	}
	var herr error
	if s.held != nil {
		herr = s.hf.closeHeldScope(s.dev.ordinal, s.held)
	}
	if _, err := s.tracked.Close(); err != nil {
		return wrapf(err, "peak scope of %v", s.dev)
	}
	if herr != nil && !errors.Is(herr, ErrScopeClosed) {
		return herr
	}
	return nil
}
