// Package prom exports memtrack's figures to Prometheus: a
// [prometheus.Collector] that reads the counters of every device the
// process has used ([memtrack.UsedDevices]) at scrape time.
//
//	prometheus.MustRegister(prom.NewCollector())
//
// Each metric has the labels backend ("cpu", "cuda", "metal") and ordinal,
// plus any constant labels given with [WithConstLabels]:
//
//	memtrack_tracked_bytes            gauge    bytes held by live buffers
//	memtrack_peak_tracked_bytes       gauge    high-water mark of memtrack_tracked_bytes
//	memtrack_buffers             gauge    live buffers
//	memtrack_peak_buffers        gauge    high-water mark of memtrack_buffers
//	memtrack_alloc_bytes_total      counter  bytes allocated (requested sizes)
//	memtrack_freed_bytes_total          counter  bytes freed
//	memtrack_allocs_total          counter  allocations
//	memtrack_frees_total                counter  frees
//	memtrack_failed_allocs_total  counter  refused or failed allocations
//	memtrack_leaks_total          counter  buffers the garbage collector found unreachable without a free
//	                                       while the device was watched ([memtrack.LeakWatcher.Enable])
//	memtrack_leaked_bytes_total   counter  their bytes
//	memtrack_held_bytes                 gauge    bytes the device holds for memtrack's buffers: allocated
//	                                             bytes plus stream-ordered frees not yet executed (CUDA)
//	memtrack_peak_held_bytes            gauge    high-water mark of memtrack_held_bytes
//	memtrack_address_space_bytes        gauge    address space the device's reservations hold ([memtrack.Device.Reserve]),
//	                                             mapped or not; their mappings are in memtrack_tracked_bytes
//	memtrack_reservations               gauge    those reservations
//	memtrack_limit_bytes                gauge    the memory limit, where one is set
//	memtrack_device_free_bytes          gauge    free memory, as the OS or driver reports it
//	memtrack_device_total_bytes         gauge    total memory, as the OS or driver reports it
//	memtrack_device_info                gauge    1, with the labels uuid and name ([memtrack.Device.Info])
//	memtrack_process_used_bytes         gauge    this process's device memory as the driver accounts it (NVML, CUDA)
//	memtrack_process_untracked_bytes    gauge    memtrack_process_used_bytes - memtrack_tracked_bytes
//	memtrack_other_processes_used_bytes gauge    the other processes' device memory as the driver accounts it
//	memtrack_pool_reserved_bytes        gauge    a CUDA memory pool's reserved bytes (memory_reserved)
//	memtrack_peak_pool_reserved_bytes   gauge    its high-water mark (max_memory_reserved)
//	memtrack_pool_used_bytes            gauge    the bytes in use in the pool, as the driver counts them
//	memtrack_peak_pool_used_bytes       gauge    its high-water mark
//	memtrack_graph_reserved_bytes       gauge    the memory the CUDA driver reserves for graphs, part of
//	                                             the device's untracked memory ([memtrack.GraphStats])
//	memtrack_peak_graph_reserved_bytes  gauge    its high-water mark
//	memtrack_graph_used_bytes           gauge    the part of it that graphs map now
//	memtrack_peak_graph_used_bytes      gauge    its high-water mark
//
// A device with categories ([memtrack.Device.Category]) has, besides, the
// figures of each category with the label category (its name, or
// "uncategorised" for the memory outside every category), named as the
// device's with category_ after memtrack_:
//
//	memtrack_category_tracked_bytes          gauge    bytes the category's live buffers hold
//	memtrack_category_peak_tracked_bytes     gauge    its high-water mark (not for "uncategorised")
//	memtrack_category_buffers                gauge    the category's live buffers
//	memtrack_category_peak_buffers           gauge    their high-water mark (not for "uncategorised")
//	memtrack_category_alloc_bytes_total      counter  bytes allocated in the category
//	memtrack_category_freed_bytes_total      counter  bytes freed in it
//	memtrack_category_allocs_total           counter  allocations in it
//	memtrack_category_frees_total            counter  frees in it
//	memtrack_category_failed_allocs_total    counter  requests in it refused or failed
//	memtrack_category_limit_bytes            gauge    the category's memory limit, where one is set
//
// The categories' rows add up to the device's figures:
// sum by (backend, ordinal) (memtrack_category_tracked_bytes) is
// memtrack_tracked_bytes.
//
// memtrack_device_info names the device: uuid is the GPU's UUID as
// nvidia-smi and dcgm-exporter print it ("GPU-…"), a Metal device's
// registryID ("0x…"), or empty for the CPU; name is the model name. Join it
// on backend and ordinal to give the other metrics those labels, and then on
// uuid to put them beside dcgm-exporter's (docs/integrations.md).
//
// The device_* metrics are left out for a device whose query fails, the
// process_* and other_processes_* metrics where the driver gives no
// per-process figures ([memtrack.Usage].PerProcess), the
// pool_* metrics for a device without a CUDA memory pool, and the graph_*
// metrics for a device without CUDA graph memory; the rest of the
// scrape goes on. The counters restart from zero after
// [memtrack.Device.ResetAccumulatedMemoryStats], which rate() and increase()
// treat as a counter reset, and the peaks follow
// [memtrack.Device.ResetPeakMemoryStats].
package prom

