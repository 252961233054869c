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
// tracked ones, and [Measurement.Budget] sizes the cache by vLLM's formula:
//
//	dev, err := memtrack.ParseDevice("cuda:0")
//	...
//	base, err := dev.Baseline() // before the weights, the context, the libraries
//	loadWeights(dev)
//	m, err := dev.Measure(func() error { return runForwardPass(dev) })
//	...
//	b, err := m.Budget(base, 0.9, blockBytes)
//	fmt.Println(b.Blocks, "KV-cache blocks fit")
//
// By hand, the same is [Device.ResetPeakMemoryStats], the pass,
// [Device.MaxMemoryAllocated] and [Device.MemGetInfo].
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
// # Observability
//
// [Expvar] publishes every used device's [Stats] as JSON, [Stats] logs as a
// slog group, and package [github.com/memtrack/memtrack/prom] exports the
// figures as Prometheus metrics.
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
// # Allocation sites
//
// [Device.EnableAllocationSites] records the call stack of later
// allocations on a device, sampled as Go's heap profiler samples
// ([Device.SetAllocationSiteRate]; rate 1 records every one);
// [Device.AllocationSites] and
// [Device.PeakAllocationSites] return the live buffers, and those live at the
// latest peak, by call stack as a [SiteSnapshot]. Package
// [github.com/memtrack/memtrack/pprof] writes them as profiles for go tool
// pprof and serves them over HTTP.
//
// # Leaks
//
// A [Buffer] that becomes unreachable without [Buffer.Free] is collected by
// the garbage collector, and its device memory is never freed.
// [Device.EnableLeakWatch] watches a device's later allocations: one that
// the collector finds unreachable without a free is counted in
// [Stats].Leaks, reported to a handler (by default a [LeakLogger]: one slog
// warning per allocation site at a bounded rate) and, if asked, freed.
// [LeakCheck] lists what was allocated since it started and is not freed;
// package [github.com/memtrack/memtrack/memtest] runs one around a test
// (VerifyNone, VerifyTestMain) and reports a benchmark's device memory per
// operation (ReportMemory).
package memtrack
