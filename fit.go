package memtrack

import (
	"fmt"
	"strings"

	"github.com/memtrack/memtrack/internal/claims"
	"github.com/memtrack/memtrack/internal/fit"
)

// Fit before load: a program describes the load it is about to make on a
// device ([Plan]), memtrack predicts what the load will add to the
// process's memory as the device's driver counts it, from the driver's
// own rules learned on the device ([Plan.Predict]), says whether it fits
// beside what other processes hold and claim, and, after the load, reads
// the same figure again and sets it beside the prediction
// ([Prediction.Check]). See docs/fit.md.

// Via is how a part of a [Plan] is allocated, which decides how the driver
// counts it.
type Via uint8

const (
	// ViaAlloc is [Device.Alloc] or [Category.Alloc]: on a CUDA GPU
	// cuMemAlloc, which takes the size rounded up to the device's
	// allocation granularity; on the CPU a buffer mapped from the OS in
	// whole pages, or, under 1 MiB, Go heap memory, taken as asked.
	ViaAlloc Via = iota
	// ViaAllocAsync is [Device.AllocAsync] or [Category.AllocAsync], from
	// the device's memory pool, which reserves device memory in whole
	// chunks (CUDA).
	ViaAllocAsync
	// ViaMap is [Reservation.Map]: whole granules of the device's
	// granularity ([Device.MapGranularity]).
	ViaMap
	numVias
)

var viaNames = [numVias]string{ViaAlloc: "Alloc", ViaAllocAsync: "AllocAsync", ViaMap: "Map"}

// String returns "Alloc", "AllocAsync" or "Map".
func (v Via) String() string {
	if v < numVias {
		return viaNames[v]
	}
	return fmt.Sprintf("Via(%d)", uint8(v))
}

// fit is v in the arithmetic, which numbers its Vias as this package does.
func (v Via) fit() fit.Via { return fit.Via(v) }

// PlanPart is one part of a [Plan]: Count buffers, or mapped blocks, of
// Size bytes each, allocated Via, in the category named Category ("" for
// none; the KV cache is [CategoryKVCache]).
type PlanPart struct {
	Category string
	Via      Via
	Size     int64 // bytes of one buffer or block, at least 1
	Count    int64 // how many, at least 1
}

// Plan describes a load that a program is about to make on one device:
// the buffers it keeps (Parts), the transient memory it takes at its peak
// besides (Transient: a forward pass's activations, allocated and freed
// while it runs), and the memory its CUDA graphs will reserve (GraphNeed).
// The transient memory and the graphs can come from a [Measurement] of an earlier run,
// saved in a file on another machine too ([Plan.WithMeasurement],
// [ReadMeasurement]).
type Plan struct {
	Device Device
	Parts  []PlanPart
	// Transient is the memory the load takes at its peak beside its
	// parts, allocated and freed while it runs (a forward pass's
	// activations), allocated TransientVia; 0 for none.
	Transient    int64
	TransientVia Via
	// GraphNeed is what the CUDA graphs the load launches will reserve at
	// their launch, from their captures ([Measurement.WithGraphs]: the
	// largest Need of the graphs of one stream, summed over streams); 0
	// for none.
	GraphNeed int64
	// Headroom is the memory to leave free beside the load, for what
	// others that announce nothing may take: the load fits where the
	// device's free memory, less the headroom and the other processes' claims,
	// covers what the load takes at its most. A process that makes no
	// claim is seen only by the memory it holds when the prediction is
	// read; the headroom is all that is kept for what it takes after.
	Headroom int64
	// BlockSize is the bytes of one KV-cache block, for
	// [Prediction].Blocks; 0 for none.
	BlockSize int64
	// Claims, where set, is the board whose claims of other processes on
	// the device the prediction counts as memory in use ([OpenClaims]),
	// and where [Prediction.Claim] posts this process's.
	Claims *Claims
}

