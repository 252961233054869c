package memtrack

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mib = 1 << 20

// modelProc is one process of a model device: its context, its weights,
// the peak of its measured pass, and the blocks of its cache it holds now.
type modelProc struct {
	pid                  int
	context, weights     int64
	pass                 int64
	utilization          float64
	follower             *Follower
	blocks               int64
	present, hasFollower bool
}

// modelDevice is a device that processes share, read as the driver's
// per-process figures give it. Every process's cache is allocated through
// memtrack (in its Tracked).
type modelDevice struct {
	total int64
	block int64
	procs []*modelProc
}

func (d *modelDevice) used() int64 {
	var n int64
	for _, p := range d.procs {
		if p.present {
			n += p.context + p.weights + p.blocks*d.block
		}
	}
	return n
}

// usage is what process i reads of the device now.
func (d *modelDevice) usage(i int) Usage {
	p := d.procs[i]
	used := d.used()
	u := Usage{Total: d.total, Free: d.total - used, Used: used, Tracked: p.weights + p.blocks*d.block, PerProcess: true,
		ProcessUsed: p.context + p.weights + p.blocks*d.block}
	for j, o := range d.procs {
		if j != i && o.present {
			n := o.context + o.weights + o.blocks*d.block
			u.OtherProcessesUsed += n
			u.OtherProcesses = append(u.OtherProcesses, ProcessMemory{PID: o.pid, Used: n})
		}
	}
	return u
}

// start makes process i present, takes its baseline (its context alone),
// loads its weights, measures its pass and makes its follower.
func (d *modelDevice) start(t *testing.T, i int) {
	t.Helper()
	p := d.procs[i]
	p.present, p.blocks = true, 0
	w := p.weights
	p.weights = 0
	base := d.usage(i)
	p.weights = w
	end := d.usage(i)
	m := Measurement{Total: d.total, StartTracked: w, PeakTracked: w + p.pass, EndTracked: w, PeakTrackedIncrease: p.pass,
		StartHeld: w, PeakHeld: w + p.pass, EndHeld: w, PeakHeldIncrease: p.pass,
		StartUsed: end.Used, EndUsed: end.Used, PerProcess: true,
		StartProcessUsed: end.ProcessUsed, EndProcessUsed: end.ProcessUsed,
		StartOtherProcessesUsed: end.OtherProcessesUsed, EndOtherProcessesUsed: end.OtherProcessesUsed}
	b, err := m.budget(base, p.utilization, d.block, false, true)
	require.NoError(t, err)
	p.follower = &Follower{parts: []followed{{budget: b, baseTracked: base.Tracked, baseProcessUsed: base.ProcessUsed, total: d.total}}}
	p.hasFollower = true
}

// step has every present process with a follower read the device and
// resize its cache to the target: all at once (each reads before any
// resizes) where together, one after the other otherwise. It returns
// whether any target changed.
func (d *modelDevice) step(t *testing.T, together bool, rule func(*Follower, Usage) Target) bool {
	t.Helper()
	var readers []int
	for i, p := range d.procs {
		if p.present && p.hasFollower {
			readers = append(readers, i)
		}
	}
	changed := false
	apply := func(i int, u Usage) {
		tg := rule(d.procs[i].follower, u)
		d.procs[i].blocks = tg.Blocks
		changed = changed || tg.Changed
	}
	if together {
		us := make([]Usage, len(readers))
		for k, i := range readers {
			us[k] = d.usage(i)
		}
		for k, i := range readers {
			apply(i, us[k])
		}
	} else {
		for _, i := range readers {
			apply(i, d.usage(i))
		}
	}
	return changed
}

// followRule is the Follower's own reading of u.
func followRule(t *testing.T) func(*Follower, Usage) Target {
	return func(f *Follower, u Usage) Target {
		f.mu.Lock()
		defer f.mu.Unlock()
		tg, err := f.next([]Usage{u}, []int64{0})
		require.NoError(t, err)
		return tg
	}
}

