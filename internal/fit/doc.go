// Package fit is the arithmetic of a prediction: what a load will add to a
// process's memory on one device, as the device's driver counts it, from
// the driver's rules (learned by memtrack's adapters from the driver
// itself) and the device's figures just before the load. It reads no
// device and calls no driver: its inputs are numbers, and so are its
// answers.
//
// # The rules
//
// A load is parts ([Part]), each some buffers of one size allocated one
// way ([Via]):
//
//   - [ViaAlloc], a synchronous allocation of its own (CUDA's cuMemAlloc; the
//     CPU's mapping from the OS), takes its size rounded up to the
//     device's allocation unit ([Rules].AllocUnit: on an NVIDIA H200 with
//     driver 580.159.04, cuMemGetInfo's used memory grew by 2 MiB for
//     allocations of 1 B, 4 KiB and 1 MiB, by 4 MiB for 2 MiB + 1 B and 3
//     MiB, by 64 MiB for 64 MiB: the size rounded up to
//     cuMemGetAllocationGranularity's 2 MiB), but for the sizes below
//     [Rules].HeapBelow (the CPU's buffers from the Go heap), which are
//     taken as asked;
//
//   - [ViaMap], physical memory mapped into a reservation (cuMemCreate),
//     takes whole granules: its size must be a multiple of the
//     granularity ([Rules].Granularity, the same 2 MiB on a CUDA GPU; the
//     CPU's reservations are mapped in pages, 64 KiB on Windows), as the
//     driver refuses any other;
//
//   - [ViaAllocAsync], a stream-ordered allocation from the device's memory pool
//     (cuMemAllocAsync), moves the pool's used figure by its size, and the
//     pool reserves device memory in whole chunks ([Rules].PoolChunk; an
//     H200's default pool reserved 32 MiB for 1 B to 32 MiB, 64 for 33
//     MiB, 96 for 65 MiB, 128 for 100 MiB), reusing what it reserved
//     already ([Before].PoolReserved):
//
//     PoolReserved after = max(PoolReserved before, ceil(PoolUsed before + pool bytes, PoolChunk))
//
//     which is the pool's reservation once the load is done and its
//     streams synchronized with a release threshold of 0 (the default),
//     the pool keeping nothing it does not use beyond what it held before.
//
// What CUDA graphs reserve is not derived here: the caller gives it
// (graph growth), from the graphs' captures and the budget's arithmetic
// of graph memory.
//
// A part may be transient: allocated and freed while the load runs (a
// forward pass's activations). It is in [Result].Need, what the load takes
// at its most, and not in [Result].Stays, what it adds once done. The
// transient parts are taken as all live at once, beside the parts that
// stay: Need is the most the load can take.
//
// # The invariants
//
// Every figure of a [Result] is 0 or more, and none wraps: each sum and
// product is held at math.MaxInt64 rather than wrapped round. Need is at
// least Stays. A part added to a load never lowers Stays or Need. Bad
// input (a size or count below 1, an allocation unit below 1, a part in
// the pool without a chunk, a mapping off the granularity or on a device
// without one, a figure below 0)
// is an error, and no result. The tests check the closed forms above
// against a model that allocates the buffers one by one, as a driver
// does, and frees the transient ones.
package fit
