//go:build cuda

// driver.h: the part of the CUDA driver's ABI that memtrack uses, declared
// here so that nothing needs cuda.h to build: the types, the values of the
// enumerations used, and every call as a line of a table of function
// pointers that loader.c fills at run time (dlopen of libcuda.so.1, then
// cuGetProcAddress). Each value is cuda.h's (CUDA 11.8; unchanged in 12.x),
// and each call's CUDA version is that of its PFN_<name>_v<version> typedef
// in cudaTypedefs.h: the version that introduced the variant whose
// signature is declared here.

#ifndef MEMTRACK_CUDADRV_DRIVER_H
#define MEMTRACK_CUDADRV_DRIVER_H

#include <stddef.h>
#include <stdint.h>

// ---- types (cuda.h, 64-bit platforms)

typedef int CUresult;                   // enum cudaError_enum
typedef int CUdevice;                   // CUdevice_v1
typedef unsigned long long CUdeviceptr; // CUdeviceptr_v2
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;
typedef int CUdevice_attribute;    // enum CUdevice_attribute_enum
typedef int CUmemPool_attribute;   // enum CUmemPool_attribute_enum
typedef int CUstreamCaptureMode;   // enum CUstreamCaptureMode_enum
typedef int CUstreamCaptureStatus; // enum CUstreamCaptureStatus_enum
typedef int CUgraphMem_attribute;  // enum CUgraphMem_attribute_enum
typedef unsigned long long CUmemGenericAllocationHandle; // CUmemGenericAllocationHandle_v1
typedef int CUmemAllocationGranularity_flags;            // enum CUmemAllocationGranularity_flags_enum

// CUmemLocation_v1: where memory is, or who accesses it.
typedef struct CUmemLocation_st {
	int type; // CUmemLocationType
	int id;   // a device ordinal, for CU_MEM_LOCATION_TYPE_DEVICE
} CUmemLocation;

// CUmemAllocationProp_v1: the memory cuMemCreate makes.
typedef struct CUmemAllocationProp_st {
	int type;                 // CUmemAllocationType
	int requestedHandleTypes; // CUmemAllocationHandleType
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

// CUmemPoolProps_v1: the memory pool cuMemPoolCreate makes. CUDA 12's
// cuda.h gives 8 of the reserved bytes to maxSize and 2 to usage, which 0
// leaves at their defaults (no limit, no usage).
typedef struct CUmemPoolProps_st {
	int allocType;   // CUmemAllocationType
	int handleTypes; // CUmemAllocationHandleType
	CUmemLocation location;
	void *win32SecurityAttributes;
	unsigned char reserved[64];
} CUmemPoolProps;

// CUmemAccessDesc_v1: the access of a location to a mapping (cuMemSetAccess).
typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	int flags; // CUmemAccess_flags
} CUmemAccessDesc;

// ---- values (cuda.h)

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
	CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
	CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,

	CU_EVENT_DISABLE_TIMING = 0x2, // CUevent_flags
	CU_STREAM_NON_BLOCKING = 0x1,  // CUstream_flags

	CU_STREAM_CAPTURE_STATUS_NONE = 0, // CUstreamCaptureStatus
	CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
	CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,

	CU_STREAM_CAPTURE_MODE_GLOBAL = 0, // CUstreamCaptureMode
	CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
	CU_STREAM_CAPTURE_MODE_RELAXED = 2,

	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102, // CUdevice_attribute
	CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,

	CU_MEM_ALLOCATION_TYPE_PINNED = 1, // CUmemAllocationType
	CU_MEM_LOCATION_TYPE_DEVICE = 1,   // CUmemLocationType
	CU_MEM_HANDLE_TYPE_NONE = 0,       // CUmemAllocationHandleType
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0, // CUmemAccess_flags
	CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, // CUmemAllocationGranularity_flags
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,

	CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4, // CUmemPool_attribute
	CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
	CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
	CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
	CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,

	CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0, // CUgraphMem_attribute
	CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
	CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
	CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3,
};

// The handles of the default streams (cuda.h's CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD; NULL is the legacy one too).
#define MEMTRACK_STREAM_LEGACY ((CUstream)0x1)
#define MEMTRACK_STREAM_PER_THREAD ((CUstream)0x2)

// ---- the calls

// MEMTRACK_ESSENTIAL marks a call without which the backend is unavailable;
// MEMTRACK_OPTIONAL one whose absence turns a feature off (ErrNotSupported).
enum { MEMTRACK_ESSENTIAL = 1, MEMTRACK_OPTIONAL = 0 };

