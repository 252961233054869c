//go:build cuda

package cudadrv

// The calls of memtrack's backend on a device: initialise, allocate, free,
// read the memory figures, name. Each operation on a device is one C
// function, so one cgo transition: it makes the device's primary context
// current on the calling thread, runs the operation and puts the thread's
// previous context back, and reports the three results apart, so that the
// operation's own result decides what the caller is told. Every driver
// call goes through the table that Load fills (memtrack_cu), so Load must
// have succeeded first.

/*
#include <stddef.h>

#include "context.h"

static memtrack_result memtrack_alloc(uintptr_t c, size_t size) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result res = {0};
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUstreamCaptureMode m = memtrack_relaxed();
	res.op = memtrack_cu.cuMemAlloc(&res.ptr, size);
	memtrack_unrelax(m);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

static memtrack_result memtrack_free(uintptr_t c, CUdeviceptr ptr) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result res = {0};
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUstreamCaptureMode m = memtrack_relaxed();
	res.op = memtrack_cu.cuMemFree(ptr);
	memtrack_unrelax(m);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

static memtrack_result memtrack_meminfo(uintptr_t c) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result res = {0};
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	res.op = memtrack_cu.cuMemGetInfo(&res.free, &res.total);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

// memtrack_retain retains the primary context of device ordinal.
static CUresult memtrack_retain(int ordinal, CUcontext *ctx) {
	CUdevice dev;
	CUresult r = memtrack_cu.cuDeviceGet(&dev, ordinal);
	if (r != CUDA_SUCCESS) return r;
	return memtrack_cu.cuDevicePrimaryCtxRetain(ctx, dev);
}

typedef struct {
	const char *name, *text;
} memtrack_names;

// memtrack_error_name asks the driver for the name and description of r;
// NULL where it cannot say, or is not loaded.
static memtrack_names memtrack_error_name(CUresult r) {
	memtrack_names n = {NULL, NULL};
	if (!memtrack_cu.cuGetErrorName || memtrack_cu.cuGetErrorName(r, &n.name) != CUDA_SUCCESS) n.name = NULL;
	if (!memtrack_cu.cuGetErrorString || memtrack_cu.cuGetErrorString(r, &n.text) != CUDA_SUCCESS) n.text = NULL;
	return n;
}

// memtrack_device_info stores the name (at most len bytes, with the NUL) and
// the UUID of device ordinal: cuDeviceGetUuid_v2's (driver.h), which gives a
// MIG instance's own, where the driver has it.
static CUresult memtrack_device_info(int ordinal, char *name, int len, CUuuid *uuid) {
	CUdevice dev;
	CUresult r = memtrack_cu.cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetName(name, len, dev);
	if (r == CUDA_SUCCESS && memtrack_cu.cuDeviceGetUuid) r = memtrack_cu.cuDeviceGetUuid(uuid, dev);
	return r;
}

// memtrack_init initialises the driver and counts its devices.
static CUresult memtrack_init(int *count) {
	*count = 0;
	CUresult r = memtrack_cu.cuInit(0);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetCount(count);
	return r;
}
*/
import "C"

import "unsafe"

// Context is a CUDA context (CUcontext) as a number, as bindings of the
// driver type it (github.com/mumax/3/cuda/cu's Context); 0 is none.
type Context uintptr

// Init initialises the driver (cuInit) and counts its devices
// (cuDeviceGetCount). Load must have succeeded.
func Init() (devices int, _ Result) {
	var n C.int
	r := Result(C.memtrack_init(&n))
	return int(n), r
}

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
	r := C.memtrack_alloc(C.uintptr_t(ctx), C.size_t(size))
	return uintptr(r.ptr), callOf(r)
}

// Free runs cuMemFree in ctx, in relaxed stream-capture mode.
func Free(ctx Context, ptr uintptr) Call {
	return callOf(C.memtrack_free(C.uintptr_t(ctx), C.CUdeviceptr(ptr)))
}

// MemInfo runs cuMemGetInfo in ctx: the free and total memory of ctx's
// device.
func MemInfo(ctx Context) (free, total int64, _ Call) {
	r := C.memtrack_meminfo(C.uintptr_t(ctx))
	return int64(r.free), int64(r.total), callOf(r)
}

// Retain retains the primary context of device ordinal
// (cuDevicePrimaryCtxRetain), which makes nothing current.
func Retain(ordinal int) (Context, Result) {
	var ctx C.CUcontext
	r := Result(C.memtrack_retain(C.int(ordinal), &ctx))
	return Context(uintptr(unsafe.Pointer(ctx))), r
}

// ErrorName returns the driver's name and description of r
// (cuGetErrorName, cuGetErrorString), or "" where it cannot say: the link
// stub, a driver older than the code, or none loaded (Name has the usual
// ones).
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
// context. The UUID is all zero where the driver lacks cuDeviceGetUuid_v2
// (UUIDs says why).
func DeviceInfo(ordinal int) (name string, uuid [16]byte, _ Result) {
	var buf [256]C.char
	var u C.CUuuid // zero unless the driver fills it
	if r := Result(C.memtrack_device_info(C.int(ordinal), &buf[0], C.int(len(buf)), &u)); r != Success {
		return "", uuid, r
	}
	buf[len(buf)-1] = 0
	return C.GoString(&buf[0]), *(*[16]byte)(unsafe.Pointer(&u.bytes[0])), Success
}
