// Package cudadrv is memtrack's binding of the CUDA driver API (libcuda,
// built with -tags cuda). Each operation is one C function, so one cgo
// transition: it makes the context it needs current on the calling thread,
// runs the operation and puts the thread's previous context back, and
// reports the results of the three steps apart (Call), so that the
// operation's own result decides what memtrack reports.
//
// # The driver, loaded at run time
//
// Nothing here needs cuda.h or libcuda to build: driver.h declares the few
// types, values and calls used, and the binary carries no NEEDED libcuda,
// so it starts on a machine without the driver. [Load] opens libcuda.so.1
// (dlopen, RTLD_NOW | RTLD_LOCAL) on the first use, asks its version
// (cuDriverGetVersion), and fills a table of function pointers, one line
// of driver.h per call (its name, the CUDA version of the signature
// declared, and the prototype): by cuGetProcAddress_v2 on a CUDA 12 driver,
// by cuGetProcAddress from 11.3, by dlsym of the versioned names
// (cuMemAlloc_v2) before, each call at the CUDA version of its signature,
// never above the driver's (loader.c cites the rules). A call through the
// table costs what the direct call of a linked binary cost: one indirect
// call. Without the library, or without a call every operation needs,
// Load says why ([*LoadError]) and nothing else may be called; without an
// optional call, what needs it is off and says so ([MemPools], [UUIDs],
// [GraphMem]).
// [Fill] fills a table of one's own the same way (internal/cudatest's).
// [Table] lists the package's table as Load resolved it, each call with
// the CUDA version asked; scripts/test-nvidia-libs.sh checks it against
// NVIDIA's own libraries of the 535 and 470 drivers.
//
// # The driver rules it relies on
//
// Each rule below is the driver's documented behaviour, with the page of
// the CUDA Driver API reference (docs.nvidia.com/cuda/cuda-driver-api) or
// the comment of cuda.h (CUDA 11.8, as scripts/cuda-dev.sh fetches it for
// the fake driver) that states it, unless it says "an H200": where the
// documents are silent, what an NVIDIA H200 (driver 580.159.04, CUDA 13.0)
// answered, with its figures. The fake driver of testdata/fakecuda follows
// the same rules, and takes the H200's answers as its defaults (its
// RULES.md); the tests of this package check them against it.
//
//   - Device memory (cuMemAlloc). An H200 grew the device's used memory
//     (cuMemGetInfo) by the size rounded up to 2 MiB, its allocation
//     granularity: 1 B, 4 KiB and 1 MiB took 2 MiB, 2 MiB + 1 B and
//     3 MiB 4 MiB, 64 MiB 64 MiB; and it handed the address just freed to
//     the next allocation, of another size. The reference says neither.
//
//   - Contexts. cuDevicePrimaryCtxRetain retains a device's primary context
//     and makes nothing current; cuCtxSetCurrent replaces the top of the
//     calling thread's context stack, and NULL pops it (Primary Context
//     Management; Context Management). So one call can switch to a context
//     and back without touching what the thread had below it.
//
//   - Sticky errors. cuda.h documents CUDA_ERROR_ILLEGAL_ADDRESS (700),
//     LAUNCH_TIMEOUT (702), ASSERT (710), HARDWARE_STACK_ERROR (714),
//     ILLEGAL_INSTRUCTION (715), MISALIGNED_ADDRESS (716),
//     INVALID_ADDRESS_SPACE (717), INVALID_PC (718), LAUNCH_FAILED (719),
//     MPS_CLIENT_TERMINATED (810) and EXTERNAL_DEVICE (911) as leaving the
//     process "in an inconsistent state", every later call returning the
//     same error; later headers add CONTAINED (226, CUDA 12.x) and
//     TENSOR_MEMORY_LEAK (721, CUDA 12.8) in the same words. [Sticky] lists
//     them by number, so a newer driver's codes are known whatever header
//     memtrack was built with.
//
//   - Stream-ordered allocation. cuMemAllocAsync: "The allocation comes from
//     the memory pool current to the stream's device"; the current pool is
//     the default one until cuDeviceSetMemPool sets another
//     (cuDeviceGetMemPool). All accesses of an allocation, its free
//     included, must come between the stream executions of the allocation
//     and the free (Stream Ordered Memory Allocator, overview): a free on
//     another stream needs an event dependency (cuStreamWaitEvent) or a
//     synchronization first.
//
//   - Pools. The USED_MEM_HIGH and RESERVED_MEM_HIGH attributes accept only
//     0, which resets them (cuMemPoolSetAttribute). The release threshold
//     defaults to 0: at each synchronization the pool returns its unused
//     memory to the OS (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD). cuMemPoolTrimTo
//     cannot release memory backing outstanding allocations, and "allocations
//     that have been asynchronously freed but whose completion has not been
//     observed on the host (eg. by a synchronize) can count as outstanding".
//     When a free's bytes leave USED_MEM_CURRENT, at its execution or as soon
//     as it is enqueued, the reference does not say, nor could an H200
//     tell (its stream had run the free before the reading). Nor does it
//     say in what steps a pool reserves: an H200's default pool, its
//     threshold 0, reserved 32 MiB for a cuMemAllocAsync of 1 B to
//     32 MiB, 64 for 33 MiB, 96 for 65, 128 for 100, and counted the size
//     asked as used (1 MiB: 1.000 MiB); so PoolReserved exceeds PoolUsed
//     by up to a step.
//
//   - A pool's chunk. A pool reserves device memory in chunks larger than
//     the allocation granularity (an NVIDIA H200 with driver 580.159.04:
//     32 MiB for 1 B to 32 MiB, 64 for 33 MiB, 96 for 65 MiB), of a size
//     that NVIDIA documents nowhere and no attribute gives. [PoolChunk]
//     learns it from a pool of its own (cuMemPoolCreate), whose
//     reservation it reads after an allocation of 1 byte on a stream of its
//     own (cuMemAllocFromPoolAsync: "Allocates memory from a specified
//     pool", not the device's current one), so that the device's current
//     pool, its default pool and the program's streams are left alone.
//
//   - Events. cuEventRecord: "hEvent and hStream must be from the same
//     context" (else CUDA_ERROR_INVALID_HANDLE); a stream belongs to the
//     context it was created in, and for the special handles (NULL,
//     CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) cuStreamGetCtx returns "the
//     context current to the calling thread". FreeAsync therefore runs in
//     the stream's context and records an event of that context; AllocAsync
//     and FreeAsync make ctx current first, so they ask cuStreamGetCtx only
//     about a stream of one's own.
//
//   - Stream handles. cuStreamDestroy "Destroys the stream specified by
//     hStream", and a call with the handle afterwards is undefined
//     behaviour (of cudaStreamDestroy, the runtime's form of the call:
//     "Use of the handle after this call is undefined behavior"); an
//     NVIDIA H200 (driver 580.159.04) stopped the process with SIGSEGV in
//     cuStreamGetCtx of a stream destroyed earlier. A stream's handle is
//     the program's: every call of this package that takes one
//     ([AllocAsync], [AllocAsyncIn], [FreeAsync], [FreeGraph],
//     [CheckStream], [CaptureInfo]) serves a call of the program that
//     passes the stream in that call, and a handle memtrack keeps (with a
//     pending free, with a capture's record) is a key, never passed to the
//     driver again.
//
//   - cuMemFree's wait. cuMemFree "will not perform any implicit
//     synchronization" for a pointer of cuMemAllocAsync or
//     cuMemAllocFromPoolAsync, and "may" for all other pointers; an H200
//     (driver 580.159.04) did: its cuMemFree of a cuMemAlloc pointer did
//     not return while a stream of the context was held back by a host
//     function (testdata/gpu-runs/h200-2026-12-04-probes/tests.log). So
//     [Free] may wait for every stream of the device, as the program's own
//     cuMemFree would; [FreeAsync] never does.
//
//   - Event order. cuEventRecord "Captures in hEvent the contents of hStream
//     at the time of this call", and cuEventQuery returns CUDA_SUCCESS "if
//     all captured work has been completed": of two events recorded on one
//     stream, the later one's work holds the earlier one's, so where the
//     later is reached so is the earlier. StreamEvents.Query asks each
//     stream for its newest event first, and bisects only where it is not
//     reached. cuStreamDestroy, called while the device still works on the
//     stream, returns at once, and the stream's resources are "released
//     automatically once the device has completed all work" in it: a handle
//     the driver gives a new stream finds every event of the old one
//     reached.
//
//   - Host functions. cuLaunchHostFunc: the function "will block work added
//     after it"; "host functions without a mandated order (such as in
//     independent streams) execute in undefined order and may be
//     serialized"; it must make no CUDA call; and "the function will not be
//     called in the event of an error in the CUDA context". So FreeAsync
//     learns of a free by an event recorded after it, as PyTorch's and
//     CuPy's allocators do, not by a host function: one would hold back the
//     stream's later work, wait behind other streams' host functions, and
//     never run after a kernel fault. Only the tests of stream order
//     enqueue one (internal/cudatest), to hold a stream back.
//
//   - Stream capture. During cuStreamBeginCapture, the work pushed into the
//     stream is captured into a graph, not executed; capture may not begin
//     on CU_STREAM_LEGACY; cuStreamEndCapture of a capture not begun in
//     relaxed mode must come from the same thread, and returns no graph if
//     the capture was invalidated (cuStreamBeginCapture, cuStreamEndCapture).
//     cuThreadExchangeStreamCaptureMode: in global mode, while the thread has
//     a capture not begun in relaxed mode, or any thread has one begun in
//     global mode, the thread "is prohibited from potentially unsafe API
//     calls" such as cuMemAlloc; in relaxed mode it is not. cuEventQuery of
//     an event last recorded in a capture fails with CUDA_ERROR_CAPTURED_EVENT
//     (cuda.h). Which calls are "potentially unsafe" the documents do not
//     list beyond cudaMalloc; an H200 (driver 580.159.04, CUDA 13.0)
//     prohibited, from the capturing thread and from another, in global
//     mode, cuMemPoolGetAttribute, cuMemPoolSetAttribute, cuMemPoolTrimTo,
//     cuEventQuery of an event recorded before the capture, cuStreamQuery
//     of another stream, cuMemAlloc and cuMemFree, and cuMemAllocAsync on
//     another stream: each answered 900 (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
//     and the capture's cuStreamEndCapture 901 (invalidated); in relaxed
//     mode each answered 0 and the capture ended with its graph
//     (testdata/fakecuda/RULES.md, "Calls unsafe during a capture").
//     Every call memtrack makes on its own account therefore runs in
//     relaxed mode, inside the one C call of its operation: [Alloc] and
//     [Free], as PyTorch's caching allocator wraps cudaMalloc, the pool's
//     calls ([PoolGet], [PoolResetHighs], [PoolSetReleaseThreshold],
//     [PoolTrimTo], [MemPool]), the event queries of [StreamEvents.Query],
//     [CheckStream] and [CaptureInfo], [EventDestroy], and the virtual
//     memory calls, so that no reading invalidates anyone's capture.
//     [AllocAsync] and [FreeAsync] are the program's calls: their
//     cuMemAllocAsync and cuMemFreeAsync run in the caller's mode, as the
//     program made them, and fail and invalidate where the raw calls
//     would; their own extra calls change nothing of that: the context
//     switch, cuStreamGetCaptureInfo and the event record after a free
//     the probe found allowed, and cuStreamGetCtx memtrack's own
//     allocations in a capture made on the H200 without harm (the graph
//     tests of the root package, which passed there). [AllocAsync] and [FreeAsync] ask cuStreamGetCaptureInfo_v2
//     (cuStreamIsCapturing before CUDA 11.3) and run nothing on a capturing
//     stream, reporting the capture's ID from the same call. The ID is
//     "unique over the lifetime of the process", and valid only while the
//     capture is active (cuStreamGetCaptureInfo); a stream that waits for an
//     event recorded in a capture joins it, capturing into the same graph,
//     and leaves it when the capture ends on its origin stream (CUDA
//     Programming Guide, Cross-stream Dependencies and Events), so it
//     reports the same ID ([CaptureInfo]). An invalid operation during a
//     capture invalidates it, and further use of its streams "will return
//     an error, until stream capture is ended" (Stream Capture:
//     Invalidation): on an NVIDIA H200 (driver 580.159.04) that error,
//     CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, answered cuStreamGetCtx of
//     such a stream, on any thread, in the step that makes the stream's
//     context current of every call of this package, until
//     cuStreamEndCapture answered it too and ended the capture
//     (cuCtxGetCurrent, and cuStreamGetCaptureInfo_v2, which gave the
//     status CU_STREAM_CAPTURE_STATUS_INVALIDATED, answered 0); the calls
//     report such a stream as in an invalidated capture
//     (CaptureInvalidated), not as a failure. A node
//     the driver refuses is not always an invalid operation: the H200
//     refused a second free node of one allocation in one graph with
//     CUDA_ERROR_INVALID_VALUE and kept the capture active, with its ID.
//     [AllocAsyncIn] and [FreeGraph], where the driver refuses the node
//     they add, say whether the capture whose ID they read in the same call
//     is invalidated since (StreamCall.Invalidated), the one way to learn
//     which capture the driver invalidated.
//
//   - Graph memory. On a capturing stream, cuMemAllocAsync and
//     cuMemFreeAsync add allocation and free nodes to the graph; the
//     allocation's address is assigned at once and "remains fixed across
//     instantiations and launches" (cuGraphAddMemAllocNode). An allocation
//     the graph does not free outlives each launch until cuMemFreeAsync,
//     cuMemFree or another graph's free node frees it; a graph exec whose
//     allocation is still live cannot be launched again
//     (CUDA_ERROR_INVALID_VALUE, cuGraphLaunch), and a graph with memory
//     nodes may have one graph exec at a time (cuGraphInstantiateWithFlags;
//     the error is not named, and the H200 answered CUDA_ERROR_NOT_SUPPORTED).
//     Instantiation maps no memory; the first launch, or cuGraphUpload,
//     does (CUDA Programming Guide, Graph Memory Nodes: First Launch /
//     cudaGraphUpload; the H200 reserved 32 MiB at the upload of a 20 MiB
//     graph, nothing at its instantiation). Graphs launched one after
//     another on one stream share their memory; graphs that may run at
//     once, on other streams, need their own, but a graph "whose execution
//     has already finished" lends its memory to a graph of another stream
//     (the H200: 20 MiB on one stream, synchronized, then 20 MiB on
//     another, 32 MiB); "physical pages cannot be reused if they are bound
//     to ... a graph allocation which remains unfreed" (Physical Memory
//     Management and Sharing). Freeing graph allocations does not shrink
//     the memory kept; cuDeviceGraphMemTrim returns what no executing or
//     scheduled graph and no unfreed allocation uses, from graph execs not
//     destroyed too (Physical Memory Footprint; NVIDIA's
//     graphMemoryFootprint sample). cuGraphInstantiateWithFlags,
//     cuGraphExecDestroy and cuStreamSynchronize are "potentially unsafe"
//     during another thread's capture in global mode (the H200 answered
//     them 900 and invalidated that capture), so [GraphChunk] makes every
//     call in relaxed mode. How much a graph reserves the
//     documents do not say; the H200's rule, on graphs of known shapes
//     (driver-costs-and-graph-memory.txt of its run): one graph's memory is
//     its peak footprint rounded up to a chunk of 32 MiB, not each node to
//     the 2 MiB allocation granularity (4 KiB to 32 MiB: 32; 33 to 64: 64;
//     100 nodes of 4 KiB live at once: 32; four of 20 MiB: 96); graphs of
//     28 then 56 MiB on one stream 64; an 8 MiB allocation outliving its
//     launch pins its chunk (32, then 64 with a 12 MiB graph after it, 64
//     still once freed), and every chunk it lies in, the graph laid out in
//     capture order (8 MiB left live after 30 MiB freed: two chunks); a
//     destroyed graph exec's memory stays reserved and mapped (used) until
//     a trim. [GraphChunk] learns the chunk of the
//     driver at hand by a probe graph. The figures
//     ([GraphGet]): USED_MEM_CURRENT, "the amount of physical memory
//     currently mapped by at least one graph", RESERVED_MEM_CURRENT, "the
//     amount of physical memory reserved by the driver for graph
//     allocations", and their high-water marks, which accept 0 alone
//     (cuDeviceSetGraphMemAttribute); graph memory is in no memory pool's
//     attributes ("cudaDeviceGraphMemTrim operates on a different pool from
//     cudaMemPoolTrimTo()"), but it is the process's device memory, which
//     cuMemGetInfo counts. Graph memory nodes need a driver of CUDA 11.4
//     (Support and Compatibility). Whether a reset high-water mark reads 0
//     or the current figure the documents do not say (the H200: the
//     current figure).
//
//   - The legacy default stream waits for the work enqueued before on every
//     blocking stream of its context, and a blocking stream's work waits for
//     the legacy stream's (Stream synchronization behavior;
//     CU_STREAM_NON_BLOCKING streams are exempt).
//
//   - Device identity. cuDeviceGetUuid_v2 returns, for a device in MIG mode,
//     the MIG instance's UUID, which nvidia-smi -L prints as MIG-… (NVIDIA
//     Multi-Instance GPU User Guide).
//
//   - Virtual memory management (CUDA 10.2; [VMM] fails where the driver
//     lacks a call, and [VMMSupported] asks the device:
//     CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED).
//     cuMemAddressReserve reserves address space that "will not have any
//     device or host physical memory associated with it"; cuMemCreate
//     "creates a memory allocation on the target device" with no mapping,
//     its size a multiple of cuMemGetAllocationGranularity's minimum, as
//     are cuMemMap's address and size ([Granularity]); "calling cuMemMap
//     does not make the address accessible": cuMemSetAccess does, and
//     every new mapping "start[s] with no accessibility setup" (CUDA
//     Programming Guide, Virtual Memory Management; the calls' references).
//     cuMemUnmap takes "the entire contiguous address range that was mapped
//     to", never a part of one; the memory is freed once its handle is
//     released (cuMemRelease) and its last mapping unmapped, in either
//     order. Where the reference is silent, an H200 (driver 580.159.04)
//     answered: cuMemMap of a size off the granularity 801
//     (CUDA_ERROR_NOT_SUPPORTED), not 1; cuMemAddressReserve of whole host
//     pages off the granularity (2 MiB + 4 KiB) 1; a cuMemMap running
//     past the end of its reservation 0, mapping it; a cuMemUnmap over two
//     whole mappings and a granule never mapped 0, unmapping both, and
//     over a granule with nothing mapped 0. The driver being no guard of
//     a reservation's bounds, memtrack checks every map and unmap against
//     its own record of the reservation before any driver call
//     (internal/addrspace). So [Map] is cuMemCreate, cuMemMap and cuMemSetAccess in one
//     call, and [Unmap] cuMemUnmap and cuMemRelease, the driver's figures
//     (cuMemGetInfo, NVML's of the process) moving by the size at each.
//     Map undoes its earlier steps where a later one fails, so that a
//     refused map leaves no memory behind; the steps are reported apart
//     ([VMMCall]), so that the caller can name the call that failed. Both
//     run in relaxed stream-capture mode, as [Alloc] does: whether the
//     driver counts them "potentially unsafe" during a capture, as it
//     does cuMemAlloc, the reference does not say. Nor does it say what
//     cuMemAddressFree does with a range still mapped (the guide: "Users
//     must ensure that the entire VA range is unmapped before calling
//     cuMemAddressFree"), or which alignment 0 gives: [AddressReserve] is
//     asked for an explicit alignment, and its caller unmaps first.
package cudadrv