// settle steps the device until no target changes, and returns each
// process's blocks after each step; it fails where that takes more than
// limit steps, or where the device is ever over-full or a cache moves one
// way and then the other (an oscillation).
func (d *modelDevice) settle(t *testing.T, together bool, limit int, rule func(*Follower, Usage) Target) [][]int64 {
	t.Helper()
	var trace [][]int64
	dir := make([]int64, len(d.procs))
	for range limit {
		before := make([]int64, len(d.procs))
		for i, p := range d.procs {
			before[i] = p.blocks
		}
		changed := d.step(t, together, rule)
		row := make([]int64, len(d.procs))
		for i, p := range d.procs {
			row[i] = p.blocks
			if delta := p.blocks - before[i]; delta != 0 {
				if dir[i] != 0 && (delta > 0) != (dir[i] > 0) {
					t.Errorf("process %d moved one way, then the other: %v", i, append(trace, row))
				}
				dir[i] = delta
			}
		}
		trace = append(trace, row)
		require.LessOrEqual(t, d.used(), d.total, "the caches pass the device: %v", trace)
		if !changed {
			for range 10 { // and it stays settled
				require.False(t, d.step(t, together, rule), "settled, then moved: %v", trace)
			}
			return trace
		}
	}
	t.Fatalf("not settled in %d steps: %v", limit, trace)
	return nil
}

// Two followers on one device that their shares oversubscribe: the
// first, alone, takes its whole budget; when the second starts, the first
// shrinks for the memory the second takes beyond the share left to it and
// the second gets what the first's budget leaves; when the second exits,
// the first grows back to its whole budget. Read together or one after
// the other, neither ever moves one way and then the other, the device is
// never over-full, and each phase settles.
func TestFollowerTwoOnOneDevice(t *testing.T) {
	for _, together := range []bool{true, false} {
		t.Run(fmt.Sprintf("together=%v", together), func(t *testing.T) {
			d := &modelDevice{total: 4 << 30, block: 64 * mib, procs: []*modelProc{
				{pid: 1, context: 48 * mib, weights: 1 << 30, pass: 256 * mib, utilization: 0.9},
				{pid: 2, context: 48 * mib, weights: 512 * mib, pass: 128 * mib, utilization: 0.5},
			}}
			rule := followRule(t)
			a, b := d.procs[0], d.procs[1]
			d.start(t, 0)
			d.settle(t, together, 5, rule)
			// Requested 0.9 × 4 GiB = 3686.4 MiB, less 1024 + 256 set aside: 37 blocks of 64 MiB.
			require.Equal(t, int64(37), a.blocks, "alone: its whole budget")
			whole := a.blocks

			// The second's context and weights appear, before its
			// follower: 560 MiB, 150.4 MiB past the 409.6 MiB that the
			// first's share leaves outside it (its own context in them).
			b.present = true
			d.settle(t, together, 5, rule)
			assert.Equal(t, int64(34), a.blocks, "(2406.4 - 198.4) MiB: 34 blocks")

			// The second's follower: it grows a block at a time (half the
			// room it sees, the device being shared by two), and the first
			// shrinks as it does, until the second has its whole budget,
			// 22 blocks (0.5 × 4 GiB less 640 MiB), or one less, which the
			// split in two leaves unused. The first keeps what the device
			// has less both contexts, both weights, its own pass's peak and
			// the second's cache: 2208 MiB for the two caches, 34 blocks.
			d.start(t, 1)
			trace := d.settle(t, together, 60, rule)
			assert.GreaterOrEqual(t, b.blocks, int64(21), "%v", trace)
			assert.LessOrEqual(t, b.blocks, int64(22), "%v", trace)
			assert.Equal(t, int64(34), a.blocks+b.blocks, "%v", trace)
			assert.LessOrEqual(t, d.used()+a.pass, d.total, "the first's pass still fits")

			b.present, b.hasFollower, b.blocks = false, false, 0
			d.settle(t, together, 5, rule)
			assert.Equal(t, whole, a.blocks, "the second gone, the first grows back at once: it is alone on the device")
		})
	}
}

