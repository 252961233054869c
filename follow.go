package memtrack

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Follower is a budget that follows the device: it re-reads the device's
// figures on request ([Follower.Read]), or at an interval the program
// chooses ([Follower.Run]), and says how many blocks the cache may hold
// now, as a [Target]. It is made from a measurement with the arguments of
// [Measurement.Budget] ([Measurement.Follow], [Measurement.FollowFootprint]),
// and several devices' together give the common figure
// ([FollowDevices]).
//
// Each reading is Budget's formula with what is in use outside the budget
// as it is now: where that passes the Total - Requested which the
// utilization leaves outside the budget (another process took more than
// the share left to it), the excess is set aside too (Budget.OverShare),
// and the cache may hold fewer blocks; where it falls back, the cache may
// grow again, up to Budget's blocks, never beyond them.
//
// What another instance's measured pass will take is not in its use
// between passes: where the utilizations of the instances that share a
// device add up to more than 1, a follower may give that memory to its
// cache. Keep the sum at most 1 for every pass to fit whatever the others
// do.
//
// A Follower only reports: memtrack never frees or unmaps anything on its
// own. The program chooses which blocks to drop when the target shrinks,
// and frees them; the next reading sees them free.
//
// A Follower is safe for concurrent use; its readings are taken one at a
// time. Nothing runs in the background unless the program calls Run.
type Follower struct {
	mu     sync.Mutex // held by a reading
	parts  []followed
	margin int64   // blocks
	blocks int64   // the Blocks of the last reading
	claims *Claims // the board whose claims each reading counts; nil for none
}

// followed is one device of a Follower: its budget as the measurement
// gives it (without OverShare), and what of the baseline a reading needs.
type followed struct {
	budget          Budget
	baseTracked     int64
	baseProcessUsed int64
	total           int64
}

// Target is one reading of a [Follower]: the blocks the cache may hold
// now, and the figures they come from.
//
// Common.Blocks is what Budget's formula gives with the device's figures
// as they are now; Blocks follows it with hysteresis, so that two
// followers sharing a device cannot make each other flap:
//
//   - where Common.Blocks is below the last reading's Blocks, Blocks drops
//     to it at once: the memory is needed now;
//   - where it is above by at least 1 + the margin ([Follower.SetMargin])
//     blocks, Blocks grows by the difference divided by Sharers, rounded
//     down (and not at all where that is 0): each process that shares the
//     device may take its part of what was freed at the same reading, and
//     none takes what another does;
//   - otherwise Blocks stays.
//
// So Blocks never passes Common.Blocks, and, where followers that read
// together have the driver's per-process figures (which count the
// processes), their growth never adds up to more than the room they saw:
// none shrinks because another grew. Without those figures Sharers is 1,
// and several followers on one device may each take the room they see.
type Target struct {
	// Common holds each device's budget with the figures of this reading
	// (Budgets[i].OverShare: what is in use outside it beyond the share
	// the utilization leaves outside it) and the blocks every device can
	// hold: Common.Blocks.
	Common CommonBudget
	// Blocks is the blocks the cache may hold now: the figure to follow.
	Blocks int64
	// Previous is the Blocks of the last reading (0 before the first).
	Previous int64
	// Changed says that Blocks differs from Previous: the program should
	// grow or shrink its cache to Blocks.
	Changed bool
	// Sharers is the most processes that hold memory on one of the
	// devices, this one included, as the driver's per-process figures
	// list them; 1 where they are missing.
	Sharers int
	// PerProcess says that every device's reading had the driver's
	// per-process figures (NVML), and that what other processes hold was
	// read from them; where false, it was read from the device-wide
	// figures (cuMemGetInfo's, and on the CPU the OS's), and
	// PerProcessErr says why, where the device should have them (it
	// matches [ErrPerProcessUnavailable]; nil on the CPU and Metal).
	PerProcess    bool
	PerProcessErr error
}

