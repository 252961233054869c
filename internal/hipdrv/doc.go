// Package hipdrv is memtrack's binding of AMD's HIP runtime (libamdhip64,
// built with -tags rocm). Each operation is one C function, so one cgo
// transition: it makes the device it needs current on the calling thread,
// runs the operation and puts the thread's previous device back, and
// reports the results of the three steps apart (Call), so that the
// operation's own result decides what memtrack reports. A device is its
// HIP ordinal; there is no context to hold.
//
// # The runtime, loaded at run time
//
// Nothing here needs AMD's headers or libamdhip64 to build: runtime.h
// declares the few types, values and calls used, and the binary carries no
// NEEDED AMD library, so it starts on a machine without ROCm. [Load] opens
// the first of [Libraries] that loads (libamdhip64.so.7, .so.6 and .so.5,
// the names ROCm 7, 6 and 5 install, then libamdhip64.so; dlopen,
// RTLD_NOW | RTLD_LOCAL), asks its version (hipRuntimeGetVersion, in
// hip_version.h's encoding, major*10000000 + minor*100000 + patch), and
// fills a table of function pointers, one line of runtime.h per call (its
// name, the first ROCm release that exports it, written as
// hipGetProcAddress takes versions, 100*major + minor, and the prototype):
// by hipGetProcAddress on a runtime of ROCm 6.2 or later, by dlsym before
// (loader.c cites the rules). hipGetProcAddress initialises the runtime,
// as "Most HIP APIs" do (hipInit), so where the runtime cannot initialise,
// on a machine without a GPU, the calls are found by dlsym, and
// [Runtime].ResolverNote says why. A call through the table costs what the
// direct call of a linked binary costs: one indirect call. Without a
// library, or without a call every operation needs, Load says why
// ([*LoadError]: each name tried, with the dynamic loader's reason) and
// nothing else may be called; without an optional call, what needs it is
// off and says so ([MemPools], [UUIDs], [GraphMem], [Captures],
// [StreamDevices]), naming the call and the release it came in
// ([*MissingError]). [Calls] lists the table, with what the runtime
// loaded has. [Fill] fills a table of one's own the same way
// (internal/hiptest's).
//
// Against AMD's own runtime of ROCm 5.2.3 (Debian's libamdhip64-5, on a
// machine without an AMD GPU), every call of the table resolves but the
// three of graph memory (ROCm 5.3) and hipStreamGetDevice (ROCm 5.6), as
// the table says; hipInit answers hipErrorInvalidDevice and
// hipGetDeviceCount hipErrorNoDevice, and hipGetErrorString gives the
// name again (scripts/test-rocm.sh prints them).
//
// # The runtime rules it relies on
//
// Each rule below is the runtime's documented behaviour, with the comment
// of hip_runtime_api.h (ROCm 5.2.3, as Debian's libamdhip64-dev ships it,
// or the ROCm release named) that states it; the HIP runtime API reference
// (rocm.docs.amd.com/projects/HIP) has the same text. The fake runtime of
// testdata/fakehip follows the same rules (its RULES.md), and the tests of
// this package check them against it.
//
//   - The current device. "HIP maintains an default device for each thread
//     using thread-local-storage. This device is used implicitly for HIP
//     runtime APIs called by this thread" (hipGetDevice); "Thread-pool
//     implementations may inherit the default device of the previous
//     thread" (hipSetDevice). So each operation sets the device it names
//     and puts back the one it found, in the same C call.
//
//   - Initialisation. "Most HIP APIs implicitly initialize the HIP
//     runtime" (hipInit); hipGetDeviceCount returns hipErrorNoDevice where
//     there is no device. What hipInit returns on a machine without a GPU
//     the reference does not say: AMD's runtime answers
//     hipErrorInvalidDevice, and so does every call that initialises, which
//     is why [Init] asks both calls and reports both answers.
//
//   - Memory. hipMalloc: "If size is 0, no memory is allocated, *ptr returns
//     nullptr, and hipSuccess is returned"; out of memory is
//     hipErrorOutOfMemory (hipErrorMemoryAllocation, the same value, in
//     older headers). hipFree "performs an implicit hipDeviceSynchronize()
//     call" (ROCm 7 drops that wait for stream-ordered allocations).
//     hipMemGetInfo: ROCm 6.x's reference says it "gets the actual free
//     memory left on the current device, so supports the cases while
//     running multi-workload (such as multiple processes...)"; ROCm 5.x's
//     header warned that "the free memory only accounts for memory
//     allocated by this process and may be optimistic". [Alloc] and [Free]
//     run in relaxed stream-capture mode where the runtime has
//     hipThreadExchangeStreamCaptureMode (ROCm 5.2).
//
//   - Stream-ordered allocation. hipMallocAsync: "The allocation comes from
//     the memory pool associated with the stream's device"; whether a
//     device has pools, hipDeviceAttributeMemoryPoolsSupported says.
//     hipFreeAsync "Inserts a free operation into stream": when the free's
//     bytes leave hipMemPoolAttrUsedMemCurrent, the reference does not say.
//     The release threshold: "When more than the release threshold bytes of
//     memory are held by the memory pool, the allocator will try to release
//     memory back to the OS on the next call to stream, event or context
//     synchronize. (default 0)". hipMemPoolTrimTo "cannot release OS
//     allocations that back outstanding asynchronous allocations", and
//     "Allocations that have been asynchronously freed but whose completion
//     has not been observed on the host (eg. by a synchronize) can count as
//     outstanding". The high watermarks: "High watermark can only be reset
//     to zero"; what they read then, the reference does not say.
//
//   - Events. hipEventRecord "Captures in event the contents of stream at
//     the time of this call"; hipEventQuery returns hipSuccess "if all
//     commands in the appropriate stream (specified to hipEventRecord())
//     have completed", hipErrorNotReady otherwise, and hipSuccess for an
//     event never recorded. So of two events of one stream, the later's
//     work holds the earlier's: [StreamEvents.Query] asks each stream for
//     its newest event first and bisects only where it is not reached. A
//     stream's host callback "will block later work in the stream until it
//     is finished" (hipStreamAddCallback): [FreeAsync] learns of a free by
//     an event recorded after it, never by a callback that would hold the
//     stream back.
//
//   - Stream capture. hipStreamGetCaptureInfo (ROCm 5.1) gives a stream's
//     capture status and the capture's "unique ID"; hipStreamIsCapturing
//     (ROCm 4.3) the status alone. A stream-ordered call on a capturing
//     stream would add a node to the capture's graph ("During stream
//     capture, this function results in the creation of an allocation
//     node", hipMallocAsync): [AllocAsync] and [FreeAsync] run nothing on
//     such a stream, and say which capture it is.
//
//   - Streams of other devices. hipStreamGetDevice (ROCm 5.6) tells a
//     stream's device; an operation given a stream of another device than
//     the one it names does nothing. Before ROCm 5.6 the runtime cannot
//     say, and the operation runs on the stream.
//
//   - Graph memory. hipDeviceGetGraphMemAttribute (ROCm 5.3):
//     hipGraphMemAttrUsedMemCurrent, "Amount of memory, in bytes, currently
//     associated with graphs", hipGraphMemAttrReservedMemCurrent, "Amount
//     of memory, in bytes, currently allocated for graphs", and their high
//     watermarks; hipDeviceGraphMemTrim frees "unused memory on specific
//     device used for graph back to OS".
//
//   - Device identity. hipDeviceGetPCIBusId gives the device's PCI
//     address, which AMD's runtime writes as "%04x:%02x:%02x.%01x"
//     (domain:bus:device.function, the form CUDA's reference states for
//     cudaDeviceGetPCIBusId); the SMI library's BDF identifier holds the
//     same four numbers (internal/rocmsmi). hipDeviceGetUuid (ROCm 5.2,
//     "[BETA]") fills its 16 bytes, in AMD's runtime, with the characters
//     of the device's unique ID, which rocm-smi prints after "GPU-".
//     HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES renumber HIP's ordinals,
//     so a device is matched to the SMI library by its PCI address, never
//     by its ordinal.
package hipdrv
