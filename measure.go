package memtrack

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"

	"github.com/memtrack/memtrack/tracker"
)

// MemGetInfo returns the free and total memory of the device as the OS or
// driver reports them, not this package's counters. For CUDA they are
// cuMemGetInfo's, for the whole GPU. For the CPU, total is the machine's
// memory, or its cgroup's limit where that is lower, and free is total less
// what this process uses: its cgroup's usage where that limit applies, else
// its resident memory (on Linux; on macOS the machine's free pages).
func (d Device) MemGetInfo() (free, total int64, err error) {
	s, err := d.state()
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
	if s, err := d.state(); err == nil {
		readProcesses(s, d).setUsage(&u) // process.go
	}
	return u, nil
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
	if d.kind == 0 || d.kind >= numKinds {
		return 0
	}
	if s := tables[d.kind].p.Load(); s != nil && s.err == nil {
		return s.notResident(d.ordinal)
	}
	return 0
}

// Measurement is what [Device.Measure] measured on a device while a function ran:
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
type Measurement struct {
	Device Device

	StartTracked        int64 // tracked bytes when the run began
	PeakTracked         int64 // tracked high-water mark during the run
	EndTracked          int64 // tracked bytes when the run ended
	PeakTrackedIncrease int64 // PeakTracked - StartTracked

	// The device-side figure ([Stats].Held): with buffers freed by
	// [Buffer.FreeAsync] counted until their streams executed the frees.
	StartHeld        int64
	PeakHeld         int64
	EndHeld          int64 // with the frees still in flight when the run ended
	PeakHeldIncrease int64 // PeakHeld - StartHeld

	Total        int64 // the device's memory, as reported
	StartUsed    int64 // memory in use on the device when the run began, as reported
	EndUsed      int64 // memory in use on the device when the run ended, as reported
	UsedIncrease int64 // EndUsed - StartUsed

	// StartNotResident and EndNotResident are [Usage].NotResident when the
	// run began and ended: on the CPU, the tracked bytes not yet written,
	// which Used leaves out.
	StartNotResident, EndNotResident int64

	// Untracked is UsedIncrease + (EndNotResident - StartNotResident) -
	// (EndHeld - StartHeld): the reported growth that tracked buffers do
	// not account for, those whose stream-ordered frees were still in
	// flight at the end included (the driver still counts them, as the
	// device-side figure does), and those not yet written left out (the
	// OS does not count them). It can be negative where others released
	// memory during the run.
	Untracked int64

	// Categories holds, on a device with categories ([Device.Category]),
	// each category's figures during the run, in the order the categories
	// were made: "the activations peaked at X while the KV cache held Y"
	// is one read. Nil on a device without categories. Each category's
	// peak is taken by a scope of its own, as the device's is, so
	// measurements with categories nest and overlap too. A category made
	// during the run is not in it.
	Categories []CategoryMeasurement

	// The driver's per-process figures (NVML, on CUDA devices) at the
	// start and the end, where PerProcess: both readings had them.
	// PerProcessErr says why they are missing otherwise ([Usage]).
	PerProcess              bool
	PerProcessErr           error
	StartProcessUsed        int64 // this process's device memory when the run began, as the driver accounts it
	EndProcessUsed          int64 // and when it ended
	StartOtherProcessesUsed int64 // the other processes' device memory when the run began
	EndOtherProcessesUsed   int64 // and when it ended
	// ProcessUntracked is (EndProcessUsed - StartProcessUsed) - (EndHeld -
	// StartHeld): this process's own untracked growth during the run,
	// which other processes do not move (Untracked holds theirs too).
	ProcessUntracked int64
	OtherProcesses   []ProcessMemory // the other processes at the end, the largest first
}

// CategoryMeasurement is what [Device.Measure] measured of one category:
// its tracked bytes when the run began and ended, and its own peak during
// the run (which need not fall at the moment of the device's).
type CategoryMeasurement struct {
	Category            string
	StartTracked        int64
	PeakTracked         int64
	EndTracked          int64
	PeakTrackedIncrease int64 // PeakTracked - StartTracked
}

