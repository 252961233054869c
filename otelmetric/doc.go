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
// memtrack's own figures are named under memtrack.:
//
//	memtrack.memory.allocated           UpDownCounter  By            bytes held by live buffers (requested sizes)
//	memtrack.memory.allocated.peak      Gauge          By            its high-water mark
//	memtrack.memory.held                UpDownCounter  By            bytes the device holds for them, stream-ordered frees not yet executed included (CUDA)
//	memtrack.memory.held.peak           Gauge          By            its high-water mark
//	memtrack.memory.limit               UpDownCounter  By            the memory limit, where one is set
//	memtrack.memory.pool.reserved       UpDownCounter  By            a CUDA memory pool's reserved bytes (memory_reserved)
//	memtrack.memory.pool.reserved.peak  Gauge          By            its high-water mark (max_memory_reserved)
//	memtrack.memory.pool.used           UpDownCounter  By            the bytes in use in the pool, as the driver counts them
//	memtrack.memory.pool.used.peak      Gauge          By            its high-water mark
//	memtrack.buffer.live                UpDownCounter  {buffer}      live buffers
//	memtrack.buffer.live.peak           Gauge          {buffer}      its high-water mark
//	memtrack.allocation.count           Counter        {allocation}  allocations
//	memtrack.allocation.size            Counter        By            bytes allocated (requested sizes)
//	memtrack.allocation.failure.count   Counter        {allocation}  allocations refused by the limit or failed in the backend
//	memtrack.free.count                 Counter        {free}        frees
//	memtrack.free.size                  Counter        By            bytes freed
//	memtrack.cpu.memory.usage           UpDownCounter  By            the CPU device's memory in use, as the OS reports it (machine or cgroup)
//	memtrack.cpu.memory.limit           UpDownCounter  By            the CPU device's total memory, as the OS reports it
//	memtrack.cpu.memory.utilization     Gauge          1             usage / limit
//
// with the attributes memtrack.backend ("cpu", "cuda", "metal"),
// memtrack.ordinal and, for a GPU, hw.id, so that each series joins the
// hw.gpu ones and dcgm-exporter's on the GPU's UUID without an info metric.
// The pool figures are left out for a device without a CUDA memory pool,
// the cpu ones for a device whose query fails. The counters restart from
// zero after [memtrack.Device.ResetAccumulatedMemoryStats] and the peaks
// follow [memtrack.Device.ResetPeakMemoryStats].
//
// docs/integrations.md puts these names beside package prom's and shows
// the join with dcgm-exporter.
package otelmetric
