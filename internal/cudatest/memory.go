//go:build cuda

package cudatest

// The raw synchronous calls, in the current context and the thread's own
// stream capture mode.

/*
#include <stdint.h>

#include "calls.h"

static cudatest_handle cudatest_mem_alloc(size_t size) {
	CUdeviceptr p = 0;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuMemAlloc, &p, size);
	return (cudatest_handle){(uintptr_t)p, r};
}

static CUresult cudatest_mem_free(uintptr_t p) { return CUDATEST_CALL(cudatest_lib.cuMemFree, (CUdeviceptr)p); }
*/
import "C"

import "github.com/memtrack/memtrack/internal/cudadrv"

// MemAlloc allocates size bytes in the current context (cuMemAlloc), in the
// calling thread's own stream capture mode.
func MemAlloc(size int64) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_mem_alloc(C.size_t(size)))
}

// MemFree frees what MemAlloc allocated (cuMemFree).
func MemFree(ptr uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_mem_free(C.uintptr_t(ptr)))
}
