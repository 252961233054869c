package memtrack_test

import (
	"fmt"

	"github.com/memtrack/memtrack"
)

// Two instances share a GPU of 80 GiB; this one took its baseline with its
// 500 MiB context, loaded 16 GiB of weights and peaked 2 GiB above them in
// its pass, while the other loaded 30 GiB. On a CUDA GPU, Device.Baseline
// and Device.Measure read these figures (NVML's per-process ones with
// cuMemGetInfo's); they are written out here. From the per-process
// figures the budget is the one the instance gets alone; from the
// device-wide ones, the other's weights count against it.
func ExampleMeasurement_Budget_perProcess() {
	const mib, gib = 1 << 20, 1 << 30
	base := memtrack.Usage{Total: 80 * gib, Free: 80*gib - 1000*mib, Used: 1000 * mib, Untracked: 1000 * mib,
		PerProcess: true, ProcessUsed: 500 * mib, ProcessUntracked: 500 * mib, OtherProcessesUsed: 500 * mib}
	m := memtrack.Measurement{Total: 80 * gib,
		StartTracked: 16 * gib, PeakTracked: 18 * gib, EndTracked: 16 * gib, PeakTrackedIncrease: 2 * gib,
		StartHeld: 16 * gib, PeakHeld: 18 * gib, EndHeld: 16 * gib, PeakHeldIncrease: 2 * gib,
		StartUsed: 1000*mib + 46*gib, EndUsed: 1000*mib + 46*gib,
		PerProcess: true, StartProcessUsed: 500*mib + 16*gib, EndProcessUsed: 500*mib + 16*gib,
		StartOtherProcessesUsed: 500*mib + 30*gib, EndOtherProcessesUsed: 500*mib + 30*gib}

	b, _ := m.Budget(base, 0.45, 16*mib)
	fmt.Printf("per process: %d blocks, untracked growth %d MiB\n", b.Blocks, b.UntrackedIncrease/mib)
	base.PerProcess, m.PerProcess = false, false // as where NVML cannot tell
	b, _ = m.Budget(base, 0.45, 16*mib)
	fmt.Printf("device-wide: %d blocks, untracked growth %d MiB\n", b.Blocks, b.UntrackedIncrease/mib)
	// Output:
	// per process: 1152 blocks, untracked growth 0 MiB
	// device-wide: 0 blocks, untracked growth 30720 MiB
}

// An instance whose whole footprint must stay within 45% of an 80 GiB GPU:
// its baseline holds its 500 MiB context (Device.Baseline retains it),
// then it loaded 16 GiB of weights, and its pass peaked 2 GiB above them.
// Budget, as vLLM, leaves the context outside the request;
// FootprintBudget sets it aside.
func ExampleMeasurement_FootprintBudget() {
	const mib, gib = 1 << 20, 1 << 30
	base := memtrack.Usage{Total: 80 * gib, Free: 80*gib - 500*mib, Used: 500 * mib, PerProcess: true, ProcessUsed: 500 * mib}
	m := memtrack.Measurement{Total: 80 * gib, StartTracked: 16 * gib, EndTracked: 16 * gib, EndHeld: 16 * gib,
		PeakTrackedIncrease: 2 * gib, EndUsed: 16*gib + 500*mib, PerProcess: true, EndProcessUsed: 16*gib + 500*mib}

	b, _ := m.Budget(base, 0.45, 16*mib)
	fmt.Printf("Budget:          %d MiB set aside, %d MiB for the cache, the context besides\n", b.SetAside/mib, b.Available/mib)
	f, _ := m.FootprintBudget(base, 0.45, 16*mib)
	fmt.Printf("FootprintBudget: %d MiB set aside (%d MiB at the baseline), %d MiB for the cache\n", f.SetAside/mib, f.ProcessUsed/mib, f.Available/mib)
	// Output:
	// Budget:          18432 MiB set aside, 18432 MiB for the cache, the context besides
	// FootprintBudget: 18932 MiB set aside (500 MiB at the baseline), 17932 MiB for the cache
}
