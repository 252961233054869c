package otelmetric

import (
	"github.com/memtrack/memtrack"
	"go.opentelemetry.io/otel/semconv/v1.43.0/hwconv"
)

// kind is an OpenTelemetry instrument kind, all of them observable.
type kind uint8

const (
	// upDownCounter is for additive figures that go up and down: bytes or
	// buffers held now, which sum over devices and processes.
	upDownCounter kind = iota
	// counter is for cumulative figures, which only grow (until
	// ResetAccumulatedMemoryStats).
	counter
	// gauge is for figures that do not add up: peaks and fractions.
	gauge
)

// String names the kind as the OpenTelemetry API does.
func (k kind) String() string {
	switch k {
	case upDownCounter:
		return "UpDownCounter"
	case counter:
		return "Counter"
	}
	return "Gauge"
}

// family says which devices an instrument reports and with which attributes.
type family uint8

const (
	// The zero family: memtrack's figures, for every used device, with the
	// attributes memtrack.backend, memtrack.ordinal and, where the device
	// has one, hw.id.
	_ family = iota
	// gpu: the driver's figures of a GPU (CUDA, Metal), under the names of
	// OpenTelemetry's hardware semantic conventions, with their attributes
	// (hw.id, hw.type, hw.name, hw.model, hw.vendor).
	gpu
	// cpu: the OS's figures of the CPU device (the machine or its cgroup),
	// under memtrack's names, with the attributes of own.
	cpu
	// category: the figures of each of a device's categories
	// ([memtrack.Device.CategoryStats]), one point per row, with the
	// attributes of own and memtrack.category.
	category
)

// instrument is one instrument: its name, unit, kind and description, and
// how a reading gives its value. Exactly one of value, ratio and row is
// set (row for the family category, which gives a category row's value);
// each reports false where the device or row has no such figure.
type instrument struct {
	name, unit, desc string
	kind             kind
	family           family
	value            func(r *reading) (int64, bool)
	ratio            func(r *reading) (float64, bool)
	row              func(c *memtrack.CategoryStats) (int64, bool)
}

// always wraps a figure every device has.
func always(f func(s *memtrack.Stats) int64) func(r *reading) (int64, bool) {
	return func(r *reading) (int64, bool) { return f(&r.stats), true }
}

// pool wraps a figure of a CUDA memory pool.
func pool(f func(p *memtrack.PoolStats) int64) func(r *reading) (int64, bool) {
	return func(r *reading) (int64, bool) { return f(&r.pool), r.poolErr == nil }
}

// graphs wraps a figure of a CUDA device's graph memory.
func graphs(f func(g *memtrack.GraphStats) int64) func(r *reading) (int64, bool) {
	return func(r *reading) (int64, bool) { return f(&r.graphs), r.graphsErr == nil }
}

// perProcess wraps a figure of the driver's per-process figures.
func perProcess(f func(u *memtrack.Usage) int64) func(r *reading) (int64, bool) {
	return func(r *reading) (int64, bool) { return f(&r.usage), r.usageErr == nil && r.usage.PerProcess }
}

// every wraps a figure every category row has, the uncategorised one
// included.
func every(f func(c *memtrack.CategoryStats) int64) func(c *memtrack.CategoryStats) (int64, bool) {
	return func(c *memtrack.CategoryStats) (int64, bool) { return f(c), true }
}

// named wraps a figure only the named categories have: the uncategorised
// row has no peaks.
func named(f func(c *memtrack.CategoryStats) int64) func(c *memtrack.CategoryStats) (int64, bool) {
	return func(c *memtrack.CategoryStats) (int64, bool) { return f(c), c.Category != memtrack.Uncategorised }
}

// The driver's figures of a device: what it reports in use (total - free),
// free, its total, and the fraction in use.
func deviceUsed(r *reading) (int64, bool)  { return max(r.total-r.free, 0), r.memErr == nil }
func deviceFree(r *reading) (int64, bool)  { return r.free, r.memErr == nil }
func deviceTotal(r *reading) (int64, bool) { return r.total, r.memErr == nil }
func deviceUtilization(r *reading) (float64, bool) {
	if r.memErr != nil || r.total <= 0 {
		return 0, false
	}
	return float64(max(r.total-r.free, 0)) / float64(r.total), true
}

