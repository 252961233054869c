package memtrack

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/memtrack/memtrack/internal/bytesize"
)

// MemGetInfo returns the free and total memory of the device as the OS or
// driver reports them, not this package's counters. For CUDA they are
// cuMemGetInfo's, for the whole GPU. For the CPU, total is the machine's
// memory, or its cgroup's limit where that is lower, and free is total less
// what this process uses: its cgroup's usage where that limit applies, else
// its resident memory (on Linux; on macOS the machine's free pages).
func (d Device) MemGetInfo() (free, total int64, err error) {
	s, _, err := d.lookup(start)
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
// process (the Go heap, stacks, code), and of its cgroup where a cgroup
// limit applies.
//
// On the CPU, buffers from 1 MiB are mapped from the OS, and their pages
// are resident only once written, as are the pages of a reservation's
// mappings ([Reservation.Map]): Used (the process's resident set) leaves
// out what is not written yet. NotResident counts those bytes, so that
// Untracked is what the device has in use that this package did not count
// whether or not the buffers and the mappings were written.
//
// On a CUDA GPU the driver also accounts for each process (NVML's
// nvmlDeviceGetComputeRunningProcesses; on an AMD GPU, the kernel's compute
// accounting, which rocm_smi gives), which splits Untracked into this
// process's untracked memory (ProcessUntracked: its context, libraries,
// memory allocated without this package) and the other processes' memory
// (OtherProcessesUsed); what is left of Untracked is memory the driver
// attributes to no compute process (graphics processes, the driver's own).
// PerProcess says whether those figures are there; where they are not on a
// CUDA or AMD GPU, PerProcessErr says why (it matches [ErrPerProcessUnavailable]);
// it is nil on devices that have no such figures (the CPU, Metal).
//
// On a CUDA GPU the driver's graph memory figures ([GraphStats]) name the
// part of Untracked that the driver reserves for CUDA graphs
// (GraphReserved), which a buffer of [Device.AllocAsync] on a capturing
// stream, being the graph's, never adds to Tracked.
type Usage struct {
	Device  Device
	Tracked int64 // bytes held by live buffers, as counted ([Device.MemoryAllocated])
	Total   int64 // the device's memory, as reported
	Free    int64 // free memory, as reported
	Used    int64 // Total - Free: memory in use on the device, by anyone
	// NotResident is, on the CPU, the bytes of this package's buffers
	// mapped from the OS and of its reservations' mappings that are not
	// resident (pages never written, or swapped out), which Used leaves
	// out; 0 on other devices. It is read with the figures (mincore(2)
	// over each mapped buffer and mapping, on Linux), never on the
	// allocation path.
	NotResident int64
	Untracked   int64 // Used + NotResident - Tracked, or 0 where that is negative: memory in use that this package did not allocate

	// The driver's graph memory figures, on a CUDA GPU whose driver has
	// graph memory nodes ([Graphs.Stats]), read with the others, never on
	// the allocation path: GraphReserved is part of Untracked (and of
	// ProcessUntracked). Where they are missing on a CUDA GPU, GraphErr
	// says why (it matches [ErrNotSupported] for a driver before CUDA 11.4);
	// it is nil on devices that have no CUDA graphs (the CPU, Metal).
	GraphReserved     int64
	PeakGraphReserved int64
	GraphUsed         int64
	PeakGraphUsed     int64
	GraphErr          error

	PerProcess         bool
	PerProcessErr      error
	ProcessUsed        int64           // this process's device memory, as the driver accounts it (its context included)
	ProcessUntracked   int64           // ProcessUsed - Tracked, or 0 where that is negative
	OtherProcessesUsed int64           // the other processes' device memory, as the driver accounts it
	OtherProcesses     []ProcessMemory // them, the largest first
}

// Usage returns the tracked figure and the reported figures of the device
// side by side; see [Usage] for how to read their difference.
func (d Device) Usage() (Usage, error) {
	var tracked int64
	if r := d.peek(); r != nil {
		tracked = r.Tracked()
	}
	free, total, err := d.MemGetInfo()
	if err != nil {
		return Usage{Device: d, Tracked: tracked}, err
	}
	used := max(total-free, 0)
	nr := d.notResident()
	u := Usage{Device: d, Tracked: tracked, Total: total, Free: free, Used: used, NotResident: nr, Untracked: untracked(used, nr, tracked)}
	if s, _, err := d.lookup(start); err == nil {
		readProcesses(s, d).setUsage(&u)
		readGraphs(s, d).setUsage(&u)
	}
	return u, nil
}

// graphFigures is what the driver reported of a device's graph memory at
// one moment: absent on a device without CUDA graphs, else its figures or
// why they are missing.
type graphFigures struct {
	absent bool
	err    error
	stats  GraphStats
}

// readGraphs reads the driver's graph memory figures of device d. It never
// runs on the allocation path: Usage, Measure and the out-of-memory report
// read it.
func readGraphs(s *deviceTable, d Device) graphFigures {
	if s.stream == nil {
		return graphFigures{absent: true}
	}
	sb, err := s.graphMemory(d)
	if err != nil {
		return graphFigures{err: err}
	}
	st, err := sb.graphStats(d.ordinal)
	err = fillError(err, d, 0, nil)
	st.Device = d
	return graphFigures{err: err, stats: st}
}

// setUsage puts the figures into u.
func (f graphFigures) setUsage(u *Usage) {
	if f.absent {
		return
	}
	u.GraphErr = f.err
	if f.err == nil {
		u.GraphReserved, u.PeakGraphReserved = f.stats.GraphReserved, f.stats.PeakGraphReserved
		u.GraphUsed, u.PeakGraphUsed = f.stats.GraphUsed, f.stats.PeakGraphUsed
	}
}

// reserved returns the graph memory reserved, or 0 where it is not known.
func (f graphFigures) reserved() int64 {
	if f.absent || f.err != nil {
		return 0
	}
	return f.stats.GraphReserved
}

// untracked is the memory in use that this package did not count: used,
// as reported, with the tracked bytes that are not resident (and so not in
// it) added, less the tracked bytes; never negative.
func untracked(used, notResident, tracked int64) int64 {
	return max(used+notResident-tracked, 0)
}

// notResident returns the bytes of the device's buffers that its reported
// use leaves out (see [Usage].NotResident), or 0 where the device has not
// been used.
func (d Device) notResident() int64 {
	if s, _, _ := d.lookup(read); s != nil {
		return s.notResident(d.ordinal)
	}
	return 0
}

// Baseline takes the device's [Usage] as vLLM does when an inference
// instance starts: call it before the weights are loaded and before the
// libraries take device memory, and give it to [Measurement.Budget].
// [Measurement.Budget] counts against the instance whatever was allocated
// outside this package after it (library handles and workspaces, a context
// other than the device's primary one) and leaves out what was in use
// before it (other processes), as vLLM does.
//
// On a CUDA GPU, reading the driver's figures needs the device's primary
// context, which Baseline retains (creating it, where nothing did before):
// this process's context is always inside the baseline, as it is inside
// vLLM's (its MemorySnapshot reads torch.cuda.mem_get_info, which needs
// the context too). Budget therefore never sets the context aside: the
// instance may hold
// utilization × Total besides it. [Measurement.FootprintBudget] keeps the
// whole footprint, the context included, within utilization × Total.
//
// On the CPU it first runs the Go garbage collector and returns freed
// memory to the OS, as [Device.Measure] does; that is all that
// distinguishes it from [Device.Usage].
func (d Device) Baseline() (Usage, error) {
	if _, _, err := d.lookup(start); err != nil { // a read: nothing registered
		return Usage{Device: d}, err
	}
	settle(d)
	return d.Usage()
}

// settle makes the reported figures of the CPU measure what stays: it runs
// the Go garbage collector and returns the freed memory to the OS
// ([debug.FreeOSMemory] does both), as vLLM runs gc.collect() and
// torch.cuda.empty_cache() before it reads the device. Without it, Go-heap
// memory that is garbage (CPU buffers under 1 MiB once freed, anything f
// dropped) counts as in use until a collection and the scavenger get to it,
// and the untracked growth swings by hundreds of MiB from run to run. Other
// devices' memory is not in the Go heap: nothing to do.
func settle(d Device) {
	if d.kind == KindCPU {
		debug.FreeOSMemory()
	}
}

// ErrPerProcessUnavailable is matched by the PerProcessErr of a [Usage], a
// [Measurement], a [Budget] or an [*OutOfMemoryError] where the driver's
// per-process figures are missing, and says why: the device is not a CUDA
// or AMD GPU, NVML or rocm_smi is unavailable (no library, no permission),
// it does not list this process (a container whose PID namespace hides
// it), or gives no figure for it. The device-wide figures are then all there is.
var ErrPerProcessUnavailable = errors.New("memtrack: no per-process figures")

// processBackend is a backend that can say which processes hold memory on
// a device, as the driver accounts it (CUDA, through NVML; ROCm, through
// rocm_smi).
type processBackend interface {
	// processes returns the processes that hold a context on device
	// ordinal, which the device table has checked already, with the
	// memory the driver attributes to each; or why it cannot.
	processes(ordinal int) ([]ProcessMemory, error)
}

// processFigures is what the driver reported of one device's processes at
// one moment, as the fields of [Usage] name it.
type processFigures struct {
	absent             bool  // the device has no such figures (the CPU, Metal): nothing is missing
	err                error // nil where the figures below are the driver's
	processUsed        int64
	otherProcessesUsed int64
	otherProcesses     []ProcessMemory
}

// readProcesses reads the driver's per-process figures of device d. It
// never runs on the allocation path: Usage, Baseline, Measure and the
// out-of-memory report read it.
func readProcesses(s *deviceTable, d Device) processFigures {
	b, ok := s.b.(processBackend)
	if !ok {
		return processFigures{absent: true}
	}
	list, err := b.processes(d.ordinal)
	if err != nil {
		// A driver error of the backend's comes without its device.
		return processFigures{err: &perProcessError{dev: d, err: fillError(err, d, 0, nil)}}
	}
	return splitProcesses(d, list, os.Getpid())
}

// perProcessError is the PerProcessErr of a reading of device dev whose
// per-process figures the backend could not give, err saying why: it
// matches [ErrPerProcessUnavailable] and err, and is written with one
// prefix and the device named once.
type perProcessError struct {
	dev Device
	err error
}

func (e *perProcessError) Error() string {
	why := strings.TrimPrefix(reason(e.err), e.dev.String()+": ") // a BackendError names its device
	return fmt.Sprintf("%v: %v: %s", ErrPerProcessUnavailable, e.dev, why)
}

func (e *perProcessError) Unwrap() []error { return []error{ErrPerProcessUnavailable, e.err} }

// splitProcesses finds process self in what NVML listed of d, and sums the
// others, largest first.
func splitProcesses(d Device, list []ProcessMemory, self int) processFigures {
	var f processFigures
	found := false
	for _, p := range list {
		if p.PID == self {
			f.processUsed += p.Used
			found = true
			continue
		}
		f.otherProcessesUsed += p.Used
		f.otherProcesses = append(f.otherProcesses, p)
	}
	if !found {
		source, _ := d.kind.processSource()
		return processFigures{err: fmt.Errorf("%w: %v: %s lists %d process(es) on the device, but not this one (PID %d): its PIDs are the host's, which a container with a PID namespace of its own does not see",
			ErrPerProcessUnavailable, d, source, len(list), self)}
	}
	slices.SortStableFunc(f.otherProcesses, func(a, b ProcessMemory) int { return cmp.Compare(b.Used, a.Used) })
	return f
}

// ok reports whether the figures are the driver's.
func (f processFigures) ok() bool { return !f.absent && f.err == nil }

// setUsage puts the figures into u, whose Tracked is read.
func (f processFigures) setUsage(u *Usage) {
	u.PerProcess, u.PerProcessErr = f.ok(), f.err
	if !f.ok() {
		return
	}
	u.ProcessUsed, u.ProcessUntracked = f.processUsed, processUntracked(f.processUsed, u.Tracked)
	u.OtherProcessesUsed, u.OtherProcesses = f.otherProcessesUsed, f.otherProcesses
}

// processUntracked computes [Usage].ProcessUntracked, which the report of
// an [*OutOfMemoryError] writes too: this process's memory as the driver
// accounts it less the tracked bytes, or 0
// where the driver charges tracked memory to another process (a buffer
// imported over CUDA IPC and counted with Track) and that is negative.
func processUntracked(processUsed, tracked int64) int64 { return max(processUsed-tracked, 0) }

// processSummary writes MemorySummary's lines of the driver's per-process
// figures: this process's, each other process's, or why there are none on
// a device that should have them; nothing on a device without them.
func (u Usage) processSummary() string {
	source, _ := u.Device.kind.processSource()
	if !u.PerProcess {
		if u.PerProcessErr == nil {
			return ""
		}
		return fmt.Sprintf("processes (%s): unavailable: %v\n", source, u.PerProcessErr)
	}
	s := fmt.Sprintf("processes (%s): this process %s (untracked %s); other processes %s in %d\n",
		source, bytesize.Format(u.ProcessUsed), bytesize.Format(u.ProcessUntracked), bytesize.Format(u.OtherProcessesUsed), len(u.OtherProcesses))
	for _, p := range u.OtherProcesses {
		name := p.Name
		if name == "" {
			name = "(name unknown)"
		}
		s += fmt.Sprintf("  process %d %s: %s\n", p.PID, name, bytesize.Format(p.Used))
	}
	return s
}