// MEMTRACK_CUDA_CALLS lists the driver calls of package cudadrv, one line
// each:
//
//	X(name, suffix, version, need, parameters)
//
// name is the base name cuGetProcAddress takes; suffix the ending of the
// versioned name the library exports ("_v2"), which dlsym needs on a driver
// older than CUDA 11.3; version the CUDA version (1000*major + 10*minor) of
// the signature declared; need MEMTRACK_ESSENTIAL or MEMTRACK_OPTIONAL;
// parameters the C prototype's parameter list. Every call returns CUresult.
// Adding a call is adding a line: loader.c fills it, and the C helpers call
// it as memtrack_cu.name(...).
#define MEMTRACK_CUDA_CALLS(X) \
	X(cuInit, , 2000, MEMTRACK_ESSENTIAL, (unsigned int flags)) \
	X(cuGetErrorName, , 6000, MEMTRACK_ESSENTIAL, (CUresult error, const char **str)) \
	X(cuGetErrorString, , 6000, MEMTRACK_ESSENTIAL, (CUresult error, const char **str)) \
	X(cuDeviceGetCount, , 2000, MEMTRACK_ESSENTIAL, (int *count)) \
	X(cuDeviceGet, , 2000, MEMTRACK_ESSENTIAL, (CUdevice *device, int ordinal)) \
	X(cuDeviceGetName, , 2000, MEMTRACK_ESSENTIAL, (char *name, int len, CUdevice dev)) \
	X(cuDeviceGetAttribute, , 2000, MEMTRACK_ESSENTIAL, (int *value, CUdevice_attribute attrib, CUdevice dev)) \
	X(cuDeviceGetUuid, _v2, 11040, MEMTRACK_OPTIONAL, (CUuuid *uuid, CUdevice dev)) \
	X(cuDevicePrimaryCtxRetain, , 7000, MEMTRACK_ESSENTIAL, (CUcontext *ctx, CUdevice dev)) \
	X(cuCtxGetCurrent, , 4000, MEMTRACK_ESSENTIAL, (CUcontext *ctx)) \
	X(cuCtxSetCurrent, , 4000, MEMTRACK_ESSENTIAL, (CUcontext ctx)) \
	X(cuCtxGetDevice, , 2000, MEMTRACK_ESSENTIAL, (CUdevice *device)) \
	X(cuThreadExchangeStreamCaptureMode, , 10010, MEMTRACK_ESSENTIAL, (CUstreamCaptureMode *mode)) \
	X(cuMemAlloc, _v2, 3020, MEMTRACK_ESSENTIAL, (CUdeviceptr *ptr, size_t size)) \
	X(cuMemFree, _v2, 3020, MEMTRACK_ESSENTIAL, (CUdeviceptr ptr)) \
	X(cuMemGetInfo, _v2, 3020, MEMTRACK_ESSENTIAL, (size_t *free, size_t *total)) \
	X(cuStreamGetCtx, , 9020, MEMTRACK_ESSENTIAL, (CUstream stream, CUcontext *ctx)) \
	X(cuStreamIsCapturing, , 10000, MEMTRACK_ESSENTIAL, (CUstream stream, CUstreamCaptureStatus *status)) \
	X(cuStreamSynchronize, , 2000, MEMTRACK_ESSENTIAL, (CUstream stream)) \
	X(cuStreamCreate, , 2000, MEMTRACK_OPTIONAL, (CUstream *stream, unsigned int flags)) \
	X(cuStreamDestroy, _v2, 4000, MEMTRACK_OPTIONAL, (CUstream stream)) \
	X(cuStreamBeginCapture, _v2, 10010, MEMTRACK_OPTIONAL, (CUstream stream, CUstreamCaptureMode mode)) \
	X(cuStreamEndCapture, , 10000, MEMTRACK_OPTIONAL, (CUstream stream, CUgraph *graph)) \
	X(cuGraphDestroy, , 10000, MEMTRACK_OPTIONAL, (CUgraph graph)) \
	X(cuGraphExecDestroy, , 10000, MEMTRACK_OPTIONAL, (CUgraphExec exec)) \
	X(cuGraphUpload, , 11010, MEMTRACK_OPTIONAL, (CUgraphExec exec, CUstream stream)) \
	X(cuGraphInstantiateWithFlags, , 11040, MEMTRACK_OPTIONAL, (CUgraphExec *exec, CUgraph graph, unsigned long long flags)) \
	X(cuStreamWaitEvent, , 3020, MEMTRACK_ESSENTIAL, (CUstream stream, CUevent event, unsigned int flags)) \
	X(cuEventCreate, , 2000, MEMTRACK_ESSENTIAL, (CUevent *event, unsigned int flags)) \
	X(cuEventRecord, , 2000, MEMTRACK_ESSENTIAL, (CUevent event, CUstream stream)) \
	X(cuEventQuery, , 2000, MEMTRACK_ESSENTIAL, (CUevent event)) \
	X(cuEventDestroy, _v2, 4000, MEMTRACK_ESSENTIAL, (CUevent event)) \
	X(cuMemAllocAsync, , 11020, MEMTRACK_OPTIONAL, (CUdeviceptr *ptr, size_t size, CUstream stream)) \
	X(cuMemFreeAsync, , 11020, MEMTRACK_OPTIONAL, (CUdeviceptr ptr, CUstream stream)) \
	X(cuDeviceGetMemPool, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool *pool, CUdevice dev)) \
	X(cuMemPoolGetAttribute, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool pool, CUmemPool_attribute attr, void *value)) \
	X(cuMemPoolSetAttribute, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool pool, CUmemPool_attribute attr, void *value)) \
	X(cuMemPoolTrimTo, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool pool, size_t keep)) \
	X(cuMemPoolCreate, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool *pool, const CUmemPoolProps *props)) \
	X(cuMemPoolDestroy, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool pool)) \
	X(cuMemAllocFromPoolAsync, , 11020, MEMTRACK_OPTIONAL, (CUdeviceptr *ptr, size_t size, CUmemoryPool pool, CUstream stream)) \
	X(cuStreamGetCaptureInfo, _v2, 11030, MEMTRACK_OPTIONAL, (CUstream stream, CUstreamCaptureStatus *status, \
		cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)) \
	X(cuDeviceGetGraphMemAttribute, , 11040, MEMTRACK_OPTIONAL, (CUdevice dev, CUgraphMem_attribute attr, void *value)) \
	X(cuDeviceSetGraphMemAttribute, , 11040, MEMTRACK_OPTIONAL, (CUdevice dev, CUgraphMem_attribute attr, void *value)) \
	X(cuDeviceGraphMemTrim, , 11040, MEMTRACK_OPTIONAL, (CUdevice dev)) \
	X(cuMemGetAllocationGranularity, , 10020, MEMTRACK_OPTIONAL, (size_t *granularity, const CUmemAllocationProp *prop, \
		CUmemAllocationGranularity_flags option)) \
	X(cuMemAddressReserve, , 10020, MEMTRACK_OPTIONAL, (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, \
		unsigned long long flags)) \
	X(cuMemAddressFree, , 10020, MEMTRACK_OPTIONAL, (CUdeviceptr ptr, size_t size)) \
	X(cuMemCreate, , 10020, MEMTRACK_OPTIONAL, (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, \
		unsigned long long flags)) \
	X(cuMemRelease, , 10020, MEMTRACK_OPTIONAL, (CUmemGenericAllocationHandle handle)) \
	X(cuMemMap, , 10020, MEMTRACK_OPTIONAL, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, \
		unsigned long long flags)) \
	X(cuMemUnmap, , 10020, MEMTRACK_OPTIONAL, (CUdeviceptr ptr, size_t size)) \
	X(cuMemSetAccess, , 10020, MEMTRACK_OPTIONAL, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))

// MEMTRACK_CUDA_FIELD declares a call of a list as a field of a table.
#define MEMTRACK_CUDA_FIELD(name, suffix, version, need, params) CUresult (*name) params;

// memtrack_cuda_entry describes a call of a list, for the loader: the
// names, the version and the table's field it fills. A table of one's own
// (internal/cudatest) defines MEMTRACK_CUDA_TABLE as its variable and
// expands its list with MEMTRACK_CUDA_ENTRY.
struct memtrack_cuda_entry {
	const char *name;   // the base name
	const char *suffix; // the versioned name's ending, or ""
	int version;        // the CUDA version of the signature
	int need;           // MEMTRACK_ESSENTIAL or MEMTRACK_OPTIONAL
	void **slot;        // the table's function pointer
};

#define MEMTRACK_CUDA_ENTRY(name, suffix, version, need, params) \
	{#name, #suffix, version, need, (void **)&MEMTRACK_CUDA_TABLE.name},

// memtrack_cu is the driver as package cudadrv calls it; loader.c fills it
// once, before the first call.
struct memtrack_cuda {
	MEMTRACK_CUDA_CALLS(MEMTRACK_CUDA_FIELD)
};
extern struct memtrack_cuda memtrack_cu;

#endif
