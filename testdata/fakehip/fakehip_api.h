// fakehip_api.h: AMD's HIP runtime API as the fake implements it:
// hip_runtime_api.h (ROCm 5.2.3, from Debian's libamdhip64-dev, which
// scripts/test-rocm.sh fetches), so that the compiler checks every
// signature the header declares against AMD's, and, for the calls that
// ROCm 5.2's header does not declare, their declarations as the later
// headers and AMD's HIP runtime API reference give them (one place, each
// cited). FAKEHIP_ABI (100*major + minor, a compile-time switch) is the
// ROCm release the build is a runtime of: a call that release does not
// export is not compiled in, so that dlsym finds none, as in AMD's
// library of that release.
#ifndef MEMTRACK_FAKEHIP_API_H
#define MEMTRACK_FAKEHIP_API_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

#include <stdint.h>

#ifndef FAKEHIP_ABI
#define FAKEHIP_ABI 604
#endif

#define FAKEHIP_HEADER (HIP_VERSION_MAJOR * 100 + HIP_VERSION_MINOR)

#if FAKEHIP_HEADER < 503
// ROCm 5.3's hip_runtime_api.h: hipGraphMemAttributeType ("Amount of
// memory, in bytes, currently associated with graphs", its high watermark,
// "Amount of memory, in bytes, currently allocated for graphs", its high
// watermark) and the three calls of graph memory.
typedef enum hipGraphMemAttributeType {
	hipGraphMemAttrUsedMemCurrent = 0,
	hipGraphMemAttrUsedMemHigh,
	hipGraphMemAttrReservedMemCurrent,
	hipGraphMemAttrReservedMemHigh,
} hipGraphMemAttributeType;
hipError_t hipDeviceGetGraphMemAttribute(int device, hipGraphMemAttributeType attr, void *value);
hipError_t hipDeviceSetGraphMemAttribute(int device, hipGraphMemAttributeType attr, void *value);
hipError_t hipDeviceGraphMemTrim(int device);
#endif

#if FAKEHIP_HEADER < 506
// ROCm 5.6's: "Get the device assocaited with the stream".
hipError_t hipStreamGetDevice(hipStream_t stream, hipDevice_t *device);
#endif

#if FAKEHIP_HEADER < 602
// ROCm 6.2's (hip_runtime_api.h of ROCm 6.2): hipGetProcAddress and its
// symbolStatus.
typedef enum hipDriverProcAddressQueryResult {
	HIP_GET_PROC_ADDRESS_SUCCESS = 0,
	HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
	HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} hipDriverProcAddressQueryResult;
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
			     hipDriverProcAddressQueryResult *symbolStatus);
#endif

// hipGetProcAddress's flags (the current header, hipfort's constants):
// "Currently only default flag is supported".
#define FAKEHIP_PROC_DEFAULT 0
#define FAKEHIP_PROC_LEGACY_STREAM 1
#define FAKEHIP_PROC_PER_THREAD_STREAM 2

// hipStreamLegacy, which ROCm 6.2's header defines; ROCm 5.2's names the
// legacy stream only in comments.
#define FAKEHIP_STREAM_LEGACY ((hipStream_t)1)

// From fakehip.c, for fakehip_stream.c and fakehip_proc.c.
hipError_t fakehip_enter(const char *fn);        // counts, gates and injects faults
hipError_t fakehip_ready(const char *fn);        // fakehip_enter, then the runtime initialised
int fakehip_current_device(void);               // the calling thread's device
int fakehip_devices(void);                       // FAKEHIP_DEVICES
hipError_t fakehip_charge(int dev, size_t n);    // take device memory, or hipErrorOutOfMemory
void fakehip_uncharge(int dev, size_t n);        // give it back
void fakehip_note_queue(int dev);                // the process has a queue on dev
uintptr_t fakehip_address(size_t n);             // a fresh device address range of n bytes
int fakehip_version(void);                       // what hipRuntimeGetVersion answers
int fakehip_api(void);                           // the same, as 100*major + minor

// From fakehip_stream.c, for fakehip.c.
void fakehip_stream_configure(void);
hipError_t fakehip_sync_device(int dev);         // every stream of dev, as hipDeviceSynchronize
hipError_t fakehip_pool_free_now(uintptr_t ptr); // hipFree of a stream-ordered allocation

// From fakehip_proc.c, for fakehip.c.
void fakehip_proc_configure(void);
void fakehip_absent(const char *fn);             // aborts where the runtime configured has no fn
extern int fakehip_gated;                        // some call is absent: fakehip_absent must be asked

#endif
