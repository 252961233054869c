package memtrack

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBudgetNamesItsDevice: every budget carries the device of the
// measurement it was computed from, which a common budget tells its
// devices apart by.
func TestBudgetNamesItsDevice(t *testing.T) {
	const gib = 1 << 30
	base, m := measuringExample(0)
	base.Device, m.Device = CPU(), CPU()
	base.PerProcess, base.ProcessUsed = true, gib

	b, err := m.Budget(base, 0.5, gib)
	require.NoError(t, err)
	assert.Equal(t, CPU(), b.Device)
	b, err = m.FootprintBudget(base, 0.5, gib)
	require.NoError(t, err)
	assert.Equal(t, CPU(), b.Device)
	b, err = m.SharedBudget(0.5, gib)
	require.NoError(t, err)
	assert.Equal(t, CPU(), b.Device)
}

// blocksOf is a budget of n blocks of 16 MiB on d, with a little room
// over the last block.
func blocksOf(d Device, n int64) Budget {
	return Budget{Device: d, BlockSize: 16 << 20, Blocks: n, Available: n*16<<20 + 5}
}

func cudaDev(ordinal int) Device { return Device{kind: KindCUDA, ordinal: ordinal} }

func TestNewCommonBudget(t *testing.T) {
	for _, tt := range []struct {
		name     string
		budgets  []Budget
		blocks   int64
		limiting int
	}{
		{"one device", []Budget{blocksOf(cudaDev(0), 7)}, 7, 0},
		{"the second limits", []Budget{blocksOf(cudaDev(0), 300), blocksOf(cudaDev(1), 200), blocksOf(cudaDev(2), 250)}, 200, 1},
		{"the last limits", []Budget{blocksOf(cudaDev(3), 300), blocksOf(cudaDev(1), 301), blocksOf(cudaDev(0), 299)}, 299, 2},
		{"a tie: the first of them", []Budget{blocksOf(cudaDev(0), 90), blocksOf(cudaDev(1), 80), blocksOf(cudaDev(2), 80)}, 80, 1},
		{"no room on one device", []Budget{blocksOf(cudaDev(0), 90), blocksOf(cudaDev(1), 0)}, 0, 1},
		{"budgets without a device, told apart by their place", []Budget{blocksOf(Device{}, 5), blocksOf(Device{}, 4)}, 4, 1},
		{"a device of each kind", []Budget{blocksOf(CPU(), 12), blocksOf(cudaDev(0), 10)}, 10, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCommonBudget(tt.budgets...)
			require.NoError(t, err)
			assert.Equal(t, CommonBudget{
				Budgets: tt.budgets, BlockSize: 16 << 20, LocalBlocks: tt.blocks, Limiting: tt.limiting,
				Blocks: tt.blocks, CacheSize: tt.blocks * 16 << 20,
			}, c)
			for _, b := range c.Budgets {
				assert.LessOrEqual(t, c.CacheSize, b.Available, "the cache fits every device's budget")
			}
		})
	}

	t.Run("the budgets are copied", func(t *testing.T) {
		in := []Budget{blocksOf(cudaDev(0), 3), blocksOf(cudaDev(1), 4)}
		c, err := NewCommonBudget(in...)
		require.NoError(t, err)
		in[0].Blocks = 1
		assert.Equal(t, int64(3), c.Budgets[0].Blocks)
	})
}

func TestNewCommonBudgetErrors(t *testing.T) {
	mixed := blocksOf(cudaDev(1), 4)
	mixed.BlockSize, mixed.Available = 8<<20, 4*8<<20
	over := blocksOf(cudaDev(1), 4)
	over.Available = 4*16<<20 - 1
	for _, tt := range []struct {
		name    string
		budgets []Budget
		want    error
		msg     string
	}{
		{"no budget", nil, ErrInvalidArgument, "memtrack: invalid argument: a common budget of no device: give each device's budget"},
		{"zero block size", []Budget{blocksOf(cudaDev(0), 4), {Device: cudaDev(1)}}, ErrInvalidSize,
			"memtrack: invalid size: budget 1 (cuda:1) has a block size of 0 bytes: give budgets computed by Measurement.Budget"},
		{"negative block size", []Budget{{BlockSize: -1}}, ErrInvalidSize, ""},
		{"two block sizes", []Budget{blocksOf(cudaDev(0), 4), mixed}, ErrInvalidArgument,
			"memtrack: invalid argument: budget 1 (cuda:1) has blocks of 8388608 bytes, budget 0 (cuda:0) of 16777216: every device's budget must be of one block size"},
		{"a device twice", []Budget{blocksOf(cudaDev(0), 4), blocksOf(cudaDev(1), 4), blocksOf(cudaDev(0), 3)}, ErrInvalidArgument,
			"memtrack: invalid argument: budgets 0 and 2 are both of cuda:0: give each device's budget once"},
		{"blocks past the bytes", []Budget{blocksOf(cudaDev(0), 4), over}, ErrInvalidArgument,
			"memtrack: invalid argument: budget 1 (cuda:1) has 4 blocks of 16777216 bytes and 67108863 bytes available: the blocks must fit the bytes"},
		{"negative blocks", []Budget{{BlockSize: 1, Blocks: -1}}, ErrInvalidArgument, ""},
		{"negative bytes", []Budget{{BlockSize: 1, Available: -1}}, ErrInvalidArgument, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCommonBudget(tt.budgets...)
			assert.ErrorIs(t, err, tt.want)
			if tt.msg != "" {
				assert.EqualError(t, err, tt.msg)
			}
			assert.Equal(t, CommonBudget{}, c)
		})
	}
}

