package memtrack

import (
	"fmt"
	"math"
)

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
	// device still held them, and PeakIncrease counts them already; nor is
	// the graph memory reserved in the pass, which GraphReserved counts.
	UntrackedIncrease int64
	// GraphReserved is the memory the device reserves for the instance's
	// CUDA graphs ([Graphs]): what the graphs launched in the measured
	// pass reserved (the growth of [Usage].GraphReserved since the
	// baseline, for SharedBudget since the start of the pass), which the
	// graphs captured after the pass reuse for what they will reserve at
	// their launch ([Measurement].GraphNeed), but for the part that
	// allocations left live by a launch may hold
	// ([Measurement].EndGraphOutliving, at most the first):
	//
	//	GraphReserved = max(launched, min(EndGraphOutliving, launched) + GraphNeed)
	//
	// The first is no longer in UntrackedIncrease, so that graph memory is
	// set aside once.
	GraphReserved int64
	// OtherProcessesUsed is, for SharedBudget with per-process figures,
	// the other processes' device memory as the driver accounts it: the
	// larger of its readings at the start and the end of the pass. 0
	// otherwise (StartUsed then holds the others' memory with the rest).
	OtherProcessesUsed int64
	// OverShare is, in a [Target] of a [Follower], the memory that is in
	// use on the device outside the budget now beyond the Total -
	// Requested that the utilization leaves outside it (other processes'
	// memory, and this process's memory at the baseline where Budget
	// leaves it outside the request), which the cache cannot have while
	// it is in use; 0 for a budget computed once.
	OverShare int64
	// Claimed is, in a [Target] of a [Follower] that counts claims
	// ([Follower.CountClaims]), what other processes' live claims on the
	// device count for at the reading: memory about to be in use, counted
	// in use outside the budget (so in OverShare where it passes the
	// share left outside); 0 otherwise. It is not summed in SetAside
	// apart: OverShare holds what of it the budget sets aside.
	Claimed int64
	// SetAside is Weights + OtherTracked + StartUsed + ProcessUsed +
	// OtherProcessesUsed + PeakIncrease + UntrackedIncrease +
	// GraphReserved + OverShare: the memory that is not the cache's
	// (vLLM's non_kv_cache_memory).
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
//	launched          = EndGraphReserved - Baseline.GraphReserved
//	GraphReserved     = max(launched, min(EndGraphOutliving, launched) + GraphNeed)
//	UntrackedIncrease = (EndUsed + EndNotResident - EndHeld)
//	                  - (Baseline.Used + Baseline.NotResident - Baseline.Tracked)
//	                  - (EndGraphReserved - Baseline.GraphReserved)  (non_torch_increase)
//	Available         = Requested - (Weights + OtherTracked + PeakIncrease + UntrackedIncrease + GraphReserved)
//
// On a CUDA GPU the memory the driver reserves for CUDA graphs is set
// aside once, apart (GraphReserved): what the graphs launched in the pass
// reserved, which leaves the untracked growth, or, for graphs captured
// after the pass, as vLLM captures them, what their captures say they
// will reserve ([Measurement.WithGraphs]), whichever is larger; but the
// driver reuses none of the memory that a graph allocation left live by a
// launch holds, so the part of the pass's graph memory that such
// allocations may hold (EndGraphOutliving) is set apart from what the
// later graphs reuse. vLLM estimates that memory; memtrack counts it.
//
// Where the baseline and the measurement both have the driver's
// per-process figures (NVML, on a CUDA GPU: [Usage].PerProcess), the
// untracked growth is this process's own, as vLLM's per-process proposal
// reads it:
//
//	UntrackedIncrease = (EndProcessUsed - EndHeld) - (Baseline.ProcessUsed - Baseline.Tracked)
//	                  - (EndGraphReserved - Baseline.GraphReserved)
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
	return p.budget(base, utilization, blockSize, false, false)
}

