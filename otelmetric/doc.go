// Package otelmetric exports memtrack's figures as OpenTelemetry metrics:
// observable instruments on a [metric.MeterProvider] the program passes,
// read by one callback when a reader collects, for every device the process
// has used ([memtrack.UsedDevices]). It starts nothing and polls nothing.
//
//	reg, err := otelmetric.Register(otel.GetMeterProvider())
//	...
//	defer reg.Unregister()
//
// The driver's figures of a GPU carry the names, units, instrument kinds
// and attributes of OpenTelemetry's hardware semantic conventions
// (semconv 1.43.0, where the hw.gpu metrics and the hw.* attributes are
// still marked development), so that they sit beside those of other GPU
// collectors; the conventions name no free-memory metric, which is limit
// minus usage:
//
//	hw.gpu.memory.usage        UpDownCounter  By  memory in use on the GPU, by anyone (total - free)
//	hw.gpu.memory.limit        UpDownCounter  By  the GPU's memory
//	hw.gpu.memory.utilization  Gauge          1   usage / limit
//
// with the attributes hw.id (the GPU's UUID as nvidia-smi and dcgm-exporter
// print it, "GPU-…", or a Metal device's registryID, "0x…"), hw.type
// ("gpu"), hw.name (memtrack's name for the device, "cuda:0"), hw.model
// (its model name) and hw.vendor ("NVIDIA" for CUDA; none for Metal). They
// are left out for a device whose identity or memory query fails.
//
// memtrack's own figures are named under memtrack., after package prom's
// metrics, so that OpenTelemetry's Prometheus exporter serves them under
// the same names (memtrack.held, unit By, is memtrack_held_bytes; a counter
// gets _total):
//
//	memtrack.tracked             UpDownCounter  By            bytes tracked: the sizes asked for of live buffers and tracked memory
//	memtrack.peak_tracked        Gauge          By            its high-water mark
//	memtrack.held                UpDownCounter  By            bytes the device holds for them, stream-ordered frees not yet executed included (CUDA)
//	memtrack.peak_held           Gauge          By            its high-water mark
//	memtrack.address_space       UpDownCounter  By            address space the device's reservations hold (Device.Reserve), mapped or not
//	memtrack.reservations        UpDownCounter  {reservation} those reservations
//	memtrack.limit               UpDownCounter  By            the memory limit, where one is set
//	memtrack.process_used        UpDownCounter  By            this process's device memory as the driver accounts it (NVML, CUDA)
//	memtrack.process_untracked   UpDownCounter  By            memtrack.process_used - memtrack.tracked
//	memtrack.other_processes_used UpDownCounter By            the other processes' device memory as the driver accounts it
//	memtrack.pool_reserved       UpDownCounter  By            a CUDA memory pool's reserved bytes (memory_reserved)
//	memtrack.peak_pool_reserved  Gauge          By            its high-water mark (max_memory_reserved)
//	memtrack.pool_used           UpDownCounter  By            the bytes in use in the pool, as the driver counts them
//	memtrack.peak_pool_used      Gauge          By            its high-water mark
//	memtrack.graph_reserved      UpDownCounter  By            the memory the CUDA driver reserves for graphs, untracked
//	memtrack.peak_graph_reserved Gauge          By            its high-water mark
//	memtrack.graph_used          UpDownCounter  By            the part of it that graphs map now
//	memtrack.peak_graph_used     Gauge          By            its high-water mark
//	memtrack.buffers             UpDownCounter  {buffer}      live buffers and tracked handles
//	memtrack.peak_buffers        Gauge          {buffer}      its high-water mark
//	memtrack.allocs              Counter        {allocation}  allocations
//	memtrack.alloc_bytes         Counter        By            bytes allocated (requested sizes)
//	memtrack.failed_allocs       Counter        {allocation}  allocations refused by the limit or failed in the backend
//	memtrack.leaks               Counter        {buffer}      buffers the garbage collector found unreachable without a free while watched
//	memtrack.leaked_bytes        Counter        By            their bytes
//	memtrack.frees               Counter        {free}        frees
//	memtrack.freed_bytes         Counter        By            bytes freed
//	memtrack.device_free         UpDownCounter  By            the CPU device's free memory: its total less what this process uses
//	memtrack.device_total        UpDownCounter  By            the CPU device's memory: the machine's, or its cgroup's limit
//
// with the attributes memtrack.backend ("cpu", "cuda", "metal"),
// memtrack.ordinal and, for a GPU, hw.id, so that each series joins the
// hw.gpu ones and dcgm-exporter's on the GPU's UUID without an info metric.
//
// A device with categories ([memtrack.Device.Category]) has, besides, the
// figures of each row of [memtrack.Device.CategoryStats], named as the
// device's with category_ after memtrack. and package prom's
// memtrack_category_* through the exporter, with the attributes above and
// memtrack.category (the category's name, or "uncategorised" for the
// memory outside every category):
//
//	memtrack.category_tracked        UpDownCounter  By            bytes tracked in the category
//	memtrack.category_peak_tracked   Gauge          By            its high-water mark (not for "uncategorised")
//	memtrack.category_buffers        UpDownCounter  {buffer}      the category's live buffers
//	memtrack.category_peak_buffers   Gauge          {buffer}      their high-water mark (not for "uncategorised")
//	memtrack.category_alloc_bytes    Counter        By            bytes allocated in the category
//	memtrack.category_freed_bytes    Counter        By            bytes freed in it
//	memtrack.category_allocs         Counter        {allocation}  allocations in it
//	memtrack.category_frees          Counter        {free}        frees in it
//	memtrack.category_failed_allocs  Counter        {allocation}  requests in it refused or failed
//	memtrack.category_limit          UpDownCounter  By            the category's memory limit, where one is set
//
// The pool figures are left out for a device without a CUDA memory pool,
// the graph figures for one without CUDA graph memory, the per-process ones where the driver gives none ([memtrack.Usage].PerProcess),
// the device ones for a device whose query fails. The counters restart from
// zero after [memtrack.Device.ResetAccumulatedMemoryStats] and the peaks
// follow [memtrack.Device.ResetPeakMemoryStats]. Since the names are
// package prom's, serve one package or the other from a Prometheus
// registry, not both.
//
// docs/integrations.md puts these names beside package prom's and shows
// the join with dcgm-exporter.
package otelmetric
