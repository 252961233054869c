// Package memtrack tracks, per device, how many bytes a process holds on
// each device it uses (the CPU, NVIDIA GPUs through CUDA, Apple GPUs through
// Metal): the current figure, its exact high-water mark, and the allocator
// statistics known from PyTorch's torch.cuda.memory_stats.
//
// # Measuring peak memory
//
// The classic use sizes a cache from a measurement: reset the peak, run one
// representative pass, read the peak, and give the cache what remains.
// [Device.Baseline] records the device before the weights are loaded,
// [Device.Measure] measures the pass, with the driver's figures beside the
// tracked ones, and [Measurement.Budget] sizes the cache by vLLM's formula,
// the CUDA context in the baseline and outside the budget
// ([Measurement.FootprintBudget] keeps it within):
//
//	dev, err := memtrack.ParseDevice("cuda:0")
//	...
//	base, err := dev.Baseline() // before the weights and the libraries; it retains the CUDA context
//	loadWeights(dev)
//	m, err := dev.Measure(func() error { return runForwardPass(dev) })
//	...
//	b, err := m.Budget(base, 0.9, blockBytes)
//	fmt.Println(b.Blocks, "KV-cache blocks fit")
//
// By hand, the same is [Device.ResetPeakMemoryStats], the pass,
// [Device.MaxMemoryAllocated] and [Device.MemGetInfo].
//
// Where several GPUs hold one cache (tensor parallelism), [MeasureDevices]
// measures one pass over all of them, and [NewCommonBudget] gives every
// device the blocks that the one with the fewest can hold;
// [CommonBudget.Reduce] agrees on them with ranks in other processes
// through the caller's all-reduce.
//
// # Devices and backends
//
// A [Device] is a kind and an ordinal. The CPU backend is always built and
// needs no cgo. The CUDA backend is compiled with -tags cuda and the Metal
// backend with -tags metal on macOS; without its tag, [CUDA] and [Metal]
// return an error matching [ErrBackendNotBuilt] that names the tag.
//
// # Counters
//
// The counters live in package [github.com/memtrack/memtrack/tracker]: lock-
// free atomics, one cache-line-aligned record per device, so that the
// allocation path takes no lock and two devices never contend. Counted are
// the sizes asked for, of buffers allocated through [Device.Alloc]; what the
// driver reports beside them is in [Device.MemGetInfo] and [Device.Usage].
// [Device.MemoryStats] returns them all as [Stats], and
// [Device.MemorySummary] as a table.
//
// # Peaks and measurements
//
// [Device.OpenPeakScope] opens a [PeakScope], a high-water mark of its own
// from its opening to its close, which [Device.ResetPeakMemoryStats] does
// not move, so that measurements nest; [Device.Measure] runs a function in
// one and returns a [Measurement] with the driver's figures, and
// [Measurement.Budget] sizes a KV cache from it (docs/measuring.md).
//
// # Categories
//
// [Device.Category] names a share of a device's memory (the weights, the KV
// cache, the activations): a [Category] allocates and tracks as the device
// does ([Category.Alloc], [Category.AllocAsync], [Category.Track]) and keeps
// figures and a limit of its own ([Category.Stats], [Device.CategoryStats]),
// which a [Measurement] and the renderers report (docs/categories.md).
//
// # Stream-ordered allocation and pools
//
// On CUDA devices, [Device.AllocAsync] and [Buffer.FreeAsync] allocate and
// free in stream order from the device's memory pool; the device-side
// figure, [Stats].Held, keeps a buffer freed so until its stream executes
// the free. [Device.Pool] returns the [Pool]: its figures ([Pool.Stats],
// [Pool.Usage]) and controls ([Pool.Trim], [Pool.SetReleaseThreshold])
// (docs/streams.md).
//
// # Per process
//
// On a CUDA GPU the driver also accounts for each process, and NVIDIA's
// management library (NVML, loaded at run time) reports it: [Usage] splits
// Untracked into this process's untracked memory (ProcessUntracked) and
// the other processes' (OtherProcessesUsed, listed in OtherProcesses), and
// [Measurement.Budget] counts this process's own growth, so that instances
// sharing a GPU do not count each other's memory as their own. Where NVML
// cannot tell, PerProcessErr says why and the budgets use the device-wide
// figures.
//
// # Errors
//
// Bad input gets an error and changes nothing: a size <= 0, an ordinal past
// the last device, a second Free. Refused allocations return an
// [*OutOfMemoryError] and add one to FailedAllocs, and nothing else.
//
// # Out of memory
//
// A refused allocation returns an [*OutOfMemoryError] whose %+v is a report
// in the manner of PyTorch's: what was asked, what the device and the
// process hold, who holds the most, what to try. [Device.OnOutOfMemory]
// runs a function at each refusal; package
// [github.com/memtrack/memtrack/oomdump] writes the report, the profiles
// and the history to a directory there.
//
// # Memory allocated elsewhere
//
// Memory that other code allocates (another CUDA binding, a C library's
// workspace) is counted with the same figures, limit, sites and history as
// [Device.Alloc]'s, in one of two ways, each for its own case:
//
//   - [Device.Track] returns a [*Tracked] handle, for code that keeps what
//     it allocated and frees it itself: [Tracked.Release] uncounts it once
//     freed, [Tracked.FreeWith] frees and uncounts it in one step.
//   - [Device.TrackAddr] counts by address without a handle, and
//     [Kind.UntrackAddr] frees and uncounts by address: for a drop-in
//     binding whose free is given only the address (package
//     github.com/memtrack/memtrack/cu), with no heap allocation per call.
//
// Both share one address index: [Kind.TrackedAt] finds the handle of an
// address counted either way, and an address is counted at most once.
//
// # Features that observe allocations
//
// Allocation sites, the memory history and the leak watch observe every
// allocation and free of a device once switched on, each through a small
// value the device returns: [Device.Sites], [Device.History],
// [Device.Leaks]. Every way of counting memory ([Device.Alloc],
// [Category.Alloc], [Device.AllocAsync], [Device.Track],
// [Device.TrackAddr]) takes one allocation path, which reaches them through
// one hook set per device: with all of them off an allocation pays one
// atomic load for them (docs/performance.md has the figures).
//
// # Allocation sites
//
// [SiteRecorder.Enable] records the call stack of later
// allocations on a device, sampled as Go's heap profiler samples
// ([SiteRecorder.SetRate]; rate 1 records every one);
// [SiteRecorder.Snapshot] and
// [SiteRecorder.PeakSnapshot] return the live buffers, and those live at the
// latest peak, by call stack as a [SiteSnapshot]. Package
// [github.com/memtrack/memtrack/pprof] writes them as profiles for go tool
// pprof and serves them over HTTP.
//
// # Memory history
//
// [HistoryRecorder.Enable] records every allocation, free and refusal of a
// device into a ring without a lock, the model of PyTorch's
// _record_memory_history; [HistoryRecorder.Snapshot] and
// [HistoryRecorder.Range] read it as [HistoryEvent] values. Package
// [github.com/memtrack/memtrack/trace] writes it for Perfetto, and package
// [github.com/memtrack/memtrack/web] plots it on a page (docs/timeline.md).
//
// # Leaks
//
// A [Buffer] that becomes unreachable without [Buffer.Free] is collected by
// the garbage collector, and its device memory is never freed.
// [LeakWatcher.Enable] watches a device's later allocations: one that
// the collector finds unreachable without a free is counted in
// [Stats].Leaks, reported to a handler (by default a [LeakLogger]: one slog
// warning per allocation site at a bounded rate) and, if asked, freed.
// [LeakCheck] lists what was allocated since it started and is not freed;
// package [github.com/memtrack/memtrack/memtest] runs one around a test
// (VerifyNone, VerifyTestMain) and reports a benchmark's device memory per
// operation (ReportMemory) (docs/leaks.md).
//
// # Renderings
//
// Each rendering is a package over the core's plain values: [Expvar]
// publishes every used device's [Stats] as JSON and [Stats] logs as a slog
// group; [github.com/memtrack/memtrack/prom] exports the figures as
// Prometheus metrics and [github.com/memtrack/memtrack/otelmetric] as
// OpenTelemetry instruments; [github.com/memtrack/memtrack/pprof] writes
// allocation sites as profiles; [github.com/memtrack/memtrack/trace] and
// [github.com/memtrack/memtrack/web] render the history;
// [github.com/memtrack/memtrack/oomdump] dumps an out-of-memory
// (docs/integrations.md). Package [github.com/memtrack/memtrack/cu] is a
// drop-in for mumax's CUDA binding that counts what it allocates.
package memtrack
