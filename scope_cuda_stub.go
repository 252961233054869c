//go:build !cuda

package memtrack

import "github.com/memtrack/memtrack/tracker"

// Without -tags cuda the device-side figure is the tracked one: a
// PeakScope needs no scope of its own for it.

func openHeldScope(Device) *tracker.Scope { return nil }

func heldScopePeak(_ Device, sc *tracker.Scope) int64 { return sc.Peak() }

func closeHeldScope(_ Device, sc *tracker.Scope) error {
	_, err := sc.Close()
	return err
}
