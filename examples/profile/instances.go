package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memtrack/memtrack"
)

// barrier lines instances of this program up, step by step, so that they
// run together on one device as serving instances started at once do: each
// writes a file named after the step and itself into dir, and waits until
// peers instances have. A zero barrier (no -barrier) waits for nothing.
type barrier struct {
	dir, name string
	peers     int
}

// wait marks step reached by this instance and waits for the others.
func (b barrier) wait(step string) {
	if b.dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(b.dir, step+"."+b.name), nil, 0o644); err != nil {
		log.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m, err := filepath.Glob(filepath.Join(b.dir, step+".*"))
		if err != nil {
			log.Fatal(err)
		}
		if len(m) >= b.peers {
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("-barrier: %d of %d instances reached %q in 2 minutes", len(m), b.peers, step)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// processSource names the library that gives the per-process figures of
// d's kind: NVML on an NVIDIA GPU, rocm_smi on an AMD one.
func processSource(d memtrack.Device) string {
	if d.Kind() == memtrack.KindROCm {
		return "rocm_smi"
	}
	return "NVML"
}

// printProcesses writes what the driver reported of each process (NVML,
// rocm_smi), at the baseline and at the end of the pass, or why it
// reported nothing.
func printProcesses(base memtrack.Usage, p memtrack.Measurement) {
	source := processSource(p.Device)
	switch {
	case base.PerProcess && p.PerProcess:
		fmt.Printf("per process (%s), this process's PID %d:\n", source, os.Getpid())
		fmt.Printf("  baseline:                      this process %s (untracked %s), other processes %s\n",
			size(base.ProcessUsed), size(base.ProcessUntracked), size(base.OtherProcessesUsed))
		fmt.Printf("  pass start / end:              this process %s / %s, other processes %s / %s\n",
			size(p.StartProcessUsed), size(p.EndProcessUsed), size(p.StartOtherProcessesUsed), size(p.EndOtherProcessesUsed))
		fmt.Printf("  this process's untracked growth in the pass: %s (the device's: %s)\n", size(p.ProcessUntracked), size(p.Untracked))
		for _, o := range p.OtherProcesses {
			fmt.Printf("  other process %d %s: %s\n", o.PID, o.Name, size(o.Used))
		}
	case base.PerProcessErr != nil:
		fmt.Printf("per process (%s): none at the baseline: %v\n", source, base.PerProcessErr)
	case p.PerProcessErr != nil:
		fmt.Printf("per process (%s): none in the pass: %v\n", source, p.PerProcessErr)
	}
}

// deviceWide returns base and p without their per-process figures, so that
// a budget of them uses the device-wide ones, for comparison.
func deviceWide(base memtrack.Usage, p memtrack.Measurement) (memtrack.Usage, memtrack.Measurement) {
	base.PerProcess, base.PerProcessErr = false, nil
	p.PerProcess, p.PerProcessErr = false, nil
	return base, p
}

// budgetLine is one line that scripts/two-instances.sh reads: the blocks of
// vLLM's budget from the per-process figures and from the device-wide ones.
func budgetLine(name string, b, whole memtrack.Budget, err, wholeErr error) string {
	f := func(b memtrack.Budget, err error) string {
		if err != nil {
			return "refused"
		}
		return fmt.Sprint(b.Blocks)
	}
	basis := "device"
	if b.PerProcess {
		basis = "process"
	}
	return strings.Join([]string{"budget:", "instance=" + name, "basis=" + basis,
		"blocks=" + f(b, err), "device-wide-blocks=" + f(whole, wholeErr), "block-size=" + fmt.Sprint(b.BlockSize)}, " ")
}