import (
	"strconv"

	"github.com/memtrack/memtrack"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a [prometheus.Collector] of memtrack's figures. It keeps no
// copy of them and starts no goroutine: each Collect reads the counters.
// Create one with [NewCollector].
type Collector struct {
	tracked, peakTracked, buffers, peakBuffers *prometheus.Desc
	allocBytes, freedBytes                     *prometheus.Desc
	allocs, frees, failedAllocs                *prometheus.Desc
	leaks, leakedBytes                         *prometheus.Desc
	limit, devFree, devTotal                   *prometheus.Desc
	info                                       *prometheus.Desc
	held, peakHeld                             *prometheus.Desc
	addressSpace, reservations                 *prometheus.Desc
	poolReserved, poolUsed                     [2]*prometheus.Desc // current, peak
	graphReserved, graphUsed                   [2]*prometheus.Desc // current, peak
	cat                                        categoryDescs
	proc                                       processDescs
}

// Option configures a [Collector].
type Option func(*config)

type config struct {
	constLabels prometheus.Labels
}

// WithConstLabels adds labels with fixed values to every metric, such as the
// name of the model a process serves. Names that clash with the metrics'
// own labels (backend, ordinal, uuid, name, and category on the
// memtrack_category_* metrics), or are not valid label names, make
// registration fail.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) {
		for k, v := range labels {
			c.constLabels[k] = v
		}
	}
}

