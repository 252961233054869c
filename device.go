package memtrack

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memtrack/memtrack/tracker"
)

// Device is one device: a [Kind] and an ordinal. It is a small comparable
// value; the zero Device is the CPU. Obtain others from [CUDA], [Metal],
// [ParseDevice] or [Devices], which check that the device exists.
type Device struct {
	kind    Kind
	ordinal int
}

// CPU returns the host device.
func CPU() Device { return Device{} }

// CUDA returns NVIDIA GPU ordinal. It fails with [ErrBackendNotBuilt] in a
// build without -tags cuda, with [ErrBackendUnavailable] where the driver or
// the GPUs are missing, and with [ErrInvalidOrdinal] past the last GPU.
func CUDA(ordinal int) (Device, error) { return device(KindCUDA, ordinal) }

// Metal returns Apple GPU ordinal. It fails with [ErrBackendNotBuilt] in a
// build without -tags metal (or not on macOS), and with [ErrInvalidOrdinal]
// past the last GPU.
func Metal(ordinal int) (Device, error) { return device(KindMetal, ordinal) }

func device(k Kind, ordinal int) (Device, error) {
	if _, err := stateOf(k).record(ordinal); err != nil {
		return Device{}, err
	}
	return Device{kind: k, ordinal: ordinal}, nil
}

// ParseDevice reads a device written as by [Device.String]: "cpu", "cuda:1",
// "metal:0". A kind without an ordinal ("cuda") means ordinal 0. The device
// must exist in this build and on this machine.
func ParseDevice(s string) (Device, error) {
	name, ord, hasOrd := strings.Cut(strings.TrimSpace(s), ":")
	k := numKinds
	for i, n := range kindNames {
		if strings.EqualFold(name, n) {
			k = Kind(i)
		}
	}
	if k == numKinds {
		return Device{}, fmt.Errorf("%w: %q: want cpu, cuda:N or metal:N", ErrInvalidDevice, s)
	}
	n := 0
	if hasOrd {
		var err error
		if n, err = strconv.Atoi(ord); err != nil || n < 0 {
			return Device{}, fmt.Errorf("%w: %q: the ordinal must be a number >= 0", ErrInvalidDevice, s)
		}
	}
	return device(k, n)
}

// Devices returns every device this build and machine reach: the CPU, then
// each CUDA GPU, then each Metal GPU.
func Devices() []Device {
	var ds []Device
	for k := range numKinds {
		s := stateOf(k)
		for i := range s.n {
			ds = append(ds, Device{kind: k, ordinal: i})
		}
	}
	return ds
}

// Kind returns the kind of the device.
func (d Device) Kind() Kind { return d.kind }

// Ordinal returns the device's ordinal among the devices of its kind.
func (d Device) Ordinal() int { return d.ordinal }

// String returns "cpu" for the CPU and "cuda:N" or "metal:N" for GPUs.
func (d Device) String() string {
	if d.kind == KindCPU && d.ordinal == 0 {
		return "cpu"
	}
	return d.kind.String() + ":" + strconv.Itoa(d.ordinal)
}

// resolve returns the device's table and record.
func (d Device) resolve() (*kindState, *tracker.Record, error) {
	if d.kind >= numKinds {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidDevice, d)
	}
	s := stateOf(d.kind)
	r, err := s.record(d.ordinal)
	return s, r, err
}

