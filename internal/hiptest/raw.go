//go:build rocm

package hiptest

// The raw pairs: an allocation and its free as a program makes them
// without memtrack, on the calling thread's current device, one cgo call
// per pair, for the tests and benchmarks that put memtrack's pair beside
// the runtime's.

/*
#include <stdint.h>

#include "calls.h"

// hiptest_malloc_free allocates size bytes (hipMalloc) and frees them
// (hipFree), on the current device.
static hipError_t hiptest_malloc_free(size_t size) {
	void *p = NULL;
	hipError_t r = HIPTEST_CALL(hiptest_lib.hipMalloc, &p, size);
	if (r != hipSuccess) return r;
	return HIPTEST_CALL(hiptest_lib.hipFree, p);
}

// hiptest_malloc_free_async allocates size bytes in stream order on
// stream (hipMallocAsync) and frees them there (hipFreeAsync).
static hipError_t hiptest_malloc_free_async(size_t size, uintptr_t stream) {
	void *p = NULL;
	hipError_t r = HIPTEST_CALL(hiptest_lib.hipMallocAsync, &p, size, (hipStream_t)stream);
	if (r != hipSuccess) return r;
	return HIPTEST_CALL(hiptest_lib.hipFreeAsync, p, (hipStream_t)stream);
}
*/
import "C"

import "github.com/memtrack/memtrack/internal/hipdrv"

// MallocFree allocates size bytes on the calling thread's current device
// and frees them (hipMalloc, hipFree): lock the goroutine to its thread,
// with the device current (SetDevice), around it.
func MallocFree(size int64) hipdrv.Result {
	return hipdrv.Result(C.hiptest_malloc_free(C.size_t(size)))
}

// MallocFreeAsync allocates size bytes in stream order on stream and frees
// them in stream order (hipMallocAsync, hipFreeAsync), on the calling
// thread's current device, as MallocFree.
func MallocFreeAsync(size int64, stream uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_malloc_free_async(C.size_t(size), C.uintptr_t(stream)))
}
