//go:build rocm

// runtime.h: the part of the HIP runtime's ABI that memtrack uses, declared
// here so that nothing needs AMD's headers to build: the types, the values
// of the enumerations used, and every call as a line of a table of function
// pointers that loader.c fills at run time (dlopen of libamdhip64, then
// hipGetProcAddress or dlsym). Each value is that of hip_runtime_api.h
// (ROCm 5.2.3, as Debian's libamdhip64-dev ships it; the same in the
// headers of ROCm 5.3 to 6.2 and the current one). Each call's version is
// the first ROCm release whose libamdhip64 exports it, found in the symbol
// map the runtime is linked with (hip_hcc.map.in of ROCm's HIP, hipamd and
// clr repositories at each release tag), written as hipGetProcAddress
// takes a version: 100*major + minor. 401 stands for "exported by ROCm
// 4.1", the oldest release checked. The map's own version node can be older
// than the release that first shipped the call (hipMallocAsync's node is
// hip_5.1, but ROCm 5.1's map has no hipMallocAsync): the table gives the
// release.

#ifndef MEMTRACK_HIPDRV_RUNTIME_H
#define MEMTRACK_HIPDRV_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

// ---- types (hip_runtime_api.h, 64-bit platforms)

typedef int hipError_t;                // enum hipError_t
typedef int hipDeviceAttribute_t;      // enum hipDeviceAttribute_t
typedef int hipMemPoolAttr;            // enum hipMemPoolAttr
typedef int hipGraphMemAttributeType;  // enum hipGraphMemAttributeType (ROCm 5.3)
typedef int hipStreamCaptureStatus;    // enum hipStreamCaptureStatus
typedef int hipStreamCaptureMode;      // enum hipStreamCaptureMode
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipMemPoolHandle_t *hipMemPool_t;
typedef struct hipUUID_t {
	char bytes[16];
} hipUUID;

// ---- values (hip_runtime_api.h)

enum {
	hipSuccess = 0,
	hipErrorInvalidValue = 1,
	hipErrorOutOfMemory = 2,
	hipErrorNoDevice = 100,
	hipErrorInvalidDevice = 101,
	hipErrorNotReady = 600,
	hipErrorNotSupported = 801,
	hipErrorStreamCaptureUnsupported = 900,
	hipErrorStreamCaptureWrongThread = 908,

	hipEventDisableTiming = 0x2, // hipEventCreateWithFlags

	hipStreamCaptureStatusNone = 0, // hipStreamCaptureStatus
	hipStreamCaptureStatusActive = 1,
	hipStreamCaptureStatusInvalidated = 2,

	hipStreamCaptureModeGlobal = 0, // hipStreamCaptureMode
	hipStreamCaptureModeThreadLocal = 1,
	hipStreamCaptureModeRelaxed = 2,

	// hipDeviceAttribute_t: the 89th of the enumeration, numbered by its
	// place (the same in ROCm 5.2.3 to the current header).
	hipDeviceAttributeMemoryPoolsSupported = 88,

	hipMemPoolAttrReleaseThreshold = 0x4, // hipMemPoolAttr
	hipMemPoolAttrReservedMemCurrent = 0x5,
	hipMemPoolAttrReservedMemHigh = 0x6,
	hipMemPoolAttrUsedMemCurrent = 0x7,
	hipMemPoolAttrUsedMemHigh = 0x8,

	hipGraphMemAttrUsedMemCurrent = 0, // hipGraphMemAttributeType
	hipGraphMemAttrUsedMemHigh = 1,
	hipGraphMemAttrReservedMemCurrent = 2,
	hipGraphMemAttrReservedMemHigh = 3,