// Follow returns a [Follower] of the budget that [Measurement.Budget]
// computes with these arguments, which it checks as Budget does (with
// [ErrInvalidArgument] and [ErrInvalidSize]), but for one refusal: a
// baseline with less than the request free is no error, since each
// reading sets aside what is in use outside the budget as it is then.
// It reads nothing: the first reading is the first [Follower.Read] or
// [Follower.Run]'s.
//
// At each reading, what is in use outside the budget is, where the
// budget and the reading both have the driver's per-process figures
// (NVML, on a CUDA GPU):
//
//	outside = OtherProcessesUsed (now) + Baseline.ProcessUsed
//
// (this process's memory at the baseline, which Budget leaves outside the
// request), and otherwise, from the device-wide figures:
//
//	outside = Used + NotResident (now) - (Tracked (now) - Baseline.Tracked)
//	        - UntrackedIncrease - GraphReserved
//
// which counts as outside the budget whatever this process allocated
// since the measurement without this package (the cache, to be told
// apart, must be allocated through it) and the buffers whose
// stream-ordered frees are still in flight. Then
//
//	OverShare = max(outside - (Total - Requested), 0)
//
// is added to SetAside, and Available and Blocks are Budget's.
func (p Measurement) Follow(base Usage, utilization float64, blockSize int64) (*Follower, error) {
	return p.follow(base, utilization, blockSize, false)
}

// FollowFootprint returns a [Follower] of the budget that
// [Measurement.FootprintBudget] computes with these arguments, as
// [Measurement.Follow] does of Budget's: this process's memory at the
// baseline is set aside in the budget (Budget.ProcessUsed), and so not
// outside it:
//
//	outside = OtherProcessesUsed (now)
//
// and, from the device-wide figures, Follow's outside less
// Budget.ProcessUsed.
func (p Measurement) FollowFootprint(base Usage, utilization float64, blockSize int64) (*Follower, error) {
	return p.follow(base, utilization, blockSize, true)
}

func (p Measurement) follow(base Usage, utilization float64, blockSize int64, footprint bool) (*Follower, error) {
	b, err := p.budget(base, utilization, blockSize, footprint, true)
	if err != nil {
		return nil, err
	}
	if _, _, err := p.Device.lookup(start); err != nil {
		return nil, err
	}
	return &Follower{parts: []followed{{budget: b, baseTracked: base.Tracked, baseProcessUsed: base.ProcessUsed, total: p.Total}}}, nil
}

// FollowDevices returns a [Follower] of a cache that the devices of
// followers hold together, as [NewCommonBudget] combines their budgets:
// each reading reads every device, and Common.Blocks is the fewest blocks
// any of them can hold. The followers are left as they are; the one
// returned starts afresh (Previous 0, Margin 0, no claims counted).
//
// It fails as NewCommonBudget does, with [ErrInvalidArgument] where
// followers is empty or holds nil, gives a device twice, or mixes block
// sizes.
func FollowDevices(followers ...*Follower) (*Follower, error) {
	var parts []followed
	for i, f := range followers {
		if f == nil || len(f.parts) == 0 {
			return nil, fmt.Errorf("%w: follower %d: want one that Measurement.Follow returned", ErrInvalidArgument, i)
		}
		f.mu.Lock()
		parts = append(parts, f.parts...)
		f.mu.Unlock()
	}
	budgets := make([]Budget, len(parts))
	for i, p := range parts {
		budgets[i] = p.budget
	}
	if _, err := NewCommonBudget(budgets...); err != nil {
		return nil, err
	}
	return &Follower{parts: parts}, nil
}

// SetMargin sets the blocks beyond one by which Budget's formula must
// exceed the last Blocks before the target grows (see [Target]): 0, the
// default, grows for one block more. A margin keeps a cache from growing
// into memory that another process frees and takes again, at the cost of
// leaving up to margin blocks unused. It fails with [ErrInvalidArgument]
// for a negative margin, changing nothing.
func (f *Follower) SetMargin(blocks int64) error {
	if blocks < 0 {
		return fmt.Errorf("%w: margin of %d blocks: want 0 or more", ErrInvalidArgument, blocks)
	}
	if err := f.check(); err != nil {
		return err
	}
	f.mu.Lock()
	f.margin = blocks
	f.mu.Unlock()
	return nil
}

// CountClaims makes each later reading count the claims on board c
// ([Claims]) that other processes posted on the follower's devices: a
// claim is memory a newcomer is about to take, which the reading sets
// aside as in use outside the budget (Budget.Claimed, part of what
// OverShare compares with the share left outside it), so that the cache
// shrinks to make room for it before the newcomer allocates, and grows
// back once the claim is withdrawn or expires and the newcomer's memory
// is what is in use. Each claim counts for what its owner has not taken
// yet, where the per-process figures show its owner ([Claims.Claimed]).
// A nil c stops counting. It fails with [ErrInvalidArgument] for a
// Follower that Measurement.Follow did not return.
func (f *Follower) CountClaims(c *Claims) error {
	if err := f.check(); err != nil {
		return err
	}
	f.mu.Lock()
	f.claims = c
	f.mu.Unlock()
	return nil
}