// Two identical followers started at once share the room evenly: each
// reading splits the growth between the processes on the device, so that
// their growth never adds up to more than the room they saw.
func TestFollowerTwoStartTogether(t *testing.T) {
	d := &modelDevice{total: 4 << 30, block: 64 * mib, procs: []*modelProc{
		{pid: 1, context: 48 * mib, weights: 512 * mib, pass: 128 * mib, utilization: 0.9},
		{pid: 2, context: 48 * mib, weights: 512 * mib, pass: 128 * mib, utilization: 0.9},
	}}
	d.procs[0].present, d.procs[1].present = true, true
	d.start(t, 0)
	d.start(t, 1)
	trace := d.settle(t, true, 20, followRule(t))
	a, b := d.procs[0].blocks, d.procs[1].blocks
	assert.Equal(t, a, b, "even shares: %v", trace)
	// The room: 4096 MiB less two contexts, two weights and one pass
	// (the other's is in use only while it runs): 2880 MiB, 45 blocks, of
	// which the split leaves at most one unused.
	assert.GreaterOrEqual(t, a+b, int64(44), "%v", trace)
	assert.LessOrEqual(t, a+b, int64(45), "%v", trace)
}

// The model catches a flap: without the hysteresis (each cache takes the
// formula's blocks at each reading), two followers reading together both
// take the room they see, overfill the device, both shrink, and so on.
func TestFollowerModelCatchesFlapping(t *testing.T) {
	d := &modelDevice{total: 4 << 30, block: 64 * mib, procs: []*modelProc{
		{pid: 1, context: 48 * mib, weights: 512 * mib, pass: 128 * mib, utilization: 0.9},
		{pid: 2, context: 48 * mib, weights: 512 * mib, pass: 128 * mib, utilization: 0.9},
	}}
	d.procs[0].present, d.procs[1].present = true, true
	d.start(t, 0)
	d.start(t, 1)
	naive := func(f *Follower, u Usage) Target {
		f.mu.Lock()
		defer f.mu.Unlock()
		tg, err := f.next([]Usage{u}, []int64{0})
		require.NoError(t, err)
		tg.Blocks, tg.Changed = tg.Common.Blocks, tg.Common.Blocks != tg.Previous
		f.blocks = tg.Blocks
		return tg
	}
	var seen []int64
	for range 6 {
		d.step(t, true, naive)
		seen = append(seen, d.procs[0].blocks)
	}
	assert.NotEqual(t, seen[2], seen[3], "the naive rule flaps: %v", seen)
	assert.Equal(t, seen[2], seen[4], "with a period of two readings: %v", seen)
}

// The hysteresis, reading by reading.
func TestFollowerHysteresis(t *testing.T) {
	for _, tt := range []struct {
		name                          string
		blocks, want, margin, sharers int64
		out                           int64
	}{
		{"shrinks at once", 10, 7, 0, 1, 7},
		{"shrinks at once with a margin", 10, 9, 5, 2, 9},
		{"grows by one block", 10, 11, 0, 1, 11},
		{"alone, grows all the way", 0, 37, 0, 1, 37},
		{"shared by two, half", 10, 20, 0, 2, 15},
		{"shared by three, a third rounded down", 10, 15, 0, 3, 11},
		{"a step that rounds to 0 stays", 10, 11, 0, 2, 10},
		{"within the margin stays", 10, 12, 2, 1, 10},
		{"past the margin grows", 10, 13, 2, 1, 13},
		{"the largest margin", 0, math.MaxInt64, math.MaxInt64, 1, 0},
		{"steady", 10, 10, 0, 1, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.out, follow(tt.blocks, tt.want, tt.margin, tt.sharers))
		})
	}
}

