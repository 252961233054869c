//go:build cuda

package cudatest

// Contexts: the calling thread's current one, contexts of one's own.

/*
#include <stdint.h>

#include "calls.h"

static cudatest_handle cudatest_ctx_get(void) {
	CUcontext c = NULL;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuCtxGetCurrent, &c);
	return (cudatest_handle){(uintptr_t)c, r};
}

static CUresult cudatest_ctx_set(uintptr_t ctx) { return CUDATEST_CALL(cudatest_lib.cuCtxSetCurrent, (CUcontext)ctx); }

static CUresult cudatest_ctx_destroy(uintptr_t ctx) { return CUDATEST_CALL(cudatest_cu.cuCtxDestroy, (CUcontext)ctx); }

static cudatest_handle cudatest_ctx_create(int ordinal) {
	CUdevice dev;
	CUcontext c = NULL;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuDeviceGet, &dev, ordinal);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_cu.cuCtxCreate, &c, 0, dev);
	return (cudatest_handle){(uintptr_t)c, r};
}
*/
import "C"

import (
	"runtime"

	"github.com/memtrack/memtrack/internal/cudadrv"
)

// ThreadContext returns the calling thread's current context
// (cuCtxGetCurrent), 0 for none.
func ThreadContext() (uintptr, cudadrv.Result) { return handleOf(C.cudatest_ctx_get()) }

// SetThreadContext makes ctx the calling thread's current context
// (cuCtxSetCurrent; 0 pops the current one).
func SetThreadContext(ctx uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_ctx_set(C.uintptr_t(ctx)))
}

// CtxCreate creates a context of one's own on device ordinal
// (cuCtxCreate), which the driver pushes on the calling thread's stack: the
// caller locks the thread.
func CtxCreate(ordinal int) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_ctx_create(C.int(ordinal)))
}

// CtxDestroy destroys a context of CtxCreate (cuCtxDestroy).
func CtxDestroy(ctx uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_ctx_destroy(C.uintptr_t(ctx)))
}

// InContext runs f on a locked thread whose current context is ctx (none
// for 0), then makes the thread's previous context current again. It
// returns the first failure of those two steps; f runs only if the first
// succeeded.
func InContext(ctx uintptr, f func()) cudadrv.Result {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, r := ThreadContext()
	if r == cudadrv.Success {
		r = SetThreadContext(ctx)
	}
	if r != cudadrv.Success {
		return r
	}
	f()
	return SetThreadContext(prev)
}