// Blocks returns the Blocks of the last reading: 0 before the first.
func (f *Follower) Blocks() int64 {
	if f.check() != nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocks
}

// Read reads each device's figures once ([Device.Usage]: the driver's
// free and total memory and, on a CUDA GPU, NVML's process list) and
// returns the target they give. A device whose figures cannot be read
// fails the reading, changing nothing; missing per-process figures are no
// error: the reading uses the device-wide ones and says so.
func (f *Follower) Read() (Target, error) {
	if err := f.check(); err != nil {
		return Target{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	readings := make([]Usage, len(f.parts))
	claimed := make([]int64, len(f.parts))
	for i, p := range f.parts {
		d := p.budget.Device
		u, err := d.Usage()
		if err != nil {
			return Target{}, wrapf(err, "reading of the budget that follows %v", d)
		}
		readings[i] = u
		if f.claims != nil {
			if claimed[i], err = f.claims.claimed(d, u, nil); err != nil {
				return Target{}, wrapf(err, "reading of the budget that follows %v", d)
			}
		}
	}
	return f.next(readings, claimed)
}

// Run reads the devices as Read does, at once and then every interval,
// and sends each target whose Blocks changed on changes, until ctx is
// done, when it returns ctx's error; a failed reading ends it with that
// reading's error. Run does the readings in the goroutine that calls it,
// and starts none: the program runs it in a goroutine of its own, and
// stops it through ctx. Idle, it costs one reading per interval.
//
// Run waits for changes to take each target (or for ctx to be done): a
// program that is slow to resize its cache delays the next reading, and
// misses none. Targets read by Read meanwhile are Read's, and Run sends
// only the changes after them.
//
// It fails with [ErrInvalidArgument] for a nil ctx or changes, or an
// interval that is not positive.
func (f *Follower) Run(ctx context.Context, interval time.Duration, changes chan<- Target) error {
	if err := f.check(); err != nil {
		return err
	}
	if ctx == nil || changes == nil || interval <= 0 {
		return fmt.Errorf("%w: Run every %v: want a context, a channel of changes and a positive interval", ErrInvalidArgument, interval)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := f.Read()
		if err != nil {
			return err
		}
		if t.Changed {
			select {
			case changes <- t:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *Follower) check() error {
	if f == nil || len(f.parts) == 0 {
		return fmt.Errorf("%w: a Follower that Measurement.Follow did not return", ErrInvalidArgument)
	}
	return nil
}

// next returns the target of readings, one per part, with the bytes of
// other processes' claims on each part's device, and makes its Blocks the
// follower's. The caller holds f.mu.
func (f *Follower) next(readings []Usage, claimed []int64) (Target, error) {
	t := Target{Previous: f.blocks, Sharers: 1, PerProcess: true}
	budgets := make([]Budget, len(f.parts))
	for i, p := range f.parts {
		u, b := readings[i], p.budget
		var outside int64
		if b.PerProcess && u.PerProcess {
			outside = addSat(u.OtherProcessesUsed, subSat(p.baseProcessUsed, b.ProcessUsed))
			t.Sharers = max(t.Sharers, 1+len(u.OtherProcesses))
		} else {
			if t.PerProcess {
				t.PerProcess, t.PerProcessErr = false, b.PerProcessErr
				if b.PerProcess {
					t.PerProcessErr = u.PerProcessErr
				}
			}
			own := addSat(subSat(u.Tracked, p.baseTracked), addSat(b.UntrackedIncrease, addSat(b.GraphReserved, b.ProcessUsed)))
			outside = subSat(addSat(u.Used, u.NotResident), own)
		}
		b.Claimed = claimed[i]
		outside = addSat(outside, b.Claimed)
		b.OverShare = max(subSat(outside, subSat(p.total, b.Requested)), 0)
		budgets[i] = b.fill(p.total)
	}
	c, err := NewCommonBudget(budgets...)
	if err != nil {
		return Target{}, err // the budgets were checked when the follower was made
	}
	t.Common, t.Blocks = c, follow(f.blocks, c.Blocks, f.margin, int64(t.Sharers))
	t.Changed = t.Blocks != t.Previous
	f.blocks = t.Blocks
	return t, nil
}

// follow is the hysteresis of [Target]: the blocks after blocks, where
// the formula gives want, with a margin, on a device that sharers
// processes share.
func follow(blocks, want, margin, sharers int64) int64 {
	switch {
	case want < blocks:
		return want
	case want-blocks > margin: // at least 1 + margin, without overflow
		return blocks + (want-blocks)/sharers
	}
	return blocks
}