// Category returns the measurement of the category called name, and
// whether the device had it when the run began.
func (p Measurement) Category(name string) (CategoryMeasurement, bool) {
	for _, c := range p.Categories {
		if c.Category == name {
			return c, true
		}
	}
	return CategoryMeasurement{}, false
}

// Measure measures the memory f needs on the device, the way an inference
// server does before it sizes its cache: it reads the tracked and
// reported figures at the start, runs f inside a [PeakScope], and reads them
// again at the end. f's error is returned, wrapped, with the figures
// measured so far.
//
// The peak is the device's, not the caller's: allocations by other
// goroutines during f are in the figures, which is what sizing a cache needs
// (they compete for the same memory) and is safe under concurrency. It is
// the peak of a scope of its own, so measurements of one device may overlap
// and nest, and neither they nor [Device.ResetPeakMemoryStats] move each
// other's peaks; Measure resets nothing. (The allocation sites at the
// peak, [SiteRecorder.PeakSnapshot], are the device's: reset them with
// ResetPeakMemoryStats before f where they should cover f alone.)
//
// On the CPU, Measure runs the Go garbage collector and returns the freed
// memory to the OS before each reading of the reported figures, so that
// Untracked measures what stays rather than garbage not yet collected.
//
// Measure fails before running f, changing nothing, where the device does
// not exist or its memory cannot be queried.
func (d Device) Measure(f func() error) (Measurement, error) {
	if f == nil {
		return Measurement{Device: d}, fmt.Errorf("%w: measurement of %v: nil function", ErrInvalidArgument, d)
	}
	s, r, err := d.resolve()
	if err != nil {
		return Measurement{Device: d}, err
	}
	settle(d)
	free, total, err := d.MemGetInfo()
	if err != nil {
		return Measurement{Device: d}, err
	}
	// The scope opens before the start is read, so that its peaks are
	// never below it.
	sc, err := d.OpenPeakScope()
	if err != nil {
		return Measurement{Device: d}, err
	}
	p := Measurement{Device: d, StartTracked: r.Tracked(), Total: total, StartUsed: max(total-free, 0), StartNotResident: s.notResident(d.ordinal)}
	p.StartHeld, _ = deviceHeld(d, p.StartTracked, p.StartTracked)
	readProcesses(s, d).setStart(&p) // process.go
	// Each category gets a scope of its own too (startCategories).
	catScopes, cats := startCategories(s, d.ordinal, &p)

	ferr := runScoped(sc, catScopes, f)

	p.PeakTracked, p.EndTracked = sc.PeakTracked(), r.Tracked()
	endCategories(catScopes, cats, &p)
	p.PeakTrackedIncrease = p.PeakTracked - p.StartTracked
	settle(d)
	p.EndHeld, _ = deviceHeld(d, p.EndTracked, p.EndTracked)
	p.PeakHeld = sc.PeakHeld()
	p.PeakHeldIncrease = p.PeakHeld - p.StartHeld
	free, total, err = d.MemGetInfo()
	if err != nil {
		return p, errors.Join(wrapRun(d, ferr), err)
	}
	p.Total, p.EndUsed, p.EndNotResident = total, max(total-free, 0), s.notResident(d.ordinal)
	p.UsedIncrease = p.EndUsed - p.StartUsed
	p.Untracked = p.UsedIncrease + (p.EndNotResident - p.StartNotResident) - (p.EndHeld - p.StartHeld)
	readProcesses(s, d).setEnd(&p) // process.go
	return p, wrapRun(d, ferr)
}