// instruments are every instrument of the package, in the order of the
// table of the package's documentation. memtrack's own instruments are named after package
// prom's metrics, so that OpenTelemetry's Prometheus exporter serves them
// under the same names: memtrack.held (By) becomes memtrack_held_bytes, a
// counter gets _total. A test holds the two to each other.
var instruments = []instrument{
	{name: "memtrack.tracked", unit: "By", kind: upDownCounter,
		desc:  "Bytes memtrack tracks on the device: the sizes asked for of its live buffers and tracked memory.",
		value: always(func(s *memtrack.Stats) int64 { return s.Tracked })},
	{name: "memtrack.peak_tracked", unit: "By", kind: gauge,
		desc:  "High-water mark of memtrack.tracked since the last peak reset.",
		value: always(func(s *memtrack.Stats) int64 { return s.PeakTracked })},
	{name: "memtrack.held", unit: "By", kind: upDownCounter,
		desc:  "Bytes the device holds for buffers allocated through memtrack: memtrack.tracked plus stream-ordered frees the device has not yet executed.",
		value: always(func(s *memtrack.Stats) int64 { return s.Held })},
	{name: "memtrack.peak_held", unit: "By", kind: gauge,
		desc:  "High-water mark of memtrack.held since the last peak reset.",
		value: always(func(s *memtrack.Stats) int64 { return s.PeakHeld })},
	{name: "memtrack.address_space", unit: "By", kind: upDownCounter,
		desc:  "Bytes of address space the device's reservations hold (Device.Reserve), mapped or not: no memory; the physical memory mapped into them is in memtrack.tracked.",
		value: always(func(s *memtrack.Stats) int64 { return s.AddressSpace })},
	{name: "memtrack.reservations", unit: "{reservation}", kind: upDownCounter,
		desc:  "Reservations of address space on the device, not yet released.",
		value: always(func(s *memtrack.Stats) int64 { return s.Reservations })},
	{name: "memtrack.limit", unit: "By", kind: upDownCounter,
		desc:  "Memory limit on memtrack.tracked; absent where none is set.",
		value: func(r *reading) (int64, bool) { return r.stats.Limit, r.stats.Limit > 0 }},
	{name: "memtrack.process_used", unit: "By", kind: upDownCounter,
		desc:  "This process's device memory as the driver accounts it (NVML, on CUDA GPUs), its context included; absent where the driver gives no per-process figures.",
		value: perProcess(func(u *memtrack.Usage) int64 { return u.ProcessUsed })},
	{name: "memtrack.process_untracked", unit: "By", kind: upDownCounter,
		desc:  "memtrack.process_used - memtrack.tracked: this process's context, libraries and memory allocated without memtrack; absent where the driver gives no per-process figures.",
		value: perProcess(func(u *memtrack.Usage) int64 { return u.ProcessUntracked })},
	{name: "memtrack.other_processes_used", unit: "By", kind: upDownCounter,
		desc:  "The other processes' device memory as the driver accounts it (NVML, on CUDA GPUs); absent where the driver gives no per-process figures.",
		value: perProcess(func(u *memtrack.Usage) int64 { return u.OtherProcessesUsed })},
	{name: "memtrack.pool_reserved", unit: "By", kind: upDownCounter,
		desc:  "Bytes the device's CUDA memory pool reserves, used or not, as the driver reports them.",
		value: pool(func(p *memtrack.PoolStats) int64 { return p.PoolReserved })},
	{name: "memtrack.peak_pool_reserved", unit: "By", kind: gauge,
		desc:  "High-water mark of memtrack.pool_reserved since the last peak reset, as the driver reports it.",
		value: pool(func(p *memtrack.PoolStats) int64 { return p.PeakPoolReserved })},
	{name: "memtrack.pool_used", unit: "By", kind: upDownCounter,
		desc:  "Bytes in use in the device's CUDA memory pool, as the driver reports them.",
		value: pool(func(p *memtrack.PoolStats) int64 { return p.PoolUsed })},
	{name: "memtrack.peak_pool_used", unit: "By", kind: gauge,
		desc:  "High-water mark of memtrack.pool_used since the last peak reset, as the driver reports it.",
		value: pool(func(p *memtrack.PoolStats) int64 { return p.PeakPoolUsed })},
	{name: "memtrack.graph_reserved", unit: "By", kind: upDownCounter,
		desc:  "Bytes the CUDA driver reserves for the allocations of CUDA graphs, mapped or not, as it reports them: device memory memtrack does not track.",
		value: graphs(func(g *memtrack.GraphStats) int64 { return g.GraphReserved })},
	{name: "memtrack.peak_graph_reserved", unit: "By", kind: gauge,
		desc:  "High-water mark of memtrack.graph_reserved since the last peak reset, as the driver reports it.",
		value: graphs(func(g *memtrack.GraphStats) int64 { return g.PeakGraphReserved })},
	{name: "memtrack.graph_used", unit: "By", kind: upDownCounter,
		desc:  "Bytes of memtrack.graph_reserved that CUDA graphs map now, as the driver reports them.",
		value: graphs(func(g *memtrack.GraphStats) int64 { return g.GraphUsed })},
	{name: "memtrack.peak_graph_used", unit: "By", kind: gauge,
		desc:  "High-water mark of memtrack.graph_used since the last peak reset, as the driver reports it.",
		value: graphs(func(g *memtrack.GraphStats) int64 { return g.PeakGraphUsed })},
	{name: "memtrack.buffers", unit: "{buffer}", kind: upDownCounter,
		desc:  "Live buffers and tracked handles memtrack counts on the device.",
		value: always(func(s *memtrack.Stats) int64 { return s.Buffers })},
	{name: "memtrack.peak_buffers", unit: "{buffer}", kind: gauge,
		desc:  "High-water mark of memtrack.buffers since the last peak reset.",
		value: always(func(s *memtrack.Stats) int64 { return s.PeakBuffers })},
	{name: "memtrack.allocs", unit: "{allocation}", kind: counter,
		desc:  "Allocations through memtrack on the device since the last reset of the cumulative figures.",
		value: always(func(s *memtrack.Stats) int64 { return s.Allocs })},
	{name: "memtrack.alloc_bytes", unit: "By", kind: counter,
		desc:  "Bytes allocated through memtrack on the device (requested sizes) since the last reset of the cumulative figures.",
		value: always(func(s *memtrack.Stats) int64 { return s.AllocBytes })},
	{name: "memtrack.failed_allocs", unit: "{allocation}", kind: counter,
		desc:  "Allocations refused by the memory limit or failed in the backend since the last reset of the cumulative figures.",
		value: always(func(s *memtrack.Stats) int64 { return s.FailedAllocs })},
	{name: "memtrack.leaks", unit: "{buffer}", kind: counter,
		desc:  "Buffers and tracked handles the garbage collector found unreachable without a free while the device was watched for leaks, since the last reset of the cumulative figures.",
		value: always(func(s *memtrack.Stats) int64 { return s.Leaks })},
	{name: "memtrack.leaked_bytes", unit: "By", kind: counter,
		desc:  "Bytes of the leaks counted by memtrack.leaks.",
		value: always(func(s *memtrack.Stats) int64 { return s.LeakedBytes })},
	{name: "memtrack.frees", unit: "{free}", kind: counter,
		desc:  "Frees through memtrack on the device since the last reset of the cumulative figures.",
		value: always(func(s *memtrack.Stats) int64 { return s.Frees })},
	{name: "memtrack.freed_bytes", unit: "By", kind: counter,
		desc:  "Bytes freed through memtrack on the device since the last reset of the cumulative figures.",
		value: always(func(s *memtrack.Stats) int64 { return s.FreedBytes })},
	{name: "memtrack.device_free", unit: "By", kind: upDownCounter, family: cpu,
		desc:  "Free memory of the CPU device as the OS reports it: its total less what this process uses.",
		value: deviceFree},
	{name: "memtrack.device_total", unit: "By", kind: upDownCounter, family: cpu,
		desc:  "Total memory of the CPU device as the OS reports it: the machine's, or its cgroup's limit where that is lower.",
		value: deviceTotal},
	{name: hwconv.GpuMemoryUsageObservable{}.Name(), unit: hwconv.GpuMemoryUsageObservable{}.Unit(), kind: upDownCounter, family: gpu,
		desc:  "GPU memory used, as the driver reports it for the whole device (total minus free).",
		value: deviceUsed},
	{name: hwconv.GpuMemoryLimitObservable{}.Name(), unit: hwconv.GpuMemoryLimitObservable{}.Unit(), kind: upDownCounter, family: gpu,
		desc:  "Size of the GPU memory, as the driver reports it.",
		value: deviceTotal},
	{name: hwconv.GpuMemoryUtilizationObservable{}.Name(), unit: hwconv.GpuMemoryUtilizationObservable{}.Unit(), kind: gauge, family: gpu,
		desc:  "Fraction of GPU memory used, as the driver reports it.",
		ratio: deviceUtilization},
	{name: "memtrack.category_tracked", unit: "By", kind: upDownCounter, family: category,
		desc: "Bytes memtrack tracks in the category on the device (category uncategorised: outside every category).",
		row:  every(func(c *memtrack.CategoryStats) int64 { return c.Tracked })},
	{name: "memtrack.category_peak_tracked", unit: "By", kind: gauge, family: category,
		desc: "High-water mark of memtrack.category_tracked since the last peak reset; absent for uncategorised.",
		row:  named(func(c *memtrack.CategoryStats) int64 { return c.PeakTracked })},
	{name: "memtrack.category_buffers", unit: "{buffer}", kind: upDownCounter, family: category,
		desc: "Live buffers and tracked handles in the category on the device.",
		row:  every(func(c *memtrack.CategoryStats) int64 { return c.Buffers })},
	{name: "memtrack.category_peak_buffers", unit: "{buffer}", kind: gauge, family: category,
		desc: "High-water mark of memtrack.category_buffers since the last peak reset; absent for uncategorised.",
		row:  named(func(c *memtrack.CategoryStats) int64 { return c.PeakBuffers })},
	{name: "memtrack.category_alloc_bytes", unit: "By", kind: counter, family: category,
		desc: "Bytes allocated in the category (requested sizes) since the last reset of the cumulative figures.",
		row:  every(func(c *memtrack.CategoryStats) int64 { return c.AllocBytes })},
	{name: "memtrack.category_freed_bytes", unit: "By", kind: counter, family: category,
		desc: "Bytes freed in the category since the last reset of the cumulative figures.",
		row:  every(func(c *memtrack.CategoryStats) int64 { return c.FreedBytes })},
	{name: "memtrack.category_allocs", unit: "{allocation}", kind: counter, family: category,
		desc: "Allocations in the category since the last reset of the cumulative figures.",
		row:  every(func(c *memtrack.CategoryStats) int64 { return c.Allocs })},
	{name: "memtrack.category_frees", unit: "{free}", kind: counter, family: category,
		desc: "Frees in the category since the last reset of the cumulative figures.",
		row:  every(func(c *memtrack.CategoryStats) int64 { return c.Frees })},
	{name: "memtrack.category_failed_allocs", unit: "{allocation}", kind: counter, family: category,
		desc: "Requests in the category refused by a memory limit or failed in the backend since the last reset of the cumulative figures.",
		row:  every(func(c *memtrack.CategoryStats) int64 { return c.FailedAllocs })},
	{name: "memtrack.category_limit", unit: "By", kind: upDownCounter, family: category,
		desc: "Memory limit on memtrack.category_tracked; absent where none is set.",
		row:  func(c *memtrack.CategoryStats) (int64, bool) { return c.Limit, c.Limit > 0 }},
}
