//go:build cuda

package memtrack

// The backend's calls into the driver that github.com/mumax/3/cuda/cu does
// not make, or makes at a cost the hot path should not pay. Each operation
// on a device (allocate, free, read the memory figures) is one C function
// of ours, so one cgo transition: it makes the device's primary context
// current on the calling thread, runs the operation and puts the thread's
// previous context back, and reports the three results apart, so that the
// operation's own result decides what the caller is told (see settle in
// backend_cuda.go). cu stays the binding for initialisation, devices and
// the error type. The flags name the usual places of cuda.h and libcuda.so;
// CGO_CFLAGS and CGO_LDFLAGS add others (see scripts/cuda-dev.sh).

/*
#cgo CFLAGS: -I/usr/local/cuda/include
#cgo LDFLAGS: -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>
#include <stddef.h>

#include "cuda_context.h"

static memtrack_result memtrack_alloc(CUcontext ctx, size_t size) {
	memtrack_result res = {0};
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUstreamCaptureMode m = memtrack_relaxed();
	res.op = cuMemAlloc(&res.ptr, size);
	memtrack_unrelax(m);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

static memtrack_result memtrack_free(CUcontext ctx, CUdeviceptr ptr) {
	memtrack_result res = {0};
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUstreamCaptureMode m = memtrack_relaxed();
	res.op = cuMemFree(ptr);
	memtrack_unrelax(m);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

static memtrack_result memtrack_meminfo(CUcontext ctx) {
	memtrack_result res = {0};
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	res.op = cuMemGetInfo(&res.free, &res.total);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

// memtrack_retain retains the primary context of device ordinal.
static CUresult memtrack_retain(int ordinal, CUcontext *ctx) {
	CUdevice dev;
	CUresult r = cuDeviceGet(&dev, ordinal);
	if (r != CUDA_SUCCESS) return r;
	return cuDevicePrimaryCtxRetain(ctx, dev);
}

typedef struct {
	const char *name, *text;
} memtrack_names;

// memtrack_error_name asks the driver for the name and description of r;
// NULL where it cannot say.
static memtrack_names memtrack_error_name(CUresult r) {
	memtrack_names n = {NULL, NULL};
	if (cuGetErrorName(r, &n.name) != CUDA_SUCCESS) n.name = NULL;
	if (cuGetErrorString(r, &n.text) != CUDA_SUCCESS) n.text = NULL;
	return n;
}
*/
import "C"

import (
	"unsafe"

	"github.com/mumax/3/cuda/cu"
)

// cuContext is a CUDA context as the driver gives it.
type cuContext = C.CUcontext

// callResult is what one operation of ours reports: the results of making
// the context current, of the operation, and of restoring the previous
// context.
type callResult struct {
	enter, op, restore cu.Result
}

func resultOf(r C.memtrack_result) callResult {
	return callResult{enter: cu.Result(r.enter), op: cu.Result(r.op), restore: cu.Result(r.restore)}
}

// cuAlloc runs cuMemAlloc in ctx.
func cuAlloc(ctx cuContext, size int64) (uintptr, callResult) {
	r := C.memtrack_alloc(ctx, C.size_t(size))
	return uintptr(r.ptr), resultOf(r)
}

// cuFree runs cuMemFree in ctx.
func cuFree(ctx cuContext, ptr uintptr) callResult {
	return resultOf(C.memtrack_free(ctx, C.CUdeviceptr(ptr)))
}

// cuMemInfo runs cuMemGetInfo in ctx.
func cuMemInfo(ctx cuContext) (free, total int64, _ callResult) {
	r := C.memtrack_meminfo(ctx)
	return int64(r.free), int64(r.total), resultOf(r)
}

// cuRetain retains the primary context of device ordinal
// (cuDevicePrimaryCtxRetain). The backend never releases it: it lives as
// long as the process, as the CUDA runtime's does.
func cuRetain(ordinal int) (cuContext, cu.Result) {
	var ctx C.CUcontext
	r := cu.Result(C.memtrack_retain(C.int(ordinal), &ctx))
	return ctx, r
}

// driverErrorName returns the driver's name and description of r
// (cuGetErrorName, cuGetErrorString), or "" where it cannot say: the link
// stub, or a driver older than the code.
func driverErrorName(r cu.Result) (name, text string) {
	n := C.memtrack_error_name(C.CUresult(r))
	if n.name != nil {
		name = C.GoString(n.name)
	}
	if n.text != nil {
		text = C.GoString(n.text)
	}
	return name, text
}

// sticky reports whether r leaves the context unusable. cuda.h documents
// each of these codes as leaving "the process in an inconsistent state",
// where every later call returns the same error until the process restarts:
// those of the 11.8 header by name, and by number those that later headers
// add (226, CUDA_ERROR_CONTAINED, in 12.x; 721, CUDA_ERROR_TENSOR_MEMORY_LEAK,
// in 12.8), which a newer driver returns whatever header the code was built
// with.
func sticky(r cu.Result) bool {
	switch C.CUresult(r) {
	case 226, // CUDA_ERROR_CONTAINED
		C.CUDA_ERROR_ILLEGAL_ADDRESS,       // 700
		C.CUDA_ERROR_LAUNCH_TIMEOUT,        // 702
		C.CUDA_ERROR_ASSERT,                // 710
		C.CUDA_ERROR_HARDWARE_STACK_ERROR,  // 714
		C.CUDA_ERROR_ILLEGAL_INSTRUCTION,   // 715
		C.CUDA_ERROR_MISALIGNED_ADDRESS,    // 716
		C.CUDA_ERROR_INVALID_ADDRESS_SPACE, // 717
		C.CUDA_ERROR_INVALID_PC,            // 718
		C.CUDA_ERROR_LAUNCH_FAILED,         // 719
		721,                                // CUDA_ERROR_TENSOR_MEMORY_LEAK
		C.CUDA_ERROR_MPS_CLIENT_TERMINATED, // 810
		C.CUDA_ERROR_EXTERNAL_DEVICE:       // 911
		return true
	}
	return false
}

// cuCtx returns ctx as the cu package types it.
func cuCtx(ctx cuContext) cu.Context { return cu.Context(uintptr(unsafe.Pointer(ctx))) }
