//go:build rocm

// calls.h: the runtime calls of the tests (package hiptest), declared as
// internal/hipdrv/runtime.h declares the library's (see there: each line is
// X(name, version, need, parameters)), with the types only they need, from
// hip_runtime_api.h (ROCm 5.2.3).

#ifndef MEMTRACK_HIPTEST_CALLS_H
#define MEMTRACK_HIPTEST_CALLS_H

#include <stdint.h>

#include "../hipdrv/runtime.h"

typedef struct ihipGraph *hipGraph_t;
typedef void (*hipStreamCallback_t)(hipStream_t stream, hipError_t status, void *userData);

// HIPTEST_CALLS lists the calls of the tests that the library does not
// make; those it makes (MEMTRACK_HIP_CALLS) the tests call through a table
// of their own of that list, hiptest_lib.
#define HIPTEST_CALLS(X) \
	X(hipStreamCreate, 401, MEMTRACK_HIP_ESSENTIAL, (hipStream_t *stream)) \
	X(hipStreamDestroy, 401, MEMTRACK_HIP_ESSENTIAL, (hipStream_t stream)) \
	X(hipStreamQuery, 401, MEMTRACK_HIP_ESSENTIAL, (hipStream_t stream)) \
	X(hipStreamAddCallback, 401, MEMTRACK_HIP_ESSENTIAL, (hipStream_t stream, hipStreamCallback_t cb, void *data, unsigned int flags)) \
	X(hipEventSynchronize, 401, MEMTRACK_HIP_ESSENTIAL, (hipEvent_t event)) \
	X(hipDeviceSynchronize, 401, MEMTRACK_HIP_ESSENTIAL, (void)) \
	X(hipStreamBeginCapture, 403, MEMTRACK_HIP_OPTIONAL, (hipStream_t stream, hipStreamCaptureMode mode)) \
	X(hipStreamEndCapture, 403, MEMTRACK_HIP_OPTIONAL, (hipStream_t stream, hipGraph_t *graph)) \
	X(hipGraphDestroy, 403, MEMTRACK_HIP_OPTIONAL, (hipGraph_t graph))

struct hiptest_hip {
	HIPTEST_CALLS(MEMTRACK_HIP_FIELD)
};
extern struct hiptest_hip hiptest_hip;  // the tests' calls
extern struct memtrack_hip hiptest_lib; // the library's, in a table of the tests'

// hiptest_table returns the calls for load.go to fill, and their number in
// *n.
const struct memtrack_hip_entry *hiptest_table(int *n);

// hiptest_handle is what a call that makes something returns: its handle
// (a stream, an event, a device number) and the result.
typedef struct {
	uintptr_t h;
	hipError_t r;
} hiptest_handle;

// HIPTEST_CALL calls f, a call of hiptest_hip or hiptest_lib, or answers
// hipErrorNotSupported where the runtime lacks it (an optional call), or
// before Load.
#define HIPTEST_CALL(f, ...) ((f) ? (f)(__VA_ARGS__) : hipErrorNotSupported)

// hiptest_enter makes device current and returns the device that was in
// *prev; hiptest_leave puts it back.
static inline hipError_t hiptest_enter(int device, int *prev) {
	hipError_t r = HIPTEST_CALL(hiptest_lib.hipGetDevice, prev);
	return r == hipSuccess && *prev != device ? HIPTEST_CALL(hiptest_lib.hipSetDevice, device) : r;
}

static inline hipError_t hiptest_leave(int device, int prev) {
	return prev == device ? hipSuccess : HIPTEST_CALL(hiptest_lib.hipSetDevice, prev);
}

#endif
