//go:build cuda

package memtrack

import "github.com/memtrack/memtrack/tracker"

// openHeldScope opens a peak scope on the device-side figure of a CUDA
// device, after uncounting the stream-ordered frees known to have executed,
// so that it starts from the figure the device holds; nil for other
// devices.
func openHeldScope(d Device) *tracker.Scope {
	if d.kind != KindCUDA {
		return nil
	}
	sd := sideOf(d.ordinal)
	if sd == nil {
		return nil
	}
	sd.reap(d.ordinal)
	return sd.held.OpenScope()
}

// heldScopePeak reads the peak of a scope of openHeldScope after learning
// which stream-ordered frees have executed, as deviceHeld does.
func heldScopePeak(d Device, sc *tracker.Scope) int64 {
	if !sc.Closed() {
		if sd := sideOf(d.ordinal); sd != nil {
			sd.reap(d.ordinal)
		}
	}
	return sc.Peak()
}

// closeHeldScope closes a scope of openHeldScope.
func closeHeldScope(d Device, sc *tracker.Scope) error {
	if !sc.Closed() {
		if sd := sideOf(d.ordinal); sd != nil {
			sd.reap(d.ordinal)
		}
	}
	_, err := sc.Close()
	return err
}