// barrierMin is an all-reduce of the minimum over n ranks, each a
// goroutine, as NCCL's or gloo's is over processes: each call waits until
// all n have made theirs, then returns the fewest blocks any gave.
type barrierMin struct {
	mu      sync.Mutex
	n       int
	arrived int
	min     int64
	done    chan struct{}
}

func newBarrierMin(n int) *barrierMin { return &barrierMin{n: n, done: make(chan struct{})} }

func (a *barrierMin) allReduceMin(ctx context.Context, blocks int64) (int64, error) {
	a.mu.Lock()
	if a.arrived == 0 || blocks < a.min {
		a.min = blocks
	}
	a.arrived++
	if a.arrived == a.n {
		close(a.done)
	}
	a.mu.Unlock()
	select {
	case <-a.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.min, nil
}

// TestCommonBudgetReduceRanks: four ranks of two devices each, goroutines
// standing for processes, reduce their common budgets through one
// all-reduce: every rank ends with the fewest blocks of any, the rank that
// holds them is limited by its own device, the others by another rank.
func TestCommonBudgetReduceRanks(t *testing.T) {
	ranks := [][2]int64{{100, 80}, {70, 90}, {120, 75}, {200, 300}}
	const global = 70 // rank 1's cuda:0
	red := newBarrierMin(len(ranks))
	got := make([]CommonBudget, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, blocks := range ranks {
		wg.Go(func() {
			c, err := NewCommonBudget(blocksOf(cudaDev(0), blocks[0]), blocksOf(cudaDev(1), blocks[1]))
			if err != nil {
				errs[r] = err
				return
			}
			got[r], errs[r] = c.Reduce(context.Background(), red.allReduceMin)
		})
	}
	wg.Wait()
	for r, blocks := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
		c := got[r]
		local := min(blocks[0], blocks[1])
		assert.Equal(t, int64(global), c.Blocks, "rank %d", r)
		assert.Equal(t, int64(global*16<<20), c.CacheSize, "rank %d", r)
		assert.Equal(t, local, c.LocalBlocks, "rank %d: its own devices' fewest", r)
		assert.Equal(t, local != global, c.LimitedByOtherRank, "rank %d", r)
		wantLimiting := 0
		if blocks[1] < blocks[0] {
			wantLimiting = 1
		}
		assert.Equal(t, wantLimiting, c.Limiting, "rank %d", r)
	}
}

// A second reduction (over another group of ranks) narrows the first's
// result, never widens it.
func TestCommonBudgetReduceTwice(t *testing.T) {
	c, err := NewCommonBudget(blocksOf(cudaDev(0), 50), blocksOf(cudaDev(1), 40))
	require.NoError(t, err)
	var given []int64
	reduceTo := func(n int64) func(context.Context, int64) (int64, error) {
		return func(_ context.Context, blocks int64) (int64, error) {
			given = append(given, blocks)
			return min(blocks, n), nil
		}
	}
	c, err = c.Reduce(context.Background(), reduceTo(40)) // this rank has the fewest
	require.NoError(t, err)
	assert.False(t, c.LimitedByOtherRank)
	assert.Equal(t, int64(40), c.Blocks)
	c, err = c.Reduce(context.Background(), reduceTo(30))
	require.NoError(t, err)
	assert.True(t, c.LimitedByOtherRank)
	assert.Equal(t, int64(30), c.Blocks)
	assert.Equal(t, int64(30*16<<20), c.CacheSize)
	assert.Equal(t, []int64{40, 40}, given, "each reduction is given the blocks so far")
	_, err = c.Reduce(context.Background(), func(context.Context, int64) (int64, error) { return 35, nil })
	assert.ErrorIs(t, err, ErrInvalidArgument, "35 blocks after 30: more than this process may hold now")
}

func TestCommonBudgetReduceErrors(t *testing.T) {
	c, err := NewCommonBudget(blocksOf(cudaDev(0), 50), blocksOf(cudaDev(1), 40))
	require.NoError(t, err)
	kept, err := NewCommonBudget(blocksOf(cudaDev(0), 50), blocksOf(cudaDev(1), 40))
	require.NoError(t, err)
	down := errors.New("transport down")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	returns := func(n int64, err error) func(context.Context, int64) (int64, error) {
		return func(context.Context, int64) (int64, error) { return n, err }
	}
	for _, tt := range []struct {
		name   string
		c      CommonBudget
		ctx    context.Context
		reduce func(context.Context, int64) (int64, error)
		want   error
		msg    string
	}{
		{"the reduction fails", c, context.Background(), returns(0, down), down,
			"memtrack: reduction of 40 blocks across ranks: transport down"},
		{"more than this process holds", c, context.Background(), returns(41, nil), ErrInvalidArgument,
			"memtrack: invalid argument: reduction of 40 blocks across ranks returned 41: want the fewest blocks of any rank, from 0 to the 40 given"},
		{"a negative count", c, context.Background(), returns(-1, nil), ErrInvalidArgument, ""},
		{"the context is done", c, canceled, returns(0, nil), context.Canceled,
			"memtrack: reduction of 40 blocks across ranks: context canceled"},
		{"no reduction", c, context.Background(), nil, ErrInvalidArgument, ""},
		{"no context", c, nil, returns(0, nil), ErrInvalidArgument, ""},
		{"a CommonBudget not made by NewCommonBudget", CommonBudget{Blocks: 3}, context.Background(), returns(0, nil), ErrInvalidArgument, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.c.Reduce(tt.ctx, tt.reduce)
			assert.ErrorIs(t, err, tt.want)
			if tt.msg != "" {
				assert.EqualError(t, err, tt.msg)
			}
			assert.Equal(t, CommonBudget{}, got, "a failed reduction gives no budget")
			assert.Equal(t, kept, c, "the budget reduced is unchanged")
		})
	}
}