// WithMeasurement returns p with the transient memory and the graphs of m, a
// measurement of an earlier pass of the load, here or on another machine
// ([ReadMeasurement]): Transient is what the pass's tracked peak rose, or its
// device-side peak where frees in stream order raised that higher
// ([Measurement].PeakTrackedIncrease, PeakHeldIncrease), and GraphNeed is
// m's ([Measurement.WithGraphs]). It fails with [ErrInvalidArgument],
// returning p unchanged, for a measurement of another kind of device or
// one that no measurement is (no device total, figures below 0).
func (p Plan) WithMeasurement(m Measurement) (Plan, error) {
	if m.Device.kind != p.Device.kind || m.Total <= 0 {
		return p, fmt.Errorf("%w: a measurement of %v with %d bytes in total for a plan of %v: want a measurement of a device of the same kind, from Device.Measure or ReadMeasurement",
			ErrInvalidArgument, m.Device, m.Total, p.Device)
	}
	if m.PeakTrackedIncrease < 0 || m.PeakHeldIncrease < 0 || m.GraphNeed < 0 {
		return p, fmt.Errorf("%w: a measurement of %v whose peaks rose %d and %d bytes, with a graph need of %d bytes: want 0 or more",
			ErrInvalidArgument, m.Device, m.PeakTrackedIncrease, m.PeakHeldIncrease, m.GraphNeed)
	}
	p.Transient, p.GraphNeed = max(m.PeakTrackedIncrease, m.PeakHeldIncrease), m.GraphNeed
	return p, nil
}

// Where a prediction's figure comes from ([Prediction].Source): the
// driver's figure of this process where it has one, else the device's
// used memory.
const (
	SourceNVML      = "nvml"          // NVML's figure of this process (a CUDA GPU)
	SourceROCmSMI   = "rocm_smi"      // rocm_smi's figure of this process (an AMD GPU)
	SourceCUDAUsed  = "cuMemGetInfo"  // the CUDA GPU's used memory, every process's
	SourceHIPUsed   = "hipMemGetInfo" // the AMD GPU's used memory, every process's
	SourceOS        = "os"            // the CPU: this process's resident set, or its cgroup's usage where a cgroup limit applies
	SourceUnchecked = "none"          // Metal: its figure is the device's, and no check is made
)

// Prediction is what [Plan.Predict] predicts of a load on its device:
// what the load will add to this process's memory there as the driver
// counts it (Predicted), what it takes at its most (Need), whether that
// fits beside what other processes hold and claim now, with the plan's
// headroom, and how many KV-cache blocks would fit beside the rest of it.
type Prediction struct {
	Plan Plan

	// The driver's rules on the device, learned from it.
	//
	// AllocUnit is what a ViaAlloc buffer is rounded up to: on a CUDA GPU
	// the allocation granularity (cuMemGetAllocationGranularity, 2 MiB on
	// an H200), on the CPU the page (buffers under 1 MiB come from the Go
	// heap, as asked); 1 where the driver states no rounding (ROCm,
	// Metal). Granularity is [Device.MapGranularity], where the plan maps
	// blocks; PoolChunk is the chunk in which the device's memory pools
	// reserve, where the plan allocates from the pool, which memtrack
	// learns by a probe of a pool of its own, once per device (32 MiB on
	// an H200).
	AllocUnit, Granularity, PoolChunk int64

	// Parts is each part of the plan, as the driver counts it.
	Parts []PartPrediction
	// PoolReservedIncrease is what the memory pool's reservation will
	// grow by: the pool's used figure after the load rounded up to whole
	// chunks, less what the pool reserves now. GraphReservedIncrease is
	// what the graphs' reservation will grow by: the budget's arithmetic
	// of graph memory ([Budget].GraphReserved) from what the device
	// reserves for graphs now.
	PoolReservedIncrease, GraphReservedIncrease int64
	// Predicted is what the load will add to Before once it is done: its
	// parts, rounded, with the two increases. Transient is what its
	// transient memory adds at its peak beside (Plan.Transient, rounded,
	// or the pool's further chunks). Need is Predicted + Transient.
	Predicted, Transient, Need int64

	// Source names the figure ([SourceNVML], [SourceCUDAUsed], [SourceOS],
	// ...), and Before is its value when the prediction was read: this
	// process's memory on the device as the driver accounts it, where
	// PerProcess, else the device's used memory. PerProcessErr says why
	// there is no per-process figure, where the device should have one.
	Source        string
	PerProcess    bool
	PerProcessErr error
	Before        int64

	// Total and Free are the device's, as the driver reports them;
	// OtherProcessesUsed the other processes' memory, where PerProcess.
	Total, Free, OtherProcessesUsed int64
	// Claimed is what other processes' live claims on the device count
	// for ([Plan].Claims): their bytes, less what each claimant has taken
	// since it claimed, where the per-process figures show it.
	Claimed int64
	// Room is Free - Headroom - Claimed - Need, and Fits says that it is 0
	// or more: the load fits beside what the others hold and claim.
	Room int64
	Fits bool
	// Blocks is how many KV-cache blocks of Plan.BlockSize, each as the
	// driver counts it, fit beside the rest of the load (its parts outside
	// [CategoryKVCache]): more blocks than the plan's cache where it fits
	// with room to spare, fewer where it does not fit. 0 without a block
	// size.
	Blocks int64

	start fitStart // what Check sets the check beside
}

