package memtrack

import (
	"errors"
	"fmt"
	"math"
)

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

// Usage puts the bytes this package counts on a device beside what the OS or
// driver reports for the whole device, and names their difference.
//
// The two never agree, and should not: the tracked figure is the sum of the
// sizes of live buffers allocated through this package, while the reported
// figure is everything the device has in use. On a GPU the difference holds
// the CUDA context (hundreds of MiB), the memory of libraries that allocate
// on their own (cuBLAS workspaces, NCCL buffers), other processes, and the
// driver's rounding of each allocation; on the CPU it holds the rest of the
// process and of the machine (or cgroup).
type Usage struct {
	Device    Device
	Tracked   int64 // bytes held by live buffers, as counted ([Device.MemoryAllocated])
	Total     int64 // the device's memory, as reported
	Free      int64 // free memory, as reported
	Used      int64 // Total - Free: memory in use on the device, by anyone
	Untracked int64 // Used - Tracked: memory in use that this package did not allocate
}

// Usage returns the tracked figure and the reported figures of the device
// side by side; see [Usage] for how to read their difference.
func (d Device) Usage() (Usage, error) {
	tracked := d.MemoryAllocated()
	free, total, err := d.MemGetInfo()
	if err != nil {
		return Usage{Device: d, Tracked: tracked}, err
	}
	used := max(total-free, 0)
	return Usage{Device: d, Tracked: tracked, Total: total, Free: free, Used: used, Untracked: used - tracked}, nil
}

// Measurement is what [Device.Measure] measured on a device while a function ran:
// the tracked figures, the figures the OS or driver reported, and the part of
// the reported growth that the tracker cannot see.
//
// The driver reports no peak, only a figure at an instant, and memory freed
// during the run is free again by its end. So the tracked peak is compared
// with nothing reported; Untracked compares the two at the same instants
// (before and after), as vLLM does when it profiles before sizing its KV
// cache: it is what the device gained that the package did not allocate
// (a CUDA context created on first use, library workspaces, the Go heap on
// the CPU, other processes).
type Measurement struct {
	Device Device

	BaselineTracked     int64 // tracked bytes when the run began
	PeakTracked         int64 // tracked high-water mark during the run
	EndTracked          int64 // tracked bytes when the run ended
	TrackedPeakIncrease int64 // PeakTracked - BaselineTracked

	// The device-side figure ([Stats].Held): with buffers freed by
	// [Buffer.FreeAsync] counted until their streams executed the frees.
	BaselineHeld     int64
	PeakHeld         int64
	HeldPeakIncrease int64 // PeakHeld - BaselineHeld

	Total        int64 // the device's memory, as reported
	BaselineUsed int64 // memory in use on the device when the run began, as reported
	EndUsed      int64 // memory in use on the device when the run ended, as reported
	UsedIncrease int64 // EndUsed - BaselineUsed

	// Untracked is UsedIncrease - (EndTracked - BaselineTracked): the
	// reported growth that tracked buffers do not account for. It can be
	// negative where others released memory during the run.
	Untracked int64
}