// NewCollector returns a [Collector] of every device the process has used.
func NewCollector(opts ...Option) *Collector {
	cfg := config{constLabels: prometheus.Labels{}}
	for _, o := range opts {
		o(&cfg)
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("memtrack_"+name, help, []string{"backend", "ordinal"}, cfg.constLabels)
	}
	return &Collector{
		tracked:      desc("tracked_bytes", "Bytes memtrack tracks on the device: the sizes asked for of its live buffers and tracked memory."),
		peakTracked:  desc("peak_tracked_bytes", "High-water mark of memtrack_tracked_bytes since the last peak reset."),
		buffers:      desc("buffers", "Live buffers and tracked handles memtrack counts on the device."),
		peakBuffers:  desc("peak_buffers", "High-water mark of memtrack_buffers since the last peak reset."),
		allocBytes:   desc("alloc_bytes_total", "Bytes allocated through memtrack on the device (requested sizes) since the last reset of the cumulative figures."),
		freedBytes:   desc("freed_bytes_total", "Bytes freed through memtrack on the device since the last reset of the cumulative figures."),
		allocs:       desc("allocs_total", "Allocations through memtrack on the device since the last reset of the cumulative figures."),
		frees:        desc("frees_total", "Frees through memtrack on the device since the last reset of the cumulative figures."),
		failedAllocs: desc("failed_allocs_total", "Allocations refused by the memory limit or failed in the backend since the last reset of the cumulative figures."),
		leaks:        desc("leaks_total", "Buffers and tracked handles the garbage collector found unreachable without a free while the device was watched for leaks, since the last reset of the cumulative figures."),
		leakedBytes:  desc("leaked_bytes_total", "Bytes of the leaks counted by memtrack_leaks_total."),
		limit:        desc("limit_bytes", "Memory limit on memtrack_tracked_bytes; absent where none is set."),
		devFree:      desc("device_free_bytes", "Free memory of the device as the OS or driver reports it; absent where the query fails."),
		devTotal:     desc("device_total_bytes", "Total memory of the device as the OS or driver reports it; absent where the query fails."),
		info: prometheus.NewDesc("memtrack_device_info", "The device's identity: 1, with its UUID (as nvidia-smi prints a GPU's; a Metal device's registryID; empty for the CPU) and model name; absent where the query fails.",
			[]string{"backend", "ordinal", "uuid", "name"}, cfg.constLabels),
		held:         desc("held_bytes", "Bytes the device holds for buffers allocated through memtrack: memtrack_tracked_bytes plus stream-ordered frees the device has not yet executed."),
		peakHeld:     desc("peak_held_bytes", "High-water mark of memtrack_held_bytes since the last peak reset."),
		addressSpace: desc("address_space_bytes", "Bytes of address space the device's reservations hold (Device.Reserve), mapped or not: no memory; the physical memory mapped into them is in memtrack_tracked_bytes."),
		reservations: desc("reservations", "Reservations of address space on the device, not yet released."),
		poolReserved: [2]*prometheus.Desc{
			desc("pool_reserved_bytes", "Bytes the device's CUDA memory pool reserves, used or not, as the driver reports them."),
			desc("peak_pool_reserved_bytes", "High-water mark of memtrack_pool_reserved_bytes since the last peak reset, as the driver reports it."),
		},
		poolUsed: [2]*prometheus.Desc{
			desc("pool_used_bytes", "Bytes in use in the device's CUDA memory pool, as the driver reports them."),
			desc("peak_pool_used_bytes", "High-water mark of memtrack_pool_used_bytes since the last peak reset, as the driver reports it."),
		},
		graphReserved: [2]*prometheus.Desc{
			desc("graph_reserved_bytes", "Bytes the CUDA driver reserves for the allocations of CUDA graphs, mapped or not, as it reports them: device memory memtrack does not track."),
			desc("peak_graph_reserved_bytes", "High-water mark of memtrack_graph_reserved_bytes since the last peak reset, as the driver reports it."),
		},
		graphUsed: [2]*prometheus.Desc{
			desc("graph_used_bytes", "Bytes of memtrack_graph_reserved_bytes that CUDA graphs map now, as the driver reports them."),
			desc("peak_graph_used_bytes", "High-water mark of memtrack_graph_used_bytes since the last peak reset, as the driver reports it."),
		},
		cat:  newCategoryDescs(cfg.constLabels),
		proc: newProcessDescs(desc),
	}
}

// Describe sends the descriptions of every metric the collector can send.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

func (c *Collector) descs() []*prometheus.Desc {
	return append([]*prometheus.Desc{c.tracked, c.peakTracked, c.buffers, c.peakBuffers, c.allocBytes, c.freedBytes,
		c.allocs, c.frees, c.failedAllocs, c.leaks, c.leakedBytes, c.limit, c.devFree, c.devTotal, c.info,
		c.held, c.peakHeld, c.addressSpace, c.reservations, c.poolReserved[0], c.poolReserved[1], c.poolUsed[0], c.poolUsed[1],
		c.graphReserved[0], c.graphReserved[1], c.graphUsed[0], c.graphUsed[1],
		c.proc.processUsed, c.proc.processUntracked, c.proc.otherProcessesUsed}, c.cat.all()...)
}

// sender returns a function that sends one metric with the labels.
func sender(ch chan<- prometheus.Metric, labels []string) func(*prometheus.Desc, prometheus.ValueType, int64) {
	return func(desc *prometheus.Desc, t prometheus.ValueType, v int64) {
		m, err := prometheus.NewConstMetric(desc, t, float64(v), labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
}

// Collect reads the figures of every used device and sends them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range memtrack.UsedDevices() {
		c.send(ch, read(d))
	}
}