// PartPrediction is one part of a plan as the driver counts it.
type PartPrediction struct {
	PlanPart
	// Rounded is one buffer or block as the driver counts it (a buffer
	// of the pool: its size, the pool reserving in chunks apart).
	Rounded int64
	// Predicted is Rounded × Count.
	Predicted int64
}

// fitStart is what a prediction read, for its check: each planned
// category's Tracked, and the driver's figures beside the one predicted.
type fitStart struct {
	tracked       map[string]int64
	poolReserved  int64
	poolRead      bool
	graphReserved int64
	graphRead     bool
	notResident   int64
	runtime       int64 // the CPU: the Go runtime's memory from the OS (runtimeMemory)
	files         int64 // the CPU: the process's resident pages of files (hostmem.ResidentFiles); -1 where unknown
}

// Predict predicts what the load of the plan will add to this process's
// memory on the plan's device, as the device's driver counts it, and
// whether it fits there now, reading the device's figures (and, with
// Plan.Claims, the other processes' claims on it). The rules come from
// the driver: on a CUDA GPU the allocation granularity, and, for a plan
// that allocates from the memory pool, its chunk, learned once per device
// by a probe of a pool of memtrack's own that leaves the device's pools as
// they were. On the CPU it collects the Go heap first, as [Device.Measure]
// does.
//
// A plan that is not one is refused, before anything is read or probed,
// with [ErrInvalidDevice] for the zero Device, the device's error where it
// does not exist here ([ErrInvalidOrdinal], [ErrBackendNotBuilt],
// [ErrBackendUnavailable]), [ErrInvalidSize] for a size or count below 1
// or transient memory, a graph need, a headroom or a block size below 0, and
// [ErrInvalidArgument] for a Via that is none; a device without what the
// plan needs refuses it with [ErrNotSupported] (memory pools, mappings or
// CUDA graphs).
func (p Plan) Predict() (Prediction, error) { return p.predict(nil) }

// predict is Predict, counting, where own is a claim of this process's,
// only the claims posted before it. A refused prediction is the plan
// alone.
func (p Plan) predict(own *claims.Posted) (Prediction, error) {
	pred, err := p.predictFigures(own)
	if err != nil {
		return Prediction{Plan: p}, err
	}
	return pred, nil
}

