package memtrack

import (
	"context"
	"fmt"
)

// CommonBudget is the budget of a cache that several devices hold together,
// as the ranks of a tensor-parallel engine do: every device holds its share
// of every block, so every device holds the same number of blocks, and the
// cache has as many as the device with the fewest can hold. vLLM takes that
// minimum over the budgets of its workers, and its data-parallel ranks
// all-reduce it; [NewCommonBudget] takes it over the devices of this
// process, and [CommonBudget.Reduce] over the ranks of other processes or
// hosts, through the caller's own transport.
type CommonBudget struct {
	// Budgets holds each device's budget, in the order given to
	// NewCommonBudget.
	Budgets []Budget
	// BlockSize is the bytes one block takes on each device, the same in
	// every budget.
	BlockSize int64
	// LocalBlocks is the fewest Blocks of any of Budgets: the blocks that
	// every device of this process can hold.
	LocalBlocks int64
	// Limiting is the index in Budgets of the budget with LocalBlocks (the
	// first, where several have them): Budgets[Limiting].Device is the
	// device that limits the cache in this process.
	Limiting int
	// LimitedByOtherRank says that [CommonBudget.Reduce] found a rank
	// that holds fewer blocks than LocalBlocks: another process's devices
	// limit the cache, not Budgets[Limiting].Device.
	LimitedByOtherRank bool
	// Blocks is the blocks of the cache on every device: LocalBlocks, or,
	// after Reduce, the fewest that any rank's devices can hold.
	Blocks int64
	// CacheSize is Blocks × BlockSize: the bytes the cache takes on each
	// device, at most the Available of every budget.
	CacheSize int64
}

// NewCommonBudget returns the budget of a cache held by the devices of
// budgets together: the fewest blocks that any of them can hold, and the
// device that holds that few. Each budget is one device's, as
// [Measurement.Budget] (or SharedBudget or FootprintBudget) returns it, of
// one block size: the bytes one block takes on that device (in a
// tensor-parallel engine, its share of the block's heads). A budget with
// no room for one block is no error: the common budget then has 0 blocks.
//
// It fails with [ErrInvalidArgument] where budgets is empty, gives a
// device twice (a budget of the zero Device, built by hand from a
// Measurement without one, is told apart by its place), mixes block sizes,
// or holds a budget whose Blocks do not fit its Available bytes, and with
// [ErrInvalidSize] for a block size <= 0.
func NewCommonBudget(budgets ...Budget) (CommonBudget, error) {
	if len(budgets) == 0 {
		return CommonBudget{}, fmt.Errorf("%w: a common budget of no device: give each device's budget", ErrInvalidArgument)
	}
	c := CommonBudget{Budgets: append([]Budget(nil), budgets...), BlockSize: budgets[0].BlockSize}
	for i, b := range budgets {
		if b.BlockSize <= 0 {
			return CommonBudget{}, fmt.Errorf("%w: %s has a block size of %d bytes: give budgets computed by Measurement.Budget", ErrInvalidSize, budgetName(i, b), b.BlockSize)
		}
		if b.BlockSize != c.BlockSize {
			return CommonBudget{}, fmt.Errorf("%w: %s has blocks of %d bytes, %s of %d: every device's budget must be of one block size",
				ErrInvalidArgument, budgetName(i, b), b.BlockSize, budgetName(0, budgets[0]), c.BlockSize)
		}
		if b.Blocks < 0 || b.Available < 0 || b.Blocks > b.Available/b.BlockSize {
			return CommonBudget{}, fmt.Errorf("%w: %s has %d blocks of %d bytes and %d bytes available: the blocks must fit the bytes",
				ErrInvalidArgument, budgetName(i, b), b.Blocks, b.BlockSize, b.Available)
		}
		for j, e := range budgets[:i] {
			if b.Device != (Device{}) && b.Device == e.Device {
				return CommonBudget{}, fmt.Errorf("%w: budgets %d and %d are both of %v: give each device's budget once", ErrInvalidArgument, j, i, b.Device)
			}
		}
		if i == 0 || b.Blocks < c.LocalBlocks {
			c.LocalBlocks, c.Limiting = b.Blocks, i
		}
	}
	return c.withBlocks(c.LocalBlocks), nil
}

// budgetName names the budget at index i of a NewCommonBudget call: by its
// place, and by its device where it has one.
func budgetName(i int, b Budget) string {
	if b.Device == (Device{}) {
		return fmt.Sprintf("budget %d", i)
	}
	return fmt.Sprintf("budget %d (%v)", i, b.Device)
}

// withBlocks returns c with blocks on every device.
func (c CommonBudget) withBlocks(blocks int64) CommonBudget {
	// blocks <= LocalBlocks <= Available / BlockSize: no overflow.
	c.Blocks, c.CacheSize = blocks, blocks*c.BlockSize
	c.LimitedByOtherRank = blocks < c.LocalBlocks
	return c
}

// Reduce narrows c to the fewest blocks that any rank can hold, where the
// cache spans ranks in other processes or on other hosts (tensor
// parallelism across hosts, the ranks of data parallelism that must agree
// on one size). memtrack brings no transport: allReduceMin is the caller's
// all-reduce of the minimum over every rank (through NCCL, gloo, MPI, an
// etcd key, ...). Reduce calls it once, with ctx and c.Blocks, and it
// returns the fewest blocks that any rank passed. Every rank calls it with
// budgets of the same block size; a rank that has no budget (its own was
// refused) should still take part, with 0 blocks, so that the others do
// not wait for it, and then start none.
//
// The result has that many Blocks, and LimitedByOtherRank set where it is
// fewer than this process's LocalBlocks. Reduce never returns more blocks
// than c has: a reduction that returns more than it was given, or a
// negative count, is an error matching [ErrInvalidArgument]. The
// reduction's own error is returned wrapped, and ctx's where it is done
// before the reduction is called. On an error Reduce returns the zero
// CommonBudget: a rank that goes on with its own count would disagree with
// the others.
func (c CommonBudget) Reduce(ctx context.Context, allReduceMin func(ctx context.Context, blocks int64) (int64, error)) (CommonBudget, error) {
	if len(c.Budgets) == 0 {
		return CommonBudget{}, fmt.Errorf("%w: reduction of a CommonBudget that NewCommonBudget did not return", ErrInvalidArgument)
	}
	if ctx == nil || allReduceMin == nil {
		return CommonBudget{}, fmt.Errorf("%w: reduction of %d blocks across ranks: nil context or reduction", ErrInvalidArgument, c.Blocks)
	}
	if err := ctx.Err(); err != nil {
		return CommonBudget{}, wrapf(err, "reduction of %d blocks across ranks", c.Blocks)
	}
	blocks, err := allReduceMin(ctx, c.Blocks)
	if err != nil {
		return CommonBudget{}, wrapf(err, "reduction of %d blocks across ranks", c.Blocks)
	}
	if blocks < 0 || blocks > c.Blocks {
		return CommonBudget{}, fmt.Errorf("%w: reduction of %d blocks across ranks returned %d: want the fewest blocks of any rank, from 0 to the %d given",
			ErrInvalidArgument, c.Blocks, blocks, c.Blocks)
	}
	return c.withBlocks(blocks), nil
}