// A reading's figures: the over-share is what is outside the budget
// beyond its share, per process and device-wide, and the target says
// which it used.
func TestFollowerReading(t *testing.T) {
	const gib = 1 << 30
	base, m := measuringExample(0)
	perProcess := func(u Usage, own int64) Usage {
		u.PerProcess, u.ProcessUsed = true, own
		return u
	}
	for _, tt := range []struct {
		name      string
		footprint bool
		base      Usage
		m         Measurement
		reading   func(b Budget) Usage
		over      int64
		per       bool
		err       string
		sharers   int
	}{
		{"device-wide, as at the baseline", false, base, m, func(b Budget) Usage {
			return Usage{Total: m.Total, Used: base.Used, Tracked: base.Tracked}
		}, 0, false, "", 1},
		{"device-wide, another process took 1 GiB more than the share left", false, base, m, func(b Budget) Usage {
			outside := m.Total - b.Requested + gib
			own := b.UntrackedIncrease + b.GraphReserved
			return Usage{Total: m.Total, Used: outside + own + base.Tracked, Tracked: base.Tracked}
		}, gib, false, "", 1},
		{"per process, within the share", false, perProcess(base, gib/2), withProcesses(m, gib/2), func(b Budget) Usage {
			u := perProcess(Usage{Total: m.Total}, gib/2)
			u.OtherProcessesUsed = m.Total - b.Requested - gib/2
			return u
		}, 0, true, "", 1},
		{"per process, past the share", false, perProcess(base, gib/2), withProcesses(m, gib/2), func(b Budget) Usage {
			u := perProcess(Usage{Total: m.Total}, gib/2)
			u.OtherProcessesUsed = m.Total - b.Requested - gib/2 + 3*gib
			u.OtherProcesses = []ProcessMemory{{PID: 7}, {PID: 8}}
			return u
		}, 3 * gib, true, "", 3},
		{"footprint: this process's baseline is inside the budget", true, perProcess(base, gib/2), withProcesses(m, gib/2), func(b Budget) Usage {
			u := perProcess(Usage{Total: m.Total}, gib/2)
			u.OtherProcessesUsed = m.Total - b.Requested + gib
			return u
		}, gib, true, "", 1},
		{"NVML failed at this reading", false, perProcess(base, gib/2), withProcesses(m, gib/2), func(b Budget) Usage {
			return Usage{Total: m.Total, Used: base.Used, Tracked: base.Tracked, PerProcessErr: fmt.Errorf("%w: a reading's", ErrPerProcessUnavailable)}
		}, 0, false, "a reading's", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.m.budget(tt.base, 0.5, 16<<20, tt.footprint, true)
			require.NoError(t, err)
			f := &Follower{parts: []followed{{budget: b, baseTracked: tt.base.Tracked, baseProcessUsed: tt.base.ProcessUsed, total: tt.m.Total}}}
			tg, err := f.next([]Usage{tt.reading(b)}, []int64{0})
			require.NoError(t, err)
			got := tg.Common.Budgets[0]
			assert.Equal(t, tt.over, got.OverShare)
			assert.Equal(t, b.SetAside+tt.over, got.SetAside, "one formula: SetAside holds the over-share")
			want := b
			want.OverShare = tt.over
			assert.Equal(t, want.fill(tt.m.Total), got)
			assert.Equal(t, got.Blocks, tg.Common.Blocks)
			assert.Equal(t, tt.sharers, tg.Sharers)
			assert.Equal(t, got.Blocks/int64(tt.sharers), tg.Blocks, "the first reading: the growth from 0, split between the sharers")
			assert.Equal(t, tt.per, tg.PerProcess)
			if tt.err == "" {
				assert.NoError(t, tg.PerProcessErr)
			} else {
				assert.ErrorContains(t, tg.PerProcessErr, tt.err)
			}
		})
	}
}

// withProcesses gives a measurement per-process figures, with own bytes
// of this process's at the start and the end besides its tracked ones.
func withProcesses(m Measurement, own int64) Measurement {
	m.PerProcess = true
	m.StartProcessUsed, m.EndProcessUsed = own+m.StartHeld, own+m.EndHeld
	return m
}