// Measure measures the memory f needs on the device, the way an inference
// server does before it sizes its cache: it resets the peak, records the
// tracked and reported baselines, runs f, and reads the figures again. f's
// error is returned, wrapped, with the figures measured so far.
//
// The peak is the device's, not the caller's: allocations by other
// goroutines during f are in the figures, which is what sizing a cache needs
// (they compete for the same memory) and is safe under concurrency. For the
// same reason, measurements of one device must not overlap: the peak has one
// reset point per device, so a measurement (or any [Device.ResetPeakMemoryStats])
// that starts while another runs moves that point, and the first measurement
// then sees only the peak since the second began. Run measurements of one device
// one after another, or put everything to measure into one f; measurements of
// different devices are independent and may run at once.
//
// Measure fails before running f, changing nothing, where the device does
// not exist or its memory cannot be queried.
func (d Device) Measure(f func() error) (Measurement, error) {
	if f == nil {
		return Measurement{Device: d}, fmt.Errorf("%w: measurement of %v: nil function", ErrInvalidArgument, d)
	}
	_, r, err := d.resolve()
	if err != nil {
		return Measurement{Device: d}, err
	}
	free, total, err := d.MemGetInfo()
	if err != nil {
		return Measurement{Device: d}, err
	}
	r.ResetPeak()
	resetDevicePeaks(d)
	p := Measurement{Device: d, BaselineTracked: r.Current(), Total: total, BaselineUsed: max(total-free, 0)}
	p.BaselineHeld, _ = deviceHeld(d, p.BaselineTracked, p.BaselineTracked)

	ferr := f()

	p.PeakTracked, p.EndTracked = r.Peak(), r.Current()
	p.TrackedPeakIncrease = p.PeakTracked - p.BaselineTracked
	_, p.PeakHeld = deviceHeld(d, p.EndTracked, p.PeakTracked)
	p.HeldPeakIncrease = p.PeakHeld - p.BaselineHeld
	free, total, err = d.MemGetInfo()
	if err != nil {
		return p, errors.Join(wrapRun(d, ferr), err)
	}
	p.Total, p.EndUsed = total, max(total-free, 0)
	p.UsedIncrease = p.EndUsed - p.BaselineUsed
	p.Untracked = p.UsedIncrease - (p.EndTracked - p.BaselineTracked)
	return p, wrapRun(d, ferr)
}

func wrapRun(d Device, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("memtrack: measurement of %v: %w", d, err)
}

// Budget is the memory a cache may take after a [Measurement]: what remains of
// a fraction of the device's memory once the memory in use at the measured
// peak is set aside, and how many blocks of a given size it holds.
type Budget struct {
	Utilization float64 // the fraction of the device's memory given to Budget
	Usable      int64   // Utilization × Total, in bytes: what the device may be filled to
	// Reserved is the memory in use on the device at the measured peak:
	// BaselineUsed + the larger of TrackedPeakIncrease and HeldPeakIncrease
	// (the device-side peak, which stream-ordered frees raise) + Untracked
	// (when positive).
	Reserved  int64
	Available int64 // Usable - Reserved, or 0 where that is negative
	BlockSize int64
	Blocks    int64 // Available / BlockSize
}

// Budget turns the measurement into a cache budget: the device may be filled to
// utilization × Total, and a cache gets what the measured peak leaves of
// that. The peak counts everything in use on the device when the measurement
// began (this process, its earlier buffers and other processes), the tracked
// peak increase and the untracked growth. It fails with
// [ErrInvalidArgument] for a utilization outside (0, 1], and with
// [ErrInvalidSize] for a blockSize <= 0 or a measurement without a device total.
// A budget with no room for one block is not an error: Blocks is 0.
func (p Measurement) Budget(utilization float64, blockSize int64) (Budget, error) {
	if math.IsNaN(utilization) || utilization <= 0 || utilization > 1 {
		return Budget{}, fmt.Errorf("%w: %v: want a fraction of the device's memory in (0, 1]", ErrInvalidArgument, utilization)
	}
	if blockSize <= 0 {
		return Budget{}, fmt.Errorf("%w: block size %d: want a positive number of bytes", ErrInvalidSize, blockSize)
	}
	if p.Total <= 0 {
		return Budget{}, fmt.Errorf("%w: the measurement of %v has a device total of %d bytes; budget a Measurement returned by Device.Measure", ErrInvalidSize, p.Device, p.Total)
	}
	b := Budget{
		Utilization: utilization,
		Usable:      int64(utilization * float64(p.Total)),
		Reserved:    p.BaselineUsed + max(p.TrackedPeakIncrease, p.HeldPeakIncrease) + max(p.Untracked, 0),
		BlockSize:   blockSize,
	}
	b.Available = max(b.Usable-b.Reserved, 0)
	b.Blocks = b.Available / blockSize
	return b, nil
}
