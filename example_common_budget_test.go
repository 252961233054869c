package memtrack_test

import (
	"context"
	"fmt"
	"log"

	"github.com/memtrack/memtrack"
)

// Measure one pass that uses several devices at once. On a machine with
// two GPUs the devices are cuda:0 and cuda:1 (memtrack.ParseDevice), and
// the pass splits each layer between them; here it is the CPU alone.
func ExampleMeasureDevices() {
	devices := []memtrack.Device{memtrack.CPU()}
	pass := func() error {
		for _, d := range devices { // each device's share of a layer
			b, err := d.Alloc(16 << 20)
			if err != nil {
				return err
			}
			if err := b.Free(); err != nil {
				return err
			}
		}
		return nil
	}
	ms, err := memtrack.MeasureDevices(devices, pass) // pass runs once
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		fmt.Printf("%v: peak %d MiB above the start\n", m.Device, m.PeakTrackedIncrease>>20)
	}
	// Output:
	// cpu: peak 16 MiB above the start
}

// A tensor-parallel instance on two 80 GiB GPUs: each holds half the
// weights, and both run one forward pass together (measured with
// memtrack.MeasureDevices, which runs it once inside the measurement of
// every device). Rank 0 gathers the logits for sampling, so its pass peaks
// higher: it holds fewer blocks, and every device gets that many.
func ExampleNewCommonBudget() {
	const gib = 1 << 30
	// The figures the two GPUs might give: the baseline of each, which
	// holds its 1 GiB context, then the measurement of the pass.
	base := memtrack.Usage{Total: 80 * gib, Free: 79 * gib, Used: 1 * gib, Untracked: 1 * gib}
	measured := func(peak int64) memtrack.Measurement {
		return memtrack.Measurement{
			Total:               80 * gib,
			StartTracked:        8 * gib, // half the weights
			StartUsed:           9 * gib,
			PeakTrackedIncrease: peak,
			PeakTracked:         8*gib + peak,
			EndTracked:          8 * gib,
			EndUsed:             10 * gib, // libraries kept 1 GiB of workspaces
			UsedIncrease:        1 * gib,
			Untracked:           1 * gib,
		}
	}
	var budgets []memtrack.Budget
	for _, m := range []memtrack.Measurement{measured(6 * gib), measured(3 * gib)} {
		b, err := m.Budget(base, 0.9, 16<<20)
		if err != nil {
			log.Fatal(err)
		}
		budgets = append(budgets, b)
	}
	c, err := memtrack.NewCommonBudget(budgets...)
	if err != nil {
		log.Fatal(err)
	}
	for i, b := range c.Budgets {
		fmt.Printf("GPU %d: %d GiB set aside, %d blocks\n", i, b.SetAside/gib, b.Blocks)
	}
	fmt.Printf("common: %d blocks of %d MiB, %d GiB on each GPU; GPU %d limits it\n",
		c.Blocks, c.BlockSize>>20, c.CacheSize/gib, c.Limiting)

	_, err = memtrack.NewCommonBudget()
	fmt.Println(err)
	// Output:
	// GPU 0: 15 GiB set aside, 3648 blocks
	// GPU 1: 12 GiB set aside, 3840 blocks
	// common: 3648 blocks of 16 MiB, 57 GiB on each GPU; GPU 0 limits it
	// memtrack: invalid argument: a common budget of no device: give each device's budget
}

// Ranks in other processes, or on other hosts, agree on one block count
// through the caller's all-reduce of the minimum: torch.distributed's,
// NCCL's, gloo's, or an etcd key's. memtrack brings no transport.
func ExampleCommonBudget_Reduce() {
	c, err := memtrack.NewCommonBudget(
		memtrack.Budget{BlockSize: 16 << 20, Available: 60 << 30, Blocks: 3840},
		memtrack.Budget{BlockSize: 16 << 20, Available: 57 << 30, Blocks: 3648},
	)
	if err != nil {
		log.Fatal(err)
	}
	// Stands for the all-reduce: another host's devices hold 3500 blocks.
	allReduceMin := func(ctx context.Context, blocks int64) (int64, error) {
		return min(blocks, 3500), nil
	}
	c, err = c.Reduce(context.Background(), allReduceMin)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d blocks here, %d across the ranks; another rank limits it: %v\n", c.LocalBlocks, c.Blocks, c.LimitedByOtherRank)
	// Output:
	// 3648 blocks here, 3500 across the ranks; another rank limits it: true
}
