package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/bytesize"
)

// The figures that more than one layer passes around, as plain values:
// those a backend reports (a memory pool's, graph memory's, the
// processes'), those an out-of-memory report holds (the allocation sites,
// the categories), named as docs/glossary.md names them.

// Site is one call stack that allocated recorded buffers, with the figures
// of its live buffers, now or at the latest peak. The figures are scaled by
// the sampling ([SiteRecorder.SetRate]): each sampled buffer counts
// as the buffers and bytes it stands for, so they estimate the stack's true
// figures without bias, and equal them at rate 1.
type Site struct {
	// Stack holds the stack's return addresses, innermost first, as
	// [runtime.Callers] writes them (read them with [runtime.CallersFrames]);
	// nil for the site [OtherSite].
	Stack   []uintptr
	Buffers int64 // live buffers allocated from the stack (scaled)
	Bytes   int64 // their bytes (scaled)
	// Category is the category the buffers were allocated through
	// ([Category.Alloc]), or "" for none: one stack that allocates in two
	// categories is two sites.
	Category string
}

// CategoryStats is a snapshot of one category's figures on a device, named
// as [Stats]' are. The figures of a category are exact as the device's are.
//
// The row of the memory outside every category ([Uncategorised]) is the
// device's figures less its categories', read one after the other: exact
// whenever no allocation or free runs meanwhile. Memory outside categories
// costs nothing more than it did before categories, so that row keeps no
// peaks of its own: its PeakTracked and PeakBuffers are 0, and no limit.
type CategoryStats struct {
	Device                 Device
	Category               string // the category's name, or Uncategorised
	Tracked, PeakTracked   int64
	AllocBytes, FreedBytes int64
	Buffers, PeakBuffers   int64
	Allocs, Frees          int64
	FailedAllocs           int64
	Limit                  int64 // 0: none
}

// ProcessMemory is one process's memory on a device as the driver accounts
// it: NVML's entry for it in nvmlDeviceGetComputeRunningProcesses.
type ProcessMemory struct {
	PID int // the process's ID, as the driver knows it
	// Name is the process's name as NVML gives it (nvmlSystemGetProcessName,
	// the executable's path on Linux), or "" where it cannot.
	Name string
	// Used is the device memory the driver attributes to the process: all
	// of it, its CUDA context included.
	Used int64
}

// PoolStats are the figures of a CUDA device's current memory pool (the
// default one unless cuDeviceSetMemPool set another), the one
// [Device.AllocAsync] allocates from, as the driver reports them
// (cuMemPoolGetAttribute). Reserved is what the pool holds of the device,
// used or not: PyTorch's memory_reserved and max_memory_reserved. Used is
// what live stream-ordered allocations take of it, by anyone in the process,
// rounded as the driver rounds them. The highs are reset by
// [Device.ResetPeakMemoryStats].
type PoolStats struct {
	Device           Device
	PoolReserved     int64 // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
	PeakPoolReserved int64 // CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
	PoolUsed         int64 // CU_MEMPOOL_ATTR_USED_MEM_CURRENT
	PeakPoolUsed     int64 // CU_MEMPOOL_ATTR_USED_MEM_HIGH
	ReleaseThreshold int64 // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
}

// String describes the pool's figures on one line.
func (p PoolStats) String() string {
	return fmt.Sprintf("%v pool: reserved %s (high %s), used %s (high %s), release threshold %s",
		p.Device, bytesize.Exact(p.PoolReserved), bytesize.Exact(p.PeakPoolReserved),
		bytesize.Exact(p.PoolUsed), bytesize.Exact(p.PeakPoolUsed), bytesize.Exact(p.ReleaseThreshold))
}