// TestCommonBudgetOfMeasuredDevices: the whole flow on two devices of the
// in-memory fake backend: a baseline of each, weights (three times as many
// on cuda:1), one tensor-parallel pass measured on both, each device's
// budget by vLLM's formula, and the common budget, which cuda:1 limits.
func TestCommonBudgetOfMeasuredDevices(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	var bases []Usage
	for _, d := range ds {
		base, err := d.Baseline()
		require.NoError(t, err)
		bases = append(bases, base)
	}
	w0, w1 := mustAlloc(t, ds[0], 64<<20), mustAlloc(t, ds[1], 192<<20)
	defer w0.Free()
	defer w1.Free()
	runs := 0
	ms, err := MeasureDevices(ds, tensorParallelPass(t, ds, []int64{8 << 20, 8 << 20}, 3, &runs))
	require.NoError(t, err)

	var budgets []Budget
	for i, m := range ms {
		b, err := m.Budget(bases[i], 0.5, 16<<20)
		require.NoError(t, err)
		budgets = append(budgets, b)
	}
	// Each requests 512 MiB. cuda:0 sets aside 64 MiB of weights and the
	// pass's 8 MiB: 440 MiB, 27 blocks; cuda:1 192 + 8 MiB: 312 MiB, 19.
	assert.Equal(t, int64(27), budgets[0].Blocks)
	assert.Equal(t, int64(19), budgets[1].Blocks)
	c, err := NewCommonBudget(budgets...)
	require.NoError(t, err)
	assert.Equal(t, ds[1], c.Budgets[c.Limiting].Device)
	assert.Equal(t, int64(19), c.Blocks)
	assert.Equal(t, int64(19*16<<20), c.CacheSize)
}

// TestBudgetJSON: a budget goes through JSON and back, as the NVML tests'
// children send theirs; one without a device (the zero Budget of a
// refusal, or one built by hand) leaves the device out, since the zero
// Device is written "invalid", which reads back as no device.
func TestBudgetJSON(t *testing.T) {
	base, m := measuringExample(0)
	base.Device, m.Device = CPU(), CPU()
	withDevice, err := m.Budget(base, 0.5, 1<<30)
	require.NoError(t, err)
	for _, b := range []Budget{{}, withDevice, blocksOf(Device{}, 3)} {
		data, err := json.Marshal(b)
		require.NoError(t, err)
		var back Budget
		require.NoError(t, json.Unmarshal(data, &back), "%s", data)
		assert.Equal(t, b, back)
	}
}