// predictFigures is predict's work.
func (p Plan) predictFigures(own *claims.Posted) (Prediction, error) {
	s, err := p.check()
	if err != nil {
		return Prediction{Plan: p}, err
	}
	d := p.Device
	pred := Prediction{Plan: p, AllocUnit: 1}
	pool, mapped := p.transientInPool(), false
	for _, part := range p.Parts {
		pool = pool || part.Via == ViaAllocAsync
		mapped = mapped || part.Via == ViaMap
	}
	if pool {
		if _, _, err := d.streamTable("Plan.Predict", false, "stream-ordered allocation and memory pools"); err != nil {
			return pred, err
		}
	}
	rules := fit.Rules{AllocUnit: 1}
	if fb, ok := s.b.(fitBackend); ok {
		if rules, err = fb.fitRules(d.ordinal, pool); err != nil {
			return pred, fillError(err, d, 0, nil)
		}
	}
	if mapped {
		if rules.Granularity, err = d.MapGranularity(); err != nil {
			return pred, err
		}
	}
	if err := fit.Check(rules, p.parts(true)); err != nil {
		return pred, refusedPlan(d, err)
	}
	if p.GraphNeed > 0 {
		if _, err := s.graphMemory(d); err != nil {
			return pred, wrapf(err, "a plan with CUDA graphs")
		}
	}
	pred.AllocUnit, pred.Granularity, pred.PoolChunk = rules.AllocUnit, rules.Granularity, rules.PoolChunk

	// The device's figures now.
	settle(d)
	u, err := d.Usage()
	if err != nil {
		return pred, err
	}
	pred.Source, pred.PerProcess, pred.Before, pred.PerProcessErr = sourceOf(u)
	pred.Total, pred.Free, pred.OtherProcessesUsed = u.Total, u.Free, u.OtherProcessesUsed
	pred.start = fitStart{tracked: map[string]int64{}, notResident: u.NotResident}
	for _, part := range p.Parts {
		pred.start.tracked[part.Category] = categoryTracked(d, part.Category)
	}
	if d.kind == KindCPU {
		pred.start.runtime, pred.start.files = runtimeMemory(), residentFiles()
	}
	var before fit.Before
	if pool {
		ps, err := d.Pool().Stats()
		if err != nil {
			return pred, err
		}
		before = fit.Before{PoolUsed: ps.PoolUsed, PoolReserved: ps.PoolReserved}
		pred.start.poolReserved, pred.start.poolRead = ps.PoolReserved, true
	}
	var graphGrowth int64
	if p.GraphNeed > 0 {
		if u.GraphErr != nil {
			return pred, wrapf(u.GraphErr, "a plan with CUDA graphs")
		}
		outliving, err := s.graphOutliving(d)
		if err != nil {
			return pred, err
		}
		graphGrowth = graphsAfter(u.GraphReserved, outliving, p.GraphNeed) - u.GraphReserved
		pred.start.graphReserved, pred.start.graphRead = u.GraphReserved, true
	}

	res, err := fit.Predict(rules, before, p.parts(true), graphGrowth)
	if err != nil {
		return pred, refusedPlan(d, err)
	}
	pred.Parts = make([]PartPrediction, len(p.Parts))
	for i, part := range p.Parts {
		pred.Parts[i] = PartPrediction{PlanPart: part, Rounded: rules.Rounded(part.Via.fit(), part.Size), Predicted: res.Parts[i]}
	}
	pred.PoolReservedIncrease, pred.GraphReservedIncrease = res.PoolGrowth, res.GraphGrowth
	pred.Predicted, pred.Transient, pred.Need = res.Stays, res.Transient, res.Need

	if p.Claims != nil {
		if pred.Claimed, err = p.Claims.claimed(d, u, own); err != nil {
			return pred, err
		}
	}
	pred.Room = roomOf(pred.Free, p.Headroom, pred.Claimed, pred.Need)
	pred.Fits = pred.Room >= 0
	if p.BlockSize > 0 {
		beside, err := fit.Predict(rules, before, p.parts(false), graphGrowth)
		if err != nil {
			return pred, refusedPlan(d, err)
		}
		block := rules.Rounded(p.cacheVia().fit(), p.BlockSize)
		pred.Blocks = max(roomOf(pred.Free, p.Headroom, pred.Claimed, beside.Need), 0) / block
	}
	return pred, nil
}

// refusedPlan is the error of a plan of d that the arithmetic refused
// (internal/fit), in the package's words.
func refusedPlan(d Device, err error) error {
	return fmt.Errorf("%w: the plan of %v: %s", ErrInvalidArgument, d, strings.TrimPrefix(err.Error(), fit.ErrInvalid.Error()+": "))
}