// reading is what Collect reads of one device through memtrack's API,
// before it sends the metrics (Collector.send): the figures, and the
// errors of the queries that can fail, whose metrics are then absent.
type reading struct {
	dev         memtrack.Device
	stats       memtrack.Stats
	free, total int64
	memErr      error
	info        memtrack.DeviceInfo
	infoErr     error
	pool        memtrack.PoolStats
	poolErr     error
	graphs      memtrack.GraphStats
	graphsErr   error
	usage       memtrack.Usage
	usageErr    error
	cats        []memtrack.CategoryStats
}

// read reads the figures of device d.
func read(d memtrack.Device) reading {
	r := reading{dev: d, stats: d.MemoryStats()}
	r.free, r.total, r.memErr = d.MemGetInfo()
	r.info, r.infoErr = d.Info()
	r.pool, r.poolErr = d.Pool().Stats()
	r.graphs, r.graphsErr = d.Graphs().Stats()
	r.usage, r.usageErr = d.Usage()
	r.cats = d.CategoryStats()
	return r
}

// send sends the metrics of one device's reading.
func (c *Collector) send(ch chan<- prometheus.Metric, r reading) {
	d := r.dev
	labels := []string{d.Kind().String(), strconv.Itoa(d.Ordinal())}
	send := sender(ch, labels)
	s := r.stats
	send(c.tracked, prometheus.GaugeValue, s.Tracked)
	send(c.peakTracked, prometheus.GaugeValue, s.PeakTracked)
	send(c.buffers, prometheus.GaugeValue, s.Buffers)
	send(c.peakBuffers, prometheus.GaugeValue, s.PeakBuffers)
	send(c.allocBytes, prometheus.CounterValue, s.AllocBytes)
	send(c.freedBytes, prometheus.CounterValue, s.FreedBytes)
	send(c.allocs, prometheus.CounterValue, s.Allocs)
	send(c.frees, prometheus.CounterValue, s.Frees)
	send(c.failedAllocs, prometheus.CounterValue, s.FailedAllocs)
	send(c.leaks, prometheus.CounterValue, s.Leaks)
	send(c.leakedBytes, prometheus.CounterValue, s.LeakedBytes)
	send(c.held, prometheus.GaugeValue, s.Held)
	send(c.peakHeld, prometheus.GaugeValue, s.PeakHeld)
	send(c.addressSpace, prometheus.GaugeValue, s.AddressSpace)
	send(c.reservations, prometheus.GaugeValue, s.Reservations)
	if s.Limit > 0 {
		send(c.limit, prometheus.GaugeValue, s.Limit)
	}
	if r.memErr == nil {
		send(c.devFree, prometheus.GaugeValue, r.free)
		send(c.devTotal, prometheus.GaugeValue, r.total)
	}
	if r.infoErr == nil {
		m, err := prometheus.NewConstMetric(c.info, prometheus.GaugeValue, 1, append(labels, r.info.UUID, r.info.Name)...)
		if err != nil {
			m = prometheus.NewInvalidMetric(c.info, err)
		}
		ch <- m
	}
	if r.poolErr == nil {
		p := r.pool
		send(c.poolReserved[0], prometheus.GaugeValue, p.PoolReserved)
		send(c.poolReserved[1], prometheus.GaugeValue, p.PeakPoolReserved)
		send(c.poolUsed[0], prometheus.GaugeValue, p.PoolUsed)
		send(c.poolUsed[1], prometheus.GaugeValue, p.PeakPoolUsed)
	}
	if r.graphsErr == nil {
		g := r.graphs
		send(c.graphReserved[0], prometheus.GaugeValue, g.GraphReserved)
		send(c.graphReserved[1], prometheus.GaugeValue, g.PeakGraphReserved)
		send(c.graphUsed[0], prometheus.GaugeValue, g.GraphUsed)
		send(c.graphUsed[1], prometheus.GaugeValue, g.PeakGraphUsed)
	}
	if r.usageErr == nil {
		c.proc.collect(send, r.usage)
	}
	c.cat.collect(ch, labels, r.cats)
}
