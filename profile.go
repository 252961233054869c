package memtrack

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidArgument: an argument outside what the function accepts, such as
// a utilization outside (0, 1] given to [Profile.Budget] or a nil function
// given to [Device.Profile].
var ErrInvalidArgument = errors.New("memtrack: invalid argument")

// Profile is what [Device.Profile] measured on a device while a function ran:
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
type Profile struct {
	Device Device

	BaselineTracked     int64 // tracked bytes when the run began
	PeakTracked         int64 // tracked high-water mark during the run
	EndTracked          int64 // tracked bytes when the run ended
	TrackedPeakIncrease int64 // PeakTracked - BaselineTracked

	Total        int64 // the device's memory, as reported
	BaselineUsed int64 // memory in use on the device when the run began, as reported
	EndUsed      int64 // memory in use on the device when the run ended, as reported
	UsedIncrease int64 // EndUsed - BaselineUsed

	// Untracked is UsedIncrease - (EndTracked - BaselineTracked): the
	// reported growth that tracked buffers do not account for. It can be
	// negative where others released memory during the run.
	Untracked int64
}

// Profile measures the memory f needs on the device, the way an inference
// server does before it sizes its cache: it resets the peak, records the
// tracked and reported baselines, runs f, and reads the figures again. f's
// error is returned, wrapped, with the figures measured so far.
//
// The peak is the device's, not the caller's: allocations by other
// goroutines during f are in the figures, which is what sizing a cache needs
// (they compete for the same memory) and is safe under concurrency. For the
// same reason, profiles of one device must not overlap: the peak has one
// reset point per device, so a profile (or any [Device.ResetPeakMemoryStats])
// that starts while another runs moves that point, and the first profile
// then sees only the peak since the second began. Run profiles of one device
// one after another, or put everything to measure into one f; profiles of
// different devices are independent and may run at once.
//
// Profile fails before running f, changing nothing, where the device does
// not exist or its memory cannot be queried.
func (d Device) Profile(f func() error) (Profile, error) {
	if f == nil {
		return Profile{Device: d}, fmt.Errorf("%w: profile of %v: nil function", ErrInvalidArgument, d)
	}
	_, r, err := d.resolve()
	if err != nil {
		return Profile{Device: d}, err
	}
	free, total, err := d.MemGetInfo()
	if err != nil {
		return Profile{Device: d}, err
	}
	r.ResetPeak()
	p := Profile{Device: d, BaselineTracked: r.Current(), Total: total, BaselineUsed: max(total-free, 0)}

	ferr := f()

	p.PeakTracked, p.EndTracked = r.Peak(), r.Current()
	p.TrackedPeakIncrease = p.PeakTracked - p.BaselineTracked
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
	return fmt.Errorf("memtrack: profile of %v: %w", d, err)
}

// Budget is the memory a cache may take after a [Profile]: what remains of
// a fraction of the device's memory once the memory in use at the profiled
// peak is set aside, and how many blocks of a given size it holds.
type Budget struct {
	Utilization float64 // the fraction of the device's memory given to Budget
	Usable      int64   // Utilization × Total, in bytes: what the device may be filled to
	// Reserved is the memory in use on the device at the profiled peak:
	// BaselineUsed + TrackedPeakIncrease + Untracked (when positive).
	Reserved  int64
	Available int64 // Usable - Reserved, or 0 where that is negative
	BlockSize int64
	Blocks    int64 // Available / BlockSize
}

// Budget turns the profile into a cache budget: the device may be filled to
// utilization × Total, and a cache gets what the profiled peak leaves of
// that. The peak counts everything in use on the device when the profile
// began (this process, its earlier buffers and other processes), the tracked
// peak increase and the untracked growth. It fails with
// [ErrInvalidArgument] for a utilization outside (0, 1], and with
// [ErrInvalidSize] for a blockSize <= 0 or a profile without a device total.
// A budget with no room for one block is not an error: Blocks is 0.
func (p Profile) Budget(utilization float64, blockSize int64) (Budget, error) {
	if math.IsNaN(utilization) || utilization <= 0 || utilization > 1 {
		return Budget{}, fmt.Errorf("%w: %v: want a fraction of the device's memory in (0, 1]", ErrInvalidArgument, utilization)
	}
	if blockSize <= 0 {
		return Budget{}, fmt.Errorf("%w: block size %d: want a positive number of bytes", ErrInvalidSize, blockSize)
	}
	if p.Total <= 0 {
		return Budget{}, fmt.Errorf("%w: the profile of %v has a device total of %d bytes; budget a Profile returned by Device.Profile", ErrInvalidSize, p.Device, p.Total)
	}
	b := Budget{
		Utilization: utilization,
		Usable:      int64(utilization * float64(p.Total)),
		Reserved:    p.BaselineUsed + p.TrackedPeakIncrease + max(p.Untracked, 0),
		BlockSize:   blockSize,
	}
	b.Available = max(b.Usable-b.Reserved, 0)
	b.Blocks = b.Available / blockSize
	return b, nil
}