// GraphStats are the driver's figures of a CUDA device's graph memory
// (cuDeviceGetGraphMemAttribute): the physical memory it keeps for the
// allocations of graphs, apart from every memory pool. It is device
// memory of this process that memtrack does not track ([Usage].Untracked
// includes it). The highs are reset by [Device.ResetPeakMemoryStats].
type GraphStats struct {
	Device Device
	// GraphReserved is what the driver reserves for graphs, mapped or not
	// (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT): it grows at a graph's
	// first launch or upload and shrinks only at [Graphs.Trim].
	GraphReserved     int64
	PeakGraphReserved int64 // CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
	// GraphUsed is what graphs have mapped of it
	// (CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT): the memory of the streams'
	// graphs and of their allocations that outlive a launch.
	GraphUsed     int64
	PeakGraphUsed int64 // CU_GRAPH_MEM_ATTR_USED_MEM_HIGH
}

// String describes the figures on one line.
func (s GraphStats) String() string {
	return fmt.Sprintf("%v graphs: reserved %s (high %s), used %s (high %s)", s.Device,
		bytesize.Exact(s.GraphReserved), bytesize.Exact(s.PeakGraphReserved), bytesize.Exact(s.GraphUsed), bytesize.Exact(s.PeakGraphUsed))
}

// Stream is a CUDA stream (a CUstream handle), for stream-ordered
// allocation with [Device.AllocAsync] and [Buffer.FreeAsync]. The zero
// Stream is [DefaultStream]. A stream of github.com/mumax/3/cuda/cu converts
// to it, memtrack.Stream(cu.StreamCreate()), and so does the handle of
// another binding, memtrack.Stream(h) for a uintptr h. A Stream belongs to
// the device whose context created it; memtrack never destroys one.
type Stream uintptr

// DefaultStream is the legacy default stream (the NULL stream) of the
// device's primary context.
const DefaultStream Stream = 0

// MaxCaptures is how many ended captures each device keeps, besides those
// in progress, for [Graphs.Captures] and [Graphs.Capture]: the most
// recently ended ones. A program that captures more graphs keeps the
// [Capture] values it needs itself (read each with Graphs.Capture just
// before it ends the capture).
const MaxCaptures = 4096

// The names of the usual categories of an inference server, for
// [Device.Category]. Any other name of up to [MaxCategoryName] bytes may be
// used; [Measurement.Budget] reads the one named CategoryWeights.
const (
	CategoryWeights     = "weights"     // the model's weights
	CategoryKVCache     = "kv_cache"    // the KV cache
	CategoryActivations = "activations" // activations of a forward pass
	CategoryWorkspace   = "workspace"   // libraries' and kernels' workspaces

	// Uncategorised names the row of the memory allocated outside any
	// category, in [Device.CategoryStats], the summary and the renderings.
	// No category may take the name.
	Uncategorised = "uncategorised"

	// OtherCategories names the one series into which a rendering that
	// shows the largest categories one by one folds the others (the
	// page's plot, package web). No category may take the name.
	OtherCategories = "other categories"
)

const (
	// MaxMarkName is the longest name of a mark, in bytes.
	MaxMarkName = 128

	// MaxMarkNames is the most names the marks of one history may have
	// (each may be used any number of times): marks name a program's
	// phases ("load weights", "prefill", "decode"), not its steps.
	MaxMarkNames = 1024
)

const (
	// MaxSiteDepth is the deepest call stack [SiteRecorder.Enable]
	// records.
	MaxSiteDepth = 128

	// MaxAllocationSites is the most distinct call stacks a device records at
	// once. Allocations from further stacks are folded into one site,
	// "memtrack.other", and counted in [SiteStats].Folded.
	MaxAllocationSites = 4096

	// OtherSite names the site that holds the allocations past
	// [MaxAllocationSites] distinct stacks: a [Site] with a nil Stack.
	OtherSite = "memtrack.other"

	// DefaultSiteRate is the sampling rate of allocation sites unless
	// [SiteRecorder.SetRate] sets another: on average one sample
	// per 512 KiB allocated, the default of Go's heap profiler
	// ([runtime.MemProfileRate]). Device buffers are mostly far larger, so
	// they are nearly all recorded; a small buffer costs one random number.
	DefaultSiteRate = 512 << 10
)