// Alloc allocates size bytes on the device and counts them. It fails with
// [ErrInvalidSize] for size <= 0 (counting nothing) and with an
// [*OutOfMemoryError] when the memory limit or the device refuses it (adding
// one to FailedAllocs and nothing else). Free the buffer with [Buffer.Free].
func (d Device) Alloc(size int64) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes requested on %v", ErrInvalidSize, size, d)
	}
	s, rec, err := d.resolve()
	if err != nil {
		return nil, err
	}
	// A limit is checked before the backend is asked, so that a request over
	// it costs no device memory; the record checks again, exactly, after.
	if lim := rec.Limit(); lim > 0 {
		if cur := rec.Current(); size > lim-cur {
			rec.RecordFailure()
			return nil, &OutOfMemoryError{Device: d, Requested: size, Current: cur, Limit: lim, Reason: "memory limit"}
		}
	}
	m, err := s.b.alloc(d.ordinal, size)
	if err != nil {
		rec.RecordFailure()
		return nil, fillError(err, d, size, rec)
	}
	if err := rec.Alloc(size); err != nil {
		// A concurrent allocation took the room under the limit, or the
		// record is full: give the memory back. The record counted the
		// failure.
		oom := &OutOfMemoryError{Device: d, Requested: size, Current: rec.Current(), Limit: rec.Limit(), Reason: err.Error()}
		if ferr := s.b.free(d.ordinal, m); ferr != nil {
			return nil, fmt.Errorf("%w; releasing the memory also failed: %w", oom, ferr)
		}
		return nil, oom
	}
	b := &Buffer{dev: d, size: size, mem: m, rec: rec, backend: s.b}
	if sr := s.sites.lookup(d.ordinal); sr != nil {
		b.site = sr.alloc(size) // see sites.go
	}
	return b, nil
}

// fillError completes an error from a backend with the device and figures.
func fillError(err error, d Device, size int64, rec *tracker.Record) error {
	switch e := err.(type) {
	case *OutOfMemoryError:
		e.Device, e.Requested = d, size
		if rec != nil {
			e.Current = rec.Current()
		}
	case *BackendError:
		e.Device = d
	}
	return err
}

// MemoryAllocated returns the bytes held by the device's live buffers: the
// sizes asked for, as counted by this package (torch.cuda.memory_allocated).
func (d Device) MemoryAllocated() int64 {
	if _, r, err := d.resolve(); err == nil {
		return r.Current()
	}
	return 0
}

// MaxMemoryAllocated returns the high-water mark of [Device.MemoryAllocated]
// since the last [Device.ResetPeakMemoryStats] (torch.cuda.max_memory_allocated).
func (d Device) MaxMemoryAllocated() int64 {
	if _, r, err := d.resolve(); err == nil {
		return r.Peak()
	}
	return 0
}

// ResetPeakMemoryStats sets the peaks (bytes and live buffers, and the
// allocation sites at the peak where they are recorded) to their current
// figures, so that the next peak measures what happens from now on.
func (d Device) ResetPeakMemoryStats() {
	if s, r, err := d.resolve(); err == nil {
		r.ResetPeak()
		if sr := s.sites.lookup(d.ordinal); sr != nil {
			sr.resetPeak()
		}
	}
}

// ResetAccumulatedMemoryStats sets the cumulative figures (allocations,
// frees, their bytes, failures) back to zero; current figures and peaks stay.
func (d Device) ResetAccumulatedMemoryStats() {
	if _, r, err := d.resolve(); err == nil {
		r.ResetAccumulated()
	}
}

// MemoryStats returns a snapshot of the device's statistics.
func (d Device) MemoryStats() Stats {
	_, r, err := d.resolve()
	if err != nil {
		return Stats{Device: d}
	}
	return statsOf(d, r.Snapshot())
}

// MemGetInfo returns the free and total memory of the device as the OS or
// driver reports them (cuMemGetInfo for CUDA, the machine or its cgroup for
// the CPU): figures for the whole device, not this package's counters.
func (d Device) MemGetInfo() (free, total int64, err error) {
	s, _, err := d.resolve()
	if err != nil {
		return 0, 0, err
	}
	free, total, err = s.b.memInfo(d.ordinal)
	if err != nil {
		return 0, 0, fillError(err, d, 0, nil)
	}
	return free, total, nil
}

// SetMemoryLimit caps the bytes the device's live buffers may hold: an Alloc
// that would pass it fails with an [*OutOfMemoryError]. Zero removes the
// limit; a negative limit is an error. Buffers already allocated are kept
// even if they exceed a new limit.
func (d Device) SetMemoryLimit(limit int64) error {
	if limit < 0 {
		return fmt.Errorf("%w: memory limit %d on %v is negative (0 removes the limit)", ErrInvalidSize, limit, d)
	}
	_, r, err := d.resolve()
	if err != nil {
		return err
	}
	return r.SetLimit(limit)
}

// MemoryLimit returns the device's memory limit, or 0 if none is set.
func (d Device) MemoryLimit() int64 {
	if _, r, err := d.resolve(); err == nil {
		return r.Limit()
	}
	return 0
}
