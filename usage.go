package memtrack

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
// are resident only once written: Used (the process's resident set) leaves
// out what is not written yet. NotResident counts those bytes, so that
// Untracked is what the device has in use that this package did not count
// whether or not the buffers were written.
//
// On a CUDA GPU the driver also accounts for each process (NVML's
// nvmlDeviceGetComputeRunningProcesses), which splits Untracked into this
// process's untracked memory (ProcessUntracked: its context, libraries,
// memory allocated without this package) and the other processes' memory
// (OtherProcessesUsed); what is left of Untracked is memory the driver
// attributes to no compute process (graphics processes, the driver's own).
// PerProcess says whether those figures are there; where they are not on a
// CUDA GPU, PerProcessErr says why (it matches [ErrPerProcessUnavailable]);
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
	// mapped from the OS that are not resident (pages never written, or
	// swapped out), which Used leaves out; 0 on other devices. It is read
	// with the figures (mincore(2) over each mapped buffer, on Linux),
	// never on the allocation path.
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
	tracked := d.MemoryAllocated()
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
	if s.stream == nil || d.kind != KindCUDA {
		return graphFigures{absent: true}
	}
	st, err := d.Graphs().Stats()
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
