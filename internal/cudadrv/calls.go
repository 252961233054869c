//go:build cuda

package cudadrv

// The calls of memtrack's backend that github.com/mumax/3/cuda/cu does not
// make, or makes at a cost the hot path should not pay. Each operation on a
// device (allocate, free, read the memory figures) is one C function, so
// one cgo transition: it makes the device's primary context current on the
// calling thread, runs the operation and puts the thread's previous context
// back, and reports the three results apart, so that the operation's own
// result decides what the caller is told.

/*
#include <cuda.h>
#include <stddef.h>

#include "context.h"

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


// memtrack_device_info stores the name (at most len bytes, with the NUL) and
// the UUID of device ordinal. cuDeviceGetUuid_v2 is named explicitly, so
// that the call is the same whatever the version of cuda.h (12.x headers
// map cuDeviceGetUuid to it; 11.x ones do not).
static CUresult memtrack_device_info(int ordinal, char *name, int len, CUuuid *uuid) {
	CUdevice dev;
	CUresult r = cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS) {
		r = cuDeviceGetName(name, len, dev);
	}
	if (r == CUDA_SUCCESS) {
		r = cuDeviceGetUuid_v2(uuid, dev);
	}
	return r;
}
*/
import "C"

import "unsafe"

// Context is a CUDA context (CUcontext); the zero Context is none.
type Context struct{ p C.CUcontext }

// Uintptr returns the context's handle as a number, as github.com/mumax/3/cuda/cu
// types it (cu.Context).
func (c Context) Uintptr() uintptr { return uintptr(unsafe.Pointer(c.p)) }

// Call is what one operation reports: the results of making the context
// current (the operation ran only if it succeeded), of the operation, and
// of restoring the thread's previous context.
type Call struct {
	Enter, Op, Restore Result
}

func callOf(r C.memtrack_result) Call {
	return Call{Enter: Result(r.enter), Op: Result(r.op), Restore: Result(r.restore)}
}

// Alloc runs cuMemAlloc in ctx, in relaxed stream-capture mode: it neither
// fails nor invalidates a capture that any thread has begun.
func Alloc(ctx Context, size int64) (uintptr, Call) {
	r := C.memtrack_alloc(ctx.p, C.size_t(size))
	return uintptr(r.ptr), callOf(r)
}

// Free runs cuMemFree in ctx, in relaxed stream-capture mode.
func Free(ctx Context, ptr uintptr) Call {
	return callOf(C.memtrack_free(ctx.p, C.CUdeviceptr(ptr)))
}

// MemInfo runs cuMemGetInfo in ctx: the free and total memory of ctx's
// device.
func MemInfo(ctx Context) (free, total int64, _ Call) {
	r := C.memtrack_meminfo(ctx.p)
	return int64(r.free), int64(r.total), callOf(r)
}

// Retain retains the primary context of device ordinal
// (cuDevicePrimaryCtxRetain), which makes nothing current.
func Retain(ordinal int) (Context, Result) {
	var ctx C.CUcontext
	r := Result(C.memtrack_retain(C.int(ordinal), &ctx))
	return Context{ctx}, r
}

// ErrorName returns the driver's name and description of r
// (cuGetErrorName, cuGetErrorString), or "" where it cannot say: the link
// stub, or a driver older than the code.
func ErrorName(r Result) (name, text string) {
	n := C.memtrack_error_name(C.CUresult(r))
	if n.name != nil {
		name = C.GoString(n.name)
	}
	if n.text != nil {
		text = C.GoString(n.text)
	}
	return name, text
}

// DeviceInfo returns the name and the 16 bytes of the UUID of device
// ordinal (cuDeviceGetName, cuDeviceGetUuid_v2), in one call that needs no
// context.
func DeviceInfo(ordinal int) (name string, uuid [16]byte, _ Result) {
	var buf [256]C.char
	var u C.CUuuid
	if r := Result(C.memtrack_device_info(C.int(ordinal), &buf[0], C.int(len(buf)), &u)); r != Success {
		return "", uuid, r
	}
	buf[len(buf)-1] = 0
	return C.GoString(&buf[0]), *(*[16]byte)(unsafe.Pointer(&u.bytes[0])), Success
}
