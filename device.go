package memtrack

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/memtrack/memtrack/tracker"
)

// Kind is a kind of device: the memory a [Device] allocates.
type Kind uint8

// The kinds of device. The zero Kind is none of them: it is the kind of the
// zero [Device], which is no device.
const (
	KindCPU   Kind = iota + 1 // host memory
	KindCUDA                  // NVIDIA GPU memory, built with -tags cuda
	KindMetal                 // Apple GPU memory, built with -tags metal on macOS
	numKinds
)

var kindNames = [numKinds]string{0: "invalid", KindCPU: "cpu", KindCUDA: "cuda", KindMetal: "metal"}

// String returns "cpu", "cuda" or "metal", and "invalid" for the zero Kind.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// buildTag is the build tag that compiles the backend of k.
func (k Kind) buildTag() string { return k.String() }

// Device is one device: a [Kind] and an ordinal. It is a small comparable
// value. Obtain one from [CPU], [CUDA], [Metal], [ParseDevice] or [Devices],
// which check that the device exists.
//
// The zero Device is no device: it is what the constructors return beside
// an error, so that a device whose construction failed cannot be mistaken
// for a working one. Its methods that return an error fail with
// [ErrInvalidDevice]; its reads (MemoryAllocated, MemoryStats, ...) return
// zero figures; nothing it is given is counted anywhere.
type Device struct {
	kind    Kind
	ordinal int
}

// CPU returns the host device.
func CPU() Device { return Device{kind: KindCPU} }

// CUDA returns NVIDIA GPU ordinal. It fails with [ErrBackendNotBuilt] in a
// build without -tags cuda, with [ErrBackendUnavailable] where the driver or
// the GPUs are missing, and with [ErrInvalidOrdinal] past the last GPU.
func CUDA(ordinal int) (Device, error) { return device(KindCUDA, ordinal) }

// Metal returns Apple GPU ordinal. It fails with [ErrBackendNotBuilt] in a
// build without -tags metal (or not on macOS), and with [ErrInvalidOrdinal]
// past the last GPU.
func Metal(ordinal int) (Device, error) { return device(KindMetal, ordinal) }

func device(k Kind, ordinal int) (Device, error) {
	d := Device{kind: k, ordinal: ordinal}
	if _, _, err := d.lookup(use); err != nil {
		return Device{}, err
	}
	return d, nil
}

// ParseDevice reads a device written as by [Device.String]: "cpu",
// "cuda:1", "metal:0". A kind without an ordinal ("cuda") means ordinal 0.
// It accepts nothing else: kind names are lower case, an ordinal is written
// in decimal without sign, leading zero or spaces, and nothing may surround
// the device, and the CPU has no ordinal ("cpu:0" is refused); anything
// else fails with [ErrInvalidDevice]. The device must exist in this build
// and on this machine. On failure it returns the zero Device, which is no
// device (see [Device]), beside the error.
func ParseDevice(s string) (Device, error) {
	name, ord, hasOrd := strings.Cut(s, ":")
	k := numKinds
	for i, n := range kindNames {
		if i > 0 && name == n {
			k = Kind(i)
		}
	}
	if k == numKinds {
		return Device{}, fmt.Errorf("%w: %q: want cpu, cuda:N or metal:N", ErrInvalidDevice, s)
	}
	if k == KindCPU && hasOrd {
		return Device{}, fmt.Errorf("%w: %q: the CPU is one device, written cpu without an ordinal", ErrInvalidDevice, s)
	}
	n := 0
	if hasOrd {
		var ok bool
		if n, ok = parseOrdinal(ord); !ok {
			return Device{}, fmt.Errorf("%w: %q: the ordinal must be written as a decimal number >= 0 without sign or leading zeros", ErrInvalidDevice, s)
		}
		if n > tracker.MaxOrdinal {
			return Device{}, fmt.Errorf("%w: %q: no machine has that many %v devices", ErrInvalidOrdinal, s, k)
		}
	}
	return device(k, n)
}

// parseOrdinal reads an ordinal as strconv.Itoa writes it: ASCII digits,
// no sign, no leading zero. Past [tracker.MaxOrdinal] it returns
// tracker.MaxOrdinal+1 instead of overflowing.
func parseOrdinal(s string) (int, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int(c-'0'), tracker.MaxOrdinal+1)
	}
	return n, true
}

// Devices returns every device this build and machine reach: the CPU, then
// each CUDA GPU, then each Metal GPU. A backend that this build has (-tags
// cuda, -tags metal) but that cannot start here, for want of a driver or of
// a device, lists no device, and err says why, wrapping
// [ErrBackendUnavailable] (a [*BackendError] where the driver answered,
// the loader's reason where it could not be loaded); the devices returned
// work whatever err says. A backend that the build lacks is no error:
// [CUDA], [Metal] and [ParseDevice] answer [ErrBackendNotBuilt] for its
// devices.
func Devices() ([]Device, error) {
	var ds []Device
	var errs []error
	for k := KindCPU; k < numKinds; k++ {
		s := openTable(k)
		if s.err != nil && !errors.Is(s.err, ErrBackendNotBuilt) {
			errs = append(errs, s.err)
		}
		for i := range s.n {
			ds = append(ds, Device{kind: k, ordinal: i})
		}
	}
	return ds, errors.Join(errs...)
}

// Kind returns the kind of the device.
func (d Device) Kind() Kind { return d.kind }

// Ordinal returns the device's ordinal among the devices of its kind.
func (d Device) Ordinal() int { return d.ordinal }

// String returns "cpu" for the CPU, "cuda:N" or "metal:N" for GPUs, and
// "invalid" for the zero Device.
func (d Device) String() string {
	if d.kind == 0 {
		return "invalid"
	}
	if d.kind == KindCPU && d.ordinal == 0 {
		return "cpu"
	}
	return d.kind.String() + ":" + strconv.Itoa(d.ordinal)
}

func errZeroDevice(d Device) error {
	if d.kind == 0 {
		return fmt.Errorf("%w: the zero Device is no device; obtain one from CPU, CUDA, Metal or ParseDevice", ErrInvalidDevice)
	}
	return fmt.Errorf("%w: %v", ErrInvalidDevice, d)
}

// MarshalText writes the device as [Device.String] does, so that a [Stats]
// encodes as JSON with "Device": "cuda:0".
func (d Device) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a device as [ParseDevice] does; the device must exist
// in this build and on this machine.
func (d *Device) UnmarshalText(text []byte) error {
	v, err := ParseDevice(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// UsedDevices returns every device the process has used, in the order of
// [Devices]: those obtained with [CUDA], [Metal] or [ParseDevice], and those
// on which memory was allocated or tracked or a setting was changed (the
// CPU, which [CPU] returns without checking, is listed once it has been used
// so, and so is a device that [Devices] lists). Reading a figure registers
// nothing: the device's (MemoryAllocated, MemoryStats, MemGetInfo, Usage,
// Baseline, Info, CategoryStats, ...), its features' (Sites().Snapshot,
// History().Snapshot, Leaks().Stats, Leaks().Enabled, Pool().Stats, ...),
// and neither does turning off a feature that is off. It only reads the
// device tables: a kind never used stays uninitialised, so listing never
// starts a driver.
func UsedDevices() []Device {
	var ds []Device
	rangeUsed(func(d Device, _ *tracker.Record) {
		ds = append(ds, d)
	})
	return ds
}