// check refuses a plan that is not one, reading nothing, and returns its
// device's table.
func (p Plan) check() (*deviceTable, error) {
	s, _, err := p.Device.lookup(start)
	if err != nil {
		return nil, err
	}
	for i, part := range p.Parts {
		if part.Via >= numVias {
			return nil, fmt.Errorf("%w: part %d of the plan of %v: %v is no way of allocating", ErrInvalidArgument, i, p.Device, part.Via)
		}
		if part.Size < 1 || part.Count < 1 {
			return nil, fmt.Errorf("%w: part %d of the plan of %v: %d buffers of %d bytes: want at least one buffer of at least 1 byte",
				ErrInvalidSize, i, p.Device, part.Count, part.Size)
		}
	}
	if p.TransientVia >= numVias {
		return nil, fmt.Errorf("%w: the plan of %v: its transient memory's %v is no way of allocating", ErrInvalidArgument, p.Device, p.TransientVia)
	}
	for _, f := range []struct {
		name string
		n    int64
	}{{"transient memory", p.Transient}, {"graph need", p.GraphNeed}, {"headroom", p.Headroom}, {"block size", p.BlockSize}} {
		if f.n < 0 {
			return nil, fmt.Errorf("%w: the plan of %v: a %s of %d bytes: want 0 or more", ErrInvalidSize, p.Device, f.name, f.n)
		}
	}
	return s, nil
}

// transientInPool reports whether the plan's transient memory comes from
// the pool.
func (p Plan) transientInPool() bool { return p.Transient > 0 && p.TransientVia == ViaAllocAsync }

// parts returns the plan's parts for the arithmetic, its transient memory
// last as a transient part, and, unless cache, without the parts of the
// KV cache.
func (p Plan) parts(cache bool) []fit.Part {
	out := make([]fit.Part, 0, len(p.Parts)+1)
	for _, part := range p.Parts {
		if cache || part.Category != CategoryKVCache {
			out = append(out, fit.Part{Via: part.Via.fit(), Size: part.Size, Count: part.Count})
		}
	}
	if p.Transient > 0 {
		out = append(out, fit.Part{Via: p.TransientVia.fit(), Size: p.Transient, Count: 1, Transient: true})
	}
	return out
}

// cacheVia is how the plan allocates its KV cache: as its first part of
// [CategoryKVCache], else ViaAlloc.
func (p Plan) cacheVia() Via {
	for _, part := range p.Parts {
		if part.Category == CategoryKVCache {
			return part.Via
		}
	}
	return ViaAlloc
}

// graphsAfter is what the device will reserve for graphs once graphs that
// need need are launched beside what it reserves (reserved), of which
// allocations left live by earlier launches may hold outliving: the
// budget's arithmetic of graph memory ([Budget].GraphReserved), its one
// place.
func graphsAfter(reserved, outliving, need int64) int64 {
	var b Budget
	b.setGraphs(reserved, outliving, need)
	return b.GraphReserved
}

// sourceOf returns the figure of u that a prediction reads: this process's
// memory on the device as the driver accounts it where u has it, else the
// device's used memory, with its source's name.
func sourceOf(u Usage) (source string, perProcess bool, figure int64, perProcessErr error) {
	switch {
	case u.PerProcess && u.Device.kind == KindROCm:
		return SourceROCmSMI, true, u.ProcessUsed, nil
	case u.PerProcess:
		return SourceNVML, true, u.ProcessUsed, nil
	case u.Device.kind == KindCUDA:
		return SourceCUDAUsed, false, u.Used, u.PerProcessErr
	case u.Device.kind == KindROCm:
		return SourceHIPUsed, false, u.Used, u.PerProcessErr
	case u.Device.kind == KindCPU:
		return SourceOS, false, u.Used, nil
	}
	return SourceUnchecked, false, u.Used, u.PerProcessErr
}

// categoryTracked returns the Tracked of the category of d called name,
// 0 where d has none; for "", the device's memory outside its categories
// (all of it on a device without categories).
func categoryTracked(d Device, name string) int64 {
	rows := d.CategoryStats()
	if name == "" {
		if len(rows) == 0 {
			return d.MemoryAllocated()
		}
		name = Uncategorised
	}
	for _, c := range rows {
		if c.Category == name {
			return c.Tracked
		}
	}
	return 0
}

// roomOf is free - headroom - claimed - need, held to the int64 range.
func roomOf(free, headroom, claimed, need int64) int64 {
	return subSat(subSat(subSat(free, headroom), claimed), need)
}