// FootprintBudget sizes a cache as [Measurement.Budget] does, but keeps
// the instance's whole footprint within utilization × Total: it sets aside
// this process's device memory at the baseline too, as the driver accounts
// it (its CUDA context, which [Device.Baseline] retains, and whatever it
// held before the baseline, tracked or not), which Budget, as vLLM,
// leaves outside the request:
//
//	ProcessUsed = Baseline.ProcessUsed
//	Available   = Requested - (ProcessUsed + Weights + OtherTracked + PeakIncrease + UntrackedIncrease + GraphReserved)
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
	return p.budget(base, utilization, blockSize, true, false)
}

// budget is Budget, and FootprintBudget where footprint is set. Where
// follow is set, for a [Follower], it does not refuse a baseline with
// less than the request free: the follower sets aside what is in use
// outside the budget as it is at each reading (OverShare).
func (p Measurement) budget(base Usage, utilization float64, blockSize int64, footprint, follow bool) (Budget, error) {
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
	if !follow && base.Free < subSat(requested, own) {
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
	if b.PerProcess, b.PerProcessErr = perProcessBasis(base, p); b.PerProcess {
		// (EndProcessUsed - EndTracked - inFlight) - (ProcessUsed - Tracked)
		b.UntrackedIncrease = subSat(subSat(subSat(p.EndProcessUsed, p.EndTracked), p.inFlight()), subSat(base.ProcessUsed, base.Tracked))
	}
	if w, ok := p.Category(CategoryWeights); ok {
		b.Weights, b.OtherTracked = w.StartTracked, subSat(b.Weights, w.StartTracked)
	}
	var launched int64 // the graph memory reserved since the baseline
	if base.GraphErr == nil {
		launched = max(subSat(p.EndGraphReserved, base.GraphReserved), 0)
	}
	b.setGraphs(launched, p.EndGraphOutliving, p.GraphNeed)
	return b.fill(p.Total), nil
}

// WithGraphs returns p with what captures will reserve when their graphs
// are launched added to GraphNeed, for a budget of graphs captured after
// the measured pass (as vLLM captures them, once the cache is allocated).
// Each call is the graphs of one stream: graphs launched one after another
// on one stream share one reservation (CUDA Programming Guide, Graph
// Memory Nodes: "Since the graphs in the same stream never run
// concurrently, CUDA can and should use the same physical memory"), the
// largest Need, not their sum; graphs launched on streams that run at
// once need memory of their own, so a call per stream adds them up. An
// allocation a graph does not free (Outliving) keeps its memory apart
// from the stream's, until freed:
//
//	need = max(Need - Outliving) + sum(Outliving)   over captures
//
// which is the largest Need where no graph's allocation outlives its
// launch, and covers every outliving allocation live at once otherwise.
// Need and Outliving are in whole chunks of the device's graph memory
// ([Graphs.Chunk]), as the driver reserves it, so that GraphNeed is what
// the driver reserves (an NVIDIA H200 reserved 128 MiB for graphs of 28,
// 56 and 112 MiB launched on one stream: their largest Need). [Measurement.Budget] reuses for GraphNeed what the pass's own
// launches reserved, never setting both aside, but for the part that
// allocations left live by a launch may hold ([Measurement].EndGraphOutliving).
//
// It fails with [ErrInvalidArgument], returning p unchanged, for a capture
// that the driver invalidated (Invalidated: read while its capture was
// invalidated, or known so by its ID), of another device, with no ID, or
// whose figures are not a capture's (a negative Need, or Outliving above
// it). A capture invalidated without memtrack learning its ID reads
// Invalidated false once it ended (see [Capture]): pass only captures whose
// cuStreamEndCapture returned a graph, read just before that call.
func (p Measurement) WithGraphs(captures ...Capture) (Measurement, error) {
	var peak, outliving int64
	for i, c := range captures {
		if c.Invalidated {
			return p, fmt.Errorf("%w: capture %d (ID %d, stream %#x of %v) was invalidated by the driver: it ends with no graph, and nothing of it will launch",
				ErrInvalidArgument, i, c.ID, uintptr(c.Stream), c.Device)
		}
		if c.Device != p.Device || c.ID == 0 || c.Outliving < 0 || c.Outliving > c.Need {
			return p, fmt.Errorf("%w: capture %d (ID %d of %v, need %d bytes, %d outliving) for the measurement of %v: want a capture of the device, from Graphs().Capture",
				ErrInvalidArgument, i, c.ID, c.Device, c.Need, c.Outliving, p.Device)
		}
		peak = max(peak, c.Need-c.Outliving)
		outliving = addSat(outliving, c.Outliving)
	}
	p.GraphNeed = addSat(p.GraphNeed, addSat(peak, outliving))
	return p, nil
}

// setGraphs sets aside, as GraphReserved, launched, the graph memory
// reserved during the pass, which is moved out of the untracked growth,
// or, where larger, need, what graphs captured after it will reserve, on
// top of the part of launched that allocations left live by a launch may
// hold (outliving, at most launched), which the driver reuses for no
// other graph while they stay unfreed. Where the pass's graph memory held
// pinned memory from before it (reserved before the baseline or the
// start), that memory is outside launched, and so is its part of
// outliving: min(outliving, launched) bounds what is pinned of launched.
func (b *Budget) setGraphs(launched, outliving, need int64) {
	b.UntrackedIncrease = subSat(b.UntrackedIncrease, launched)
	b.GraphReserved = max(launched, addSat(min(max(outliving, 0), launched), need))
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
// The memory reserved for CUDA graphs is set aside as Budget sets it
// aside, from the start of the pass (graph memory reserved before it is in
// StartUsed):
//
//	launched          = EndGraphReserved - StartGraphReserved
//	GraphReserved     = max(launched, min(EndGraphOutliving, launched) + GraphNeed)
//	UntrackedIncrease = max(Untracked - launched, 0)
//
// (ProcessUntracked in place of Untracked with the per-process figures).
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
		UntrackedIncrease: p.Untracked,
		BlockSize:         blockSize,
		PerProcess:        p.PerProcess,
		PerProcessErr:     p.PerProcessErr,
	}
	if p.PerProcess {
		b.StartUsed = subSat(p.StartUsed, p.StartOtherProcessesUsed)
		b.OtherProcessesUsed = max(p.StartOtherProcessesUsed, p.EndOtherProcessesUsed)
		b.UntrackedIncrease = p.ProcessUntracked
	}
	b.setGraphs(max(subSat(p.EndGraphReserved, p.StartGraphReserved), 0), p.EndGraphOutliving, p.GraphNeed)
	b.UntrackedIncrease = max(b.UntrackedIncrease, 0)
	return b.fill(p.Total), nil
}

// footprintUnknown is the error of a FootprintBudget from a baseline
// without the driver's per-process figures.
func footprintUnknown(base Usage) error {
	why := base.PerProcessErr
	if why == nil { // a device without such figures (the CPU, Metal)
		why = fmt.Errorf("%w: %v: only a CUDA GPU (NVML) or a ROCm GPU (rocm_smi) has them", ErrPerProcessUnavailable, base.Device)
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
	for _, n := range []int64{b.Weights, b.OtherTracked, b.StartUsed, b.ProcessUsed, b.OtherProcessesUsed, b.PeakIncrease, b.UntrackedIncrease, b.GraphReserved, b.OverShare} {
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

// perProcessBasis says whether a [Measurement.Budget] of p from base may use
// the per-process figures, and if not, why, where the readings said (a
// Usage or Measurement written by hand says nothing).
func perProcessBasis(base Usage, p Measurement) (bool, error) {
	switch {
	case !base.PerProcess && base.PerProcessErr != nil:
		return false, wrapf(base.PerProcessErr, "the baseline has none")
	case !p.PerProcess && p.PerProcessErr != nil:
		return false, wrapf(p.PerProcessErr, "the measurement has none")
	}
	return base.PerProcess && p.PerProcess, nil
}