// Bad arguments get typed errors and change nothing.
func TestFollowerErrors(t *testing.T) {
	base, m := measuringExample(0)
	base.Device, m.Device = CPU(), CPU()
	for _, tt := range []struct {
		name string
		call func() error
		want error
	}{
		{"utilization 0", func() error { _, err := m.Follow(base, 0, 1<<20); return err }, ErrInvalidArgument},
		{"utilization NaN", func() error { _, err := m.Follow(base, math.NaN(), 1<<20); return err }, ErrInvalidArgument},
		{"utilization above 1", func() error { _, err := m.FollowFootprint(base, 1.5, 1<<20); return err }, ErrInvalidArgument},
		{"block size 0", func() error { _, err := m.Follow(base, 0.5, 0); return err }, ErrInvalidSize},
		{"negative block size", func() error { _, err := m.Follow(base, 0.5, -1); return err }, ErrInvalidSize},
		{"another device's baseline", func() error {
			b := base
			b.Device = Device{kind: KindCUDA}
			_, err := m.Follow(b, 0.5, 1<<20)
			return err
		}, ErrInvalidArgument},
		{"footprint without per-process figures", func() error { _, err := m.FollowFootprint(base, 0.5, 1<<20); return err }, ErrPerProcessUnavailable},
		{"a measurement without a device", func() error {
			m, base := m, base
			m.Device, base.Device = Device{}, Device{}
			_, err := m.Follow(base, 0.5, 1<<20)
			return err
		}, ErrInvalidDevice},
		{"no follower", func() error { _, err := FollowDevices(); return err }, ErrInvalidArgument},
		{"a nil follower", func() error { _, err := FollowDevices(nil); return err }, ErrInvalidArgument},
		{"the zero follower", func() error { _, err := FollowDevices(&Follower{}); return err }, ErrInvalidArgument},
		{"Read of the zero follower", func() error { _, err := (&Follower{}).Read(); return err }, ErrInvalidArgument},
		{"Read of nil", func() error { _, err := (*Follower)(nil).Read(); return err }, ErrInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			assert.ErrorIs(t, err, tt.want)
			if err != nil {
				assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), "one prefix: %v", err)
			}
		})
	}

	f, err := m.Follow(base, 0.5, 1<<20)
	require.NoError(t, err)
	g, err := m.Follow(base, 0.5, 2<<20)
	require.NoError(t, err)
	_, err = FollowDevices(f, g)
	assert.ErrorIs(t, err, ErrInvalidArgument, "one device twice, and two block sizes")
	require.NoError(t, f.SetMargin(3))
	assert.ErrorIs(t, f.SetMargin(-1), ErrInvalidArgument)
	assert.Equal(t, int64(3), f.margin, "a refused margin changes nothing")
	assert.ErrorIs(t, (*Follower)(nil).SetMargin(1), ErrInvalidArgument)
	assert.Zero(t, (*Follower)(nil).Blocks())
	ch := make(chan Target)
	for _, bad := range []struct {
		ctx      context.Context
		interval time.Duration
		ch       chan<- Target
	}{{nil, time.Second, ch}, {context.Background(), 0, ch}, {context.Background(), -time.Second, ch}, {context.Background(), time.Second, nil}} {
		assert.ErrorIs(t, f.Run(bad.ctx, bad.interval, bad.ch), ErrInvalidArgument)
	}
	assert.Zero(t, f.Blocks(), "no reading was taken")
}

// On the CPU: Run sends the first target at once, then only changes, and
// returns ctx's error once it is done; Read meanwhile takes its own
// readings. The budget is of blocks of 1 GiB, which the process's own
// noise does not move.
func TestFollowerRunCPU(t *testing.T) {
	d := CPU()
	base, err := d.Baseline()
	require.NoError(t, err)
	m, err := d.Measure(func() error { return nil })
	require.NoError(t, err)
	f, err := m.Follow(base, 0.5, 1<<30)
	require.NoError(t, err)
	b, err := m.Budget(base, 0.5, 1<<30)
	if err != nil {
		t.Skipf("the machine has less than half its memory free: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan Target)
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, time.Millisecond, changes) }()
	first := <-changes
	assert.True(t, first.Changed)
	assert.Zero(t, first.Previous)
	assert.False(t, first.PerProcess, "the CPU has no per-process figures")
	assert.NoError(t, first.PerProcessErr, "nor should it")
	assert.Equal(t, 1, first.Sharers)
	assert.LessOrEqual(t, first.Blocks, b.Blocks, "never more than Budget's")
	assert.Equal(t, first.Blocks, first.Common.Blocks)
	assert.Equal(t, d, first.Common.Budgets[0].Device)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, first.Blocks, f.Blocks())
	r, err := f.Read()
	require.NoError(t, err)
	assert.Equal(t, first.Blocks, r.Previous)

	// A done context ends Run before its first reading.
	assert.ErrorIs(t, f.Run(ctx, time.Millisecond, changes), context.Canceled)
}

