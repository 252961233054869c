package memtrack

import (
	"errors"
	"fmt"
	"strings"
)

// MeasureDevices measures the memory f needs on each of devices, for a
// pass that uses them all at once, as a tensor-parallel forward pass does
// (each layer split across the devices): f runs once, inside the
// measurement of every device, and the measurements come back in the
// order of devices, one per device, each what [Device.Measure] of that
// device alone around f would return. Running f once per device would
// measure each device during a pass of its own, with the other devices'
// shares of the work missing.
//
// Each device's measurement is Device.Measure's, and keeps its semantics:
// the peak is the device's, taken by a scope of its own (so measurements
// nest and overlap), with each category's; the per-process figures are
// read where the driver has them; on the CPU the Go heap is collected
// before each reading. The devices' first readings are taken in the order
// of devices before f runs, and their last ones in the reverse order after
// it, so that every device's measurement covers all of f.
//
// f's error is returned, wrapped once, with the figures measured so far;
// an error of a device's last readings is joined to it. MeasureDevices
// fails before running f, changing nothing, where devices is empty or
// names a device twice, f is nil (each [ErrInvalidArgument]), or a device
// does not exist or its memory cannot be queried.
func MeasureDevices(devices []Device, f func() error) ([]Measurement, error) {
	ms := make([]Measurement, len(devices))
	for i, d := range devices {
		ms[i].Device = d
	}
	if err := checkDevices(devices, "measurement"); err != nil {
		return ms, err
	}
	if f == nil {
		return ms, fmt.Errorf("%w: measurement of %s: nil function", ErrInvalidArgument, deviceList(devices))
	}
	// Every device is checked and its memory read before any is
	// registered, so that a refusal changes nothing; then each opens its
	// scopes, in order, and every scope is open while f runs.
	runs := make([]*measuring, len(devices))
	for i, d := range devices {
		m, err := d.startMeasure()
		if err != nil {
			return ms, err
		}
		runs[i] = m
	}
	for i, m := range runs {
		if err := m.open(); err != nil {
			for _, o := range runs[:i] {
				o.close()
			}
			return ms, err
		}
	}
	ferr := runScoped(runs, f)
	errs := make([]error, len(devices))
	for i := len(runs) - 1; i >= 0; i-- {
		ms[i], errs[i] = runs[i].end()
	}
	if ferr != nil {
		ferr = wrapf(ferr, "measurement of %s", deviceList(devices))
	}
	return ms, errors.Join(append([]error{ferr}, errs...)...)
}

// checkDevices refuses an empty list of devices, or one that names a
// device twice, for the operation op.
func checkDevices(devices []Device, op string) error {
	if len(devices) == 0 {
		return fmt.Errorf("%w: %s of no device: give at least one", ErrInvalidArgument, op)
	}
	for i, d := range devices {
		for _, e := range devices[:i] {
			if d == e {
				return fmt.Errorf("%w: %s of %s: %v is given twice", ErrInvalidArgument, op, deviceList(devices), d)
			}
		}
	}
	return nil
}

// deviceList writes devices as "cuda:0, cuda:1".
func deviceList(devices []Device) string {
	names := make([]string, len(devices))
	for i, d := range devices {
		names[i] = d.String()
	}
	return strings.Join(names, ", ")
}