	// hipGetProcAddress (ROCm 6.2): its flags and symbolStatus.
	HIP_GET_PROC_ADDRESS_DEFAULT = 0,
	HIP_GET_PROC_ADDRESS_SUCCESS = 0,
	HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
	HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

// The handle of the calling thread's per-thread default stream
// (hipStreamPerThread); NULL is the device's null stream.
#define MEMTRACK_HIP_STREAM_PER_THREAD ((hipStream_t)0x2)

// ---- the calls

// MEMTRACK_HIP_ESSENTIAL marks a call without which the backend is
// unavailable; MEMTRACK_HIP_OPTIONAL one whose absence turns a feature off.
enum { MEMTRACK_HIP_ESSENTIAL = 1, MEMTRACK_HIP_OPTIONAL = 0 };

// MEMTRACK_HIP_CALLS lists the runtime calls of package hipdrv, one line
// each:
//
//	X(name, version, need, parameters)
//
// name is the symbol, which dlsym and hipGetProcAddress both take; version
// the first ROCm release that exports it (100*major + minor), also the
// version hipGetProcAddress is asked at; need MEMTRACK_HIP_ESSENTIAL or
// MEMTRACK_HIP_OPTIONAL; parameters the C prototype's parameter list.
// Every call returns hipError_t but the two error-name calls, which
// loader.c declares apart. Adding a call is adding a line.
#define MEMTRACK_HIP_CALLS(X) \
	X(hipInit, 401, MEMTRACK_HIP_ESSENTIAL, (unsigned int flags)) \
	X(hipGetDeviceCount, 401, MEMTRACK_HIP_ESSENTIAL, (int *count)) \
	X(hipGetDevice, 401, MEMTRACK_HIP_ESSENTIAL, (int *device)) \
	X(hipSetDevice, 401, MEMTRACK_HIP_ESSENTIAL, (int device)) \
	X(hipDeviceGetName, 401, MEMTRACK_HIP_ESSENTIAL, (char *name, int len, int device)) \
	X(hipDeviceGetPCIBusId, 401, MEMTRACK_HIP_ESSENTIAL, (char *busId, int len, int device)) \
	X(hipDeviceGetAttribute, 401, MEMTRACK_HIP_ESSENTIAL, (int *value, hipDeviceAttribute_t attr, int device)) \
	X(hipMalloc, 401, MEMTRACK_HIP_ESSENTIAL, (void **ptr, size_t size)) \
	X(hipFree, 401, MEMTRACK_HIP_ESSENTIAL, (void *ptr)) \
	X(hipMemGetInfo, 401, MEMTRACK_HIP_ESSENTIAL, (size_t *free, size_t *total)) \
	X(hipStreamSynchronize, 401, MEMTRACK_HIP_ESSENTIAL, (hipStream_t stream)) \
	X(hipEventCreateWithFlags, 401, MEMTRACK_HIP_ESSENTIAL, (hipEvent_t *event, unsigned int flags)) \
	X(hipEventRecord, 401, MEMTRACK_HIP_ESSENTIAL, (hipEvent_t event, hipStream_t stream)) \
	X(hipEventQuery, 401, MEMTRACK_HIP_ESSENTIAL, (hipEvent_t event)) \
	X(hipEventDestroy, 401, MEMTRACK_HIP_ESSENTIAL, (hipEvent_t event)) \
	X(hipStreamIsCapturing, 403, MEMTRACK_HIP_OPTIONAL, (hipStream_t stream, hipStreamCaptureStatus *status)) \
	X(hipStreamGetCaptureInfo, 501, MEMTRACK_HIP_OPTIONAL, (hipStream_t stream, hipStreamCaptureStatus *status, \
		unsigned long long *id)) \
	X(hipDeviceGetUuid, 502, MEMTRACK_HIP_OPTIONAL, (hipUUID *uuid, int device)) \
	X(hipThreadExchangeStreamCaptureMode, 502, MEMTRACK_HIP_OPTIONAL, (hipStreamCaptureMode *mode)) \
	X(hipMallocAsync, 502, MEMTRACK_HIP_OPTIONAL, (void **ptr, size_t size, hipStream_t stream)) \
	X(hipFreeAsync, 502, MEMTRACK_HIP_OPTIONAL, (void *ptr, hipStream_t stream)) \
	X(hipDeviceGetMemPool, 502, MEMTRACK_HIP_OPTIONAL, (hipMemPool_t *pool, int device)) \
	X(hipMemPoolGetAttribute, 502, MEMTRACK_HIP_OPTIONAL, (hipMemPool_t pool, hipMemPoolAttr attr, void *value)) \
	X(hipMemPoolSetAttribute, 502, MEMTRACK_HIP_OPTIONAL, (hipMemPool_t pool, hipMemPoolAttr attr, void *value)) \
	X(hipMemPoolTrimTo, 502, MEMTRACK_HIP_OPTIONAL, (hipMemPool_t pool, size_t keep)) \
	X(hipDeviceGetGraphMemAttribute, 503, MEMTRACK_HIP_OPTIONAL, (int device, hipGraphMemAttributeType attr, void *value)) \
	X(hipDeviceSetGraphMemAttribute, 503, MEMTRACK_HIP_OPTIONAL, (int device, hipGraphMemAttributeType attr, void *value)) \
	X(hipDeviceGraphMemTrim, 503, MEMTRACK_HIP_OPTIONAL, (int device)) \
	X(hipStreamGetDevice, 506, MEMTRACK_HIP_OPTIONAL, (hipStream_t stream, int *device))

// MEMTRACK_HIP_FIELD declares a call of a list as a field of a table.
#define MEMTRACK_HIP_FIELD(name, version, need, params) hipError_t (*name) params;

// memtrack_hip_entry describes a call of a list, for the loader: its name,
// version and need, and the table's field it fills. A table of one's own
// (internal/hiptest's) defines MEMTRACK_HIP_TABLE as its variable and
// expands its list with MEMTRACK_HIP_ENTRY.
struct memtrack_hip_entry {
	const char *name;
	int version; // 100*major + minor
	int need;    // MEMTRACK_HIP_ESSENTIAL or MEMTRACK_HIP_OPTIONAL
	void **slot; // the table's function pointer
};

#define MEMTRACK_HIP_ENTRY(name, version, need, params) {#name, version, need, (void **)&MEMTRACK_HIP_TABLE.name},

// memtrack_hip is the runtime as package hipdrv calls it; loader.c fills it
// once, before the first call. The error-name calls return a string.
struct memtrack_hip {
	MEMTRACK_HIP_CALLS(MEMTRACK_HIP_FIELD)
	const char *(*hipGetErrorName)(hipError_t error);
	const char *(*hipGetErrorString)(hipError_t error);
};
extern struct memtrack_hip memtrack_hip;

#endif