// Several devices give the common figure: the fewest blocks of any.
func TestFollowDevicesCommon(t *testing.T) {
	base, m := measuringExample(0)
	part := func(d Device, utilization float64) *Follower {
		base, m := base, m
		base.Device, m.Device = d, d
		b, err := m.budget(base, utilization, 16<<20, false, true)
		require.NoError(t, err)
		return &Follower{parts: []followed{{budget: b, baseTracked: base.Tracked, total: m.Total}}}
	}
	f, err := FollowDevices(part(cudaDev(0), 0.9), part(cudaDev(1), 0.6))
	require.NoError(t, err)
	reading := Usage{Total: m.Total, Used: base.Used, Tracked: base.Tracked}
	tg, err := f.next([]Usage{reading, reading}, []int64{0, 0})
	require.NoError(t, err)
	require.Len(t, tg.Common.Budgets, 2)
	assert.Less(t, tg.Common.Budgets[1].Blocks, tg.Common.Budgets[0].Blocks)
	assert.Equal(t, 1, tg.Common.Limiting)
	assert.Equal(t, tg.Common.Budgets[1].Blocks, tg.Blocks)

	// The first device crowded past its share: it limits the cache now.
	crowded := reading
	crowded.Used += m.Total / 2
	tg, err = f.next([]Usage{crowded, reading}, []int64{0, 0})
	require.NoError(t, err)
	assert.Equal(t, 0, tg.Common.Limiting)
	assert.Equal(t, tg.Common.Budgets[0].Blocks, tg.Blocks)
	assert.True(t, tg.Changed)
}

// FuzzFollowerModel drives two followers and a third process without one
// on a model device: the third takes and gives back memory (never more
// than is free), and the followers read, together or one after the
// other. Against the model's sequential rules: after every reading the
// device is never over-full, no target passes the formula's blocks, and
// once the third process holds still, the followers settle within a
// bound and stay settled; alone with their shares, they end at their
// budgets, less at most the two blocks that the split between three
// processes leaves each.
func FuzzFollowerModel(f *testing.F) {
	f.Add([]byte{0, 8, 3, 16, 0}, true)
	f.Add([]byte{12, 0, 12, 1, 5}, false)
	f.Add([]byte{255, 1, 128, 7}, true)
	f.Fuzz(func(t *testing.T, loads []byte, together bool) {
		if len(loads) > 16 {
			loads = loads[:16]
		}
		d := &modelDevice{total: 4 << 30, block: 64 * mib, procs: []*modelProc{
			{pid: 1, context: 48 * mib, weights: 1 << 30, pass: 256 * mib, utilization: 0.5},
			{pid: 2, context: 48 * mib, weights: 512 * mib, pass: 128 * mib, utilization: 0.45},
			{pid: 3, context: 48 * mib},
		}}
		d.procs[0].present, d.procs[1].present, d.procs[2].present = true, true, true
		d.start(t, 0)
		d.start(t, 1)
		rule := func(fl *Follower, u Usage) Target {
			tg := followRule(t)(fl, u)
			require.LessOrEqual(t, tg.Blocks, tg.Common.Blocks)
			return tg
		}
		steady := func() {
			for i := 0; ; i++ {
				changed := d.step(t, together, rule)
				require.LessOrEqual(t, d.used(), d.total, "over-full after %d readings", i)
				if !changed {
					break
				}
				require.Less(t, i, 64, "not settled")
			}
			for range 4 {
				require.False(t, d.step(t, together, rule), "settled, then moved")
			}
		}
		steady()
		c := d.procs[2]
		for _, l := range loads {
			free := d.total - d.used() + c.weights
			c.weights = min(int64(l)*(16*mib), free)
			steady()
		}
		c.weights = 0
		steady()
		for i, p := range d.procs[:2] {
			b := p.follower.parts[0].budget
			assert.GreaterOrEqual(t, p.blocks, b.Blocks-2, "follower %d ends near its budget of %d", i, b.Blocks)
			assert.LessOrEqual(t, p.blocks, b.Blocks)
		}
	})
}