// runScoped runs f and closes sc and the categories' scopes cats, also
// where f panics, so that no scope is left open to cost every later
// allocation a load per scope.
func runScoped(sc *PeakScope, cats []*tracker.Scope, f func() error) error {
	defer func() {
		sc.Close() // Measure's own scope: closed once, here
		for _, c := range cats {
			c.Close() // closed once, here; endCategories reads the peak again
		}
	}()
	return f()
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

func wrapRun(d Device, err error) error {
	if err == nil {
		return nil
	}
	return wrapf(err, "measurement of %v", d)
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
	if _, err := d.state(); err != nil { // a read: nothing registered
		return Usage{Device: d}, err
	}
	settle(d)
	return d.Usage()
}

// Budget is the memory a cache may take, computed from a [Measurement] by
// [Measurement.Budget] (vLLM's formula) or [Measurement.SharedBudget] (the
// whole device's): a fraction of the device's memory, less the memory
// set aside, in blocks of a given size.
type Budget struct {
	// Device is the device of the measurement the budget was computed
	// from; the zero Device for one built from a Measurement without a
	// device, which JSON leaves out (the zero Device is written "invalid",
	// which names no device to read back).
	Device      Device  `json:",omitzero"`
	Utilization float64 // the fraction of the device's memory given
	Requested   int64   // Utilization × Total, at most Total: what the device may be filled to (vLLM's requested_memory)

	// Weights is, for Budget, the weights (vLLM's weights_memory): the
	// tracked bytes of the category [CategoryWeights] when the measured
	// pass began, where the device has one; otherwise the tracked growth
	// from the baseline to the start of the pass. 0 for SharedBudget.
	Weights int64
	// OtherTracked is, for Budget on a device with a [CategoryWeights]
	// category, the rest of the tracked growth from the baseline to the
	// start of the pass (StartTracked - Baseline.Tracked - Weights: other
	// categories' and uncategorised buffers allocated before the pass); 0
	// otherwise.
	OtherTracked int64
	// StartUsed is, for SharedBudget, everything in use on the device when
	// the measured pass began, by anyone ([Measurement].StartUsed); 0 for
	// Budget, which leaves other processes' memory out.
	StartUsed int64
	// ProcessUsed is, for FootprintBudget, this process's device memory at
	// the baseline as the driver accounts it ([Usage].ProcessUsed of the
	// baseline: its CUDA context, which Baseline retains, and whatever it
	// held before, tracked or not); 0 for Budget, which leaves it outside
	// the request as vLLM does, and for SharedBudget, whose StartUsed
	// holds it.
	ProcessUsed int64
	// PeakIncrease is the tracked peak's rise during the pass
	// ([Measurement].PeakTrackedIncrease, vLLM's torch_peak_increase), or
	// the device-side peak's ([Measurement].PeakHeldIncrease) where
	// buffers freed in stream order raised that higher: it is what the
	// device had to fit.
	PeakIncrease int64
	// UntrackedIncrease is, for Budget, the growth of the memory in use
	// that this package did not allocate, from the baseline to the end of
	// the pass (vLLM's non_torch_increase; negative where untracked memory
	// was released); for SharedBudget, the untracked growth during the pass
	// ([Measurement].Untracked), or 0 where that is negative. Buffers whose
	// stream-ordered frees were in flight at the end are not in it: the
	// device still held them, and PeakIncrease counts them already.
	UntrackedIncrease int64
	// OtherProcessesUsed is, for SharedBudget with per-process figures,
	// the other processes' device memory as the driver accounts it: the
	// larger of its readings at the start and the end of the pass. 0
	// otherwise (StartUsed then holds the others' memory with the rest).
	OtherProcessesUsed int64
	// SetAside is Weights + OtherTracked + StartUsed + ProcessUsed +
	// OtherProcessesUsed + PeakIncrease + UntrackedIncrease: the memory
	// that is not the cache's (vLLM's non_kv_cache_memory).
	SetAside int64

	// PerProcess says that the budget used the driver's per-process
	// figures (NVML): Budget counts this process's own untracked growth,
	// not the device's, and SharedBudget sets aside the other processes'
	// memory as the driver accounts it. Where false, it used the
	// device-wide figures (cuMemGetInfo's), and PerProcessErr says why
	// (it matches [ErrPerProcessUnavailable]).
	PerProcess    bool
	PerProcessErr error

	Available int64 // Requested - SetAside, held to [0, Total]
	BlockSize int64
	Blocks    int64 // Available / BlockSize
}

// Budget sizes a cache as current vLLM does (its memory profiling before it
// allocates the KV cache), from the baseline taken when the instance was
// created and the measurement of one forward pass:
//
//	Requested         = utilization × Total                          (requested_memory)
//	Weights           = Measurement.StartTracked - Baseline.Tracked  (weights_memory;
//	                    the weights category's StartTracked where there is one,
//	                    and the rest of that growth is OtherTracked)
//	PeakIncrease      = Measurement.PeakTrackedIncrease             (torch_peak_increase;
//	                    PeakHeldIncrease where stream-ordered frees raised that higher)
//	UntrackedIncrease = (EndUsed + EndNotResident - EndHeld)
//	                  - (Baseline.Used + Baseline.NotResident - Baseline.Tracked)
//	                                                                 (non_torch_increase)
//	Available         = Requested - (Weights + OtherTracked + PeakIncrease + UntrackedIncrease)
//
// Where the baseline and the measurement both have the driver's
// per-process figures (NVML, on a CUDA GPU: [Usage].PerProcess), the
// untracked growth is this process's own, as vLLM's per-process proposal
// reads it:
//
//	UntrackedIncrease = (EndProcessUsed - EndHeld) - (Baseline.ProcessUsed - Baseline.Tracked)
//
// so that what other processes allocate meanwhile (a second instance
// loading its weights on the same GPU) is not counted against this one,
// and two instances started together each get the budget they would get
// alone. Budget.PerProcess says which figures it used, and PerProcessErr
// why not the per-process ones.
//
// The tracked bytes stand for the memory of PyTorch's allocator and the
// reported used memory for cudaMemGetInfo's. On the CPU, the tracked bytes
// not yet written (NotResident), which the OS does not count as used, are
// added back, so that the weights are set aside whether or not they were
// written. Memory that other processes held
// at the baseline is not set aside: the request is a share of the whole
// device, and as vLLM does, Budget refuses it, with an [*OutOfMemoryError]
// (matching [ErrOutOfMemory]), where the device had less than Requested free
// at the baseline. To share a device with processes whose memory must be
// left to them, use [Measurement.SharedBudget].
//
// Nor is this process's memory at the baseline set aside: on a CUDA GPU
// it holds the device's primary context, which [Device.Baseline] retains,
// so that the context stays outside the budget, as in vLLM, and the
// instance may hold utilization × Total besides it. To keep the whole footprint, the
// context included, within utilization × Total, use
// [Measurement.FootprintBudget].
//
// Each sum and difference saturates at the ends of the int64 range rather
// than wrap (a driver, or a test, may report a total near math.MaxInt64):
// Requested is at most Total, and Available is Requested - SetAside held
// to [0, Total], so that no input makes a budget larger than the device.
//
// It fails with [ErrInvalidArgument] for a utilization outside (0, 1] or a
// baseline that is missing or of another device, and with [ErrInvalidSize]
// for a blockSize <= 0 or a measurement without a device total. A budget
// with no room for one block is not an error: Blocks is 0.
func (p Measurement) Budget(base Usage, utilization float64, blockSize int64) (Budget, error) {
	return p.budget(base, utilization, blockSize, false)
}

// FootprintBudget sizes a cache as [Measurement.Budget] does, but keeps
// the instance's whole footprint within utilization × Total: it sets aside
// this process's device memory at the baseline too, as the driver accounts
// it (its CUDA context, which [Device.Baseline] retains, and whatever it
// held before the baseline, tracked or not), which Budget, as vLLM,
// leaves outside the request:
//
//	ProcessUsed = Baseline.ProcessUsed
//	Available   = Requested - (ProcessUsed + Weights + OtherTracked + PeakIncrease + UntrackedIncrease)
//
// That memory being part of the request, it refuses, with an
// [*OutOfMemoryError], where the device had less than Requested -
// ProcessUsed free at the baseline.
//
// The context's size is known only from the driver's per-process figures
// (NVML, on a CUDA GPU): the device-wide ones cannot tell it from other
// processes' memory. FootprintBudget fails with an error matching
// [ErrPerProcessUnavailable] where the baseline has none (always on the CPU
// and Metal, which have no such figures), and otherwise as Budget does.
func (p Measurement) FootprintBudget(base Usage, utilization float64, blockSize int64) (Budget, error) {
	return p.budget(base, utilization, blockSize, true)
}

// budget is Budget, and FootprintBudget where footprint is set.
func (p Measurement) budget(base Usage, utilization float64, blockSize int64, footprint bool) (Budget, error) {
	if err := p.checkBudget(utilization, blockSize); err != nil {
		return Budget{}, err
	}
	if base.Total <= 0 {
		return Budget{}, fmt.Errorf("%w: the baseline of %v has a device total of %d bytes; take one with Device.Baseline before loading the weights", ErrInvalidArgument, base.Device, base.Total)
	}
	if base.Device != p.Device || base.Total != p.Total {
		return Budget{}, fmt.Errorf("%w: the baseline of %v with %d bytes in total does not belong to the measurement of %v with %d bytes", ErrInvalidArgument, base.Device, base.Total, p.Device, p.Total)
	}
	var own int64 // this process's memory at the baseline, where the budget sets it aside
	if footprint {
		if !base.PerProcess {
			return Budget{}, footprintUnknown(base)
		}
		own = base.ProcessUsed
	}
	requested := requestedOf(utilization, p.Total)
	if base.Free < subSat(requested, own) {
		reason := fmt.Sprintf("%d bytes free at the baseline, less than utilization %v of the device's %d bytes", base.Free, utilization, p.Total)
		if footprint {
			reason += fmt.Sprintf(" less the %d bytes this process held", own)
		}
		return Budget{}, &OutOfMemoryError{Device: p.Device, Requested: requested, Tracked: base.Tracked,
			Reason: reason + "; lower the utilization or free the device"}
	}
	b := Budget{
		Device:       p.Device,
		Utilization:  utilization,
		Requested:    requested,
		ProcessUsed:  own,
		Weights:      subSat(p.StartTracked, base.Tracked),
		PeakIncrease: max(p.PeakTrackedIncrease, p.PeakHeldIncrease),
		// (EndUsed + EndNotResident - EndTracked - inFlight) - (Used + NotResident - Tracked)
		UntrackedIncrease: subSat(subSat(subSat(addSat(p.EndUsed, p.EndNotResident), p.EndTracked), p.inFlight()),
			subSat(addSat(base.Used, base.NotResident), base.Tracked)),
		BlockSize: blockSize,
	}
	if b.PerProcess, b.PerProcessErr = perProcessBasis(base, p); b.PerProcess { // process.go
		// (EndProcessUsed - EndTracked - inFlight) - (ProcessUsed - Tracked)
		b.UntrackedIncrease = subSat(subSat(subSat(p.EndProcessUsed, p.EndTracked), p.inFlight()), subSat(base.ProcessUsed, base.Tracked))
	}
	if w, ok := p.Category(CategoryWeights); ok {
		b.Weights, b.OtherTracked = w.StartTracked, subSat(b.Weights, w.StartTracked)
	}
	return b.fill(p.Total), nil
}

// SharedBudget sizes a cache for a device shared with others: the device may
// be filled to utilization × Total, and everything in use on it when the
// measurement began (this process's buffers and context, other processes)
// is set aside with the tracked peak increase and the untracked growth
// during the pass (when positive):
//
//	Available = utilization × Total - (StartUsed + PeakTrackedIncrease + max(Untracked, 0))
//
// Where the measurement has the driver's per-process figures (NVML), the
// other processes' memory is set aside as the driver accounts it, and the
// untracked growth is this process's own:
//
//	StartUsed          = Measurement.StartUsed - StartOtherProcessesUsed
//	OtherProcessesUsed = max(StartOtherProcessesUsed, EndOtherProcessesUsed)
//	UntrackedIncrease  = max(Measurement.ProcessUntracked, 0)
//
// so that memory the others allocated or freed during the pass is theirs,
// not this process's growth. Budget.PerProcess says which figures it used.
//
// This is not vLLM's formula ([Measurement.Budget] is): it leaves other
// processes the memory they held, where vLLM leaves them only what the
// utilization does not request. It saturates and fails as Budget does,
// less the baseline's checks.
func (p Measurement) SharedBudget(utilization float64, blockSize int64) (Budget, error) {
	if err := p.checkBudget(utilization, blockSize); err != nil {
		return Budget{}, err
	}
	b := Budget{
		Device:            p.Device,
		Utilization:       utilization,
		Requested:         requestedOf(utilization, p.Total),
		StartUsed:         p.StartUsed,
		PeakIncrease:      max(p.PeakTrackedIncrease, p.PeakHeldIncrease),
		UntrackedIncrease: max(p.Untracked, 0),
		BlockSize:         blockSize,
		PerProcess:        p.PerProcess,
		PerProcessErr:     p.PerProcessErr,
	}
	if p.PerProcess {
		b.StartUsed = subSat(p.StartUsed, p.StartOtherProcessesUsed)
		b.OtherProcessesUsed = max(p.StartOtherProcessesUsed, p.EndOtherProcessesUsed)
		b.UntrackedIncrease = max(p.ProcessUntracked, 0)
	}
	return b.fill(p.Total), nil
}

// footprintUnknown is the error of a FootprintBudget from a baseline
// without the driver's per-process figures.
func footprintUnknown(base Usage) error {
	why := base.PerProcessErr
	if why == nil { // a device without such figures (the CPU, Metal)
		why = fmt.Errorf("%w: %v: only a CUDA GPU has them (NVML)", ErrPerProcessUnavailable, base.Device)
	}
	return wrapf(why, "FootprintBudget needs this process's memory at the baseline, which the device-wide figures cannot tell from other processes'")
}

// inFlight returns the bytes of buffers whose stream-ordered frees were
// still in flight when the run ended: EndHeld - EndTracked (0 for a
// Measurement written without EndHeld).
func (p Measurement) inFlight() int64 { return max(subSat(p.EndHeld, p.EndTracked), 0) }

// fill sums what is set aside and counts the blocks of a budget of a
// device of total bytes.
func (b Budget) fill(total int64) Budget {
	b.SetAside = 0
	for _, n := range []int64{b.Weights, b.OtherTracked, b.StartUsed, b.ProcessUsed, b.OtherProcessesUsed, b.PeakIncrease, b.UntrackedIncrease} {
		b.SetAside = addSat(b.SetAside, n)
	}
	b.Available = min(max(subSat(b.Requested, b.SetAside), 0), total)
	b.Blocks = b.Available / b.BlockSize
	return b
}

// requestedOf is utilization × total, in (0, 1] × total, as an int64 of at
// most total: the product is a float64, which rounds, and a total near
// math.MaxInt64 rounds to 2^63, past the int64 range.
func requestedOf(utilization float64, total int64) int64 {
	r := utilization * float64(total)
	if r >= float64(total) {
		return total
	}
	return int64(r) // r < float64(total) <= 2^63: in range, and at most total
}

// The budget's arithmetic saturates: its figures come from the driver and
// from the caller, and a sum or difference past the int64 range is held
// at that end rather than wrapped round to the other, so that no input
// makes a budget larger than its device.

// addSat returns a + b, or the end of the int64 range it passes.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// subSat returns a - b, or the end of the int64 range it passes.
func subSat(a, b int64) int64 {
	s := a - b
	switch {
	case b < 0 && s < a:
		return math.MaxInt64
	case b > 0 && s > a:
		return math.MinInt64
	}
	return s
}

func (p Measurement) checkBudget(utilization float64, blockSize int64) error {
	if math.IsNaN(utilization) || utilization <= 0 || utilization > 1 {
		return fmt.Errorf("%w: %v: want a fraction of the device's memory in (0, 1]", ErrInvalidArgument, utilization)
	}
	if blockSize <= 0 {
		return fmt.Errorf("%w: block size %d: want a positive number of bytes", ErrInvalidSize, blockSize)
	}
	if p.Total <= 0 {
		return fmt.Errorf("%w: the measurement of %v has a device total of %d bytes; budget a Measurement returned by Device.Measure", ErrInvalidSize, p.Device, p.Total)
	}
	return nil
}
