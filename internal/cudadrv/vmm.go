//go:build cuda

package cudadrv

// Virtual memory management (CUDA 10.2): address space reserved
// (cuMemAddressReserve) and freed (cuMemAddressFree), and physical memory
// mapped into it and unmapped, each map one cgo call that creates the
// memory (cuMemCreate), maps it (cuMemMap) and makes it readable and
// writable for its device (cuMemSetAccess), each unmap one that unmaps it
// (cuMemUnmap) and releases it (cuMemRelease). Each runs in the device's
// context, restoring the thread's, and in relaxed stream-capture mode,
// as Alloc and Free do.

/*
#include <stdint.h>
#include <string.h>

#include "context.h"

// The steps of a map and an unmap, each a driver call: which one failed.
enum { MEMTRACK_VMM_NONE, MEMTRACK_VMM_CREATE, MEMTRACK_VMM_MAP, MEMTRACK_VMM_ACCESS, MEMTRACK_VMM_UNMAP, MEMTRACK_VMM_RELEASE };

typedef struct {
	memtrack_result call; // op: the result of the step that failed, or of the last one
	int failed;           // the step whose call failed (MEMTRACK_VMM_*), or NONE
	CUresult undo;        // where a map's later step failed: undoing the earlier ones
	CUmemGenericAllocationHandle handle;
} memtrack_vmm;

static int memtrack_vmm_present(void) {
	return memtrack_cu.cuMemAddressReserve && memtrack_cu.cuMemAddressFree && memtrack_cu.cuMemCreate &&
	       memtrack_cu.cuMemRelease && memtrack_cu.cuMemMap && memtrack_cu.cuMemUnmap && memtrack_cu.cuMemSetAccess;
}

// memtrack_vmm_supported reports whether device ordinal supports virtual
// memory management.
static CUresult memtrack_vmm_supported(int ordinal, int *supported) {
	*supported = 0;
	CUdevice dev;
	CUresult r = memtrack_cu.cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetAttribute(supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
	return r;
}

// memtrack_pinned describes the memory of device ordinal that cuMemCreate
// makes: pinned, on the device, with no shareable handle.
static CUmemAllocationProp memtrack_pinned(int ordinal) {
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ordinal;
	return prop;
}

// memtrack_granularity stores the minimum and recommended granularity of
// device ordinal's pinned memory.
static CUresult memtrack_granularity(int ordinal, size_t *minimum, size_t *recommended) {
	*minimum = *recommended = 0;
	if (!memtrack_cu.cuMemGetAllocationGranularity) return CUDA_ERROR_NOT_SUPPORTED;
	CUmemAllocationProp prop = memtrack_pinned(ordinal);
	CUresult r = memtrack_cu.cuMemGetAllocationGranularity(minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuMemGetAllocationGranularity(recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	return r;
}

static memtrack_result memtrack_address_reserve(uintptr_t c, size_t size, size_t alignment) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result res = {0};
	if (!memtrack_vmm_present()) {
		res.op = CUDA_ERROR_NOT_SUPPORTED;
		return res;
	}
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUstreamCaptureMode m = memtrack_relaxed();
	res.op = memtrack_cu.cuMemAddressReserve(&res.ptr, size, alignment, 0, 0);
	memtrack_unrelax(m);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

static memtrack_result memtrack_address_free(uintptr_t c, CUdeviceptr ptr, size_t size) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result res = {0};
	if (!memtrack_vmm_present()) {
		res.op = CUDA_ERROR_NOT_SUPPORTED;
		return res;
	}
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUstreamCaptureMode m = memtrack_relaxed();
	res.op = memtrack_cu.cuMemAddressFree(ptr, size);
	memtrack_unrelax(m);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

// memtrack_vmm_map creates size bytes of device ordinal's memory, maps them
// at ptr and makes them readable and writable for the device. Where a step
// fails, the steps before it are undone (unmapped, released) and undo says
// how that went.
static memtrack_vmm memtrack_vmm_map(uintptr_t c, int ordinal, CUdeviceptr ptr, size_t size) {
	CUcontext ctx = (CUcontext)c;
	memtrack_vmm v = {{0}, MEMTRACK_VMM_NONE, CUDA_SUCCESS, 0};
	if (!memtrack_vmm_present()) {
		v.call.op = CUDA_ERROR_NOT_SUPPORTED;
		return v;
	}
	CUcontext prev;
	if ((v.call.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return v;
	CUstreamCaptureMode m = memtrack_relaxed();
	CUmemAllocationProp prop = memtrack_pinned(ordinal);
	CUmemAccessDesc access;
	memset(&access, 0, sizeof access);
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if ((v.call.op = memtrack_cu.cuMemCreate(&v.handle, size, &prop, 0)) != CUDA_SUCCESS) {
		v.failed = MEMTRACK_VMM_CREATE;
		v.handle = 0;
	} else if ((v.call.op = memtrack_cu.cuMemMap(ptr, size, 0, v.handle, 0)) != CUDA_SUCCESS) {
		v.failed = MEMTRACK_VMM_MAP;
		v.undo = memtrack_cu.cuMemRelease(v.handle);
	} else if ((v.call.op = memtrack_cu.cuMemSetAccess(ptr, size, &access, 1)) != CUDA_SUCCESS) {
		v.failed = MEMTRACK_VMM_ACCESS;
		v.undo = memtrack_cu.cuMemUnmap(ptr, size);
		if (v.undo == CUDA_SUCCESS) v.undo = memtrack_cu.cuMemRelease(v.handle);
	}
	if (v.failed != MEMTRACK_VMM_NONE && v.undo == CUDA_SUCCESS) v.handle = 0;
	memtrack_unrelax(m);
	v.call.restore = memtrack_leave(ctx, prev);
	return v;
}

// memtrack_vmm_unmap unmaps the mapping of size bytes at ptr and releases
// its memory, handle; where the unmap fails, nothing is released.
static memtrack_vmm memtrack_vmm_unmap(uintptr_t c, CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle) {
	CUcontext ctx = (CUcontext)c;
	memtrack_vmm v = {{0}, MEMTRACK_VMM_NONE, CUDA_SUCCESS, handle};
	if (!memtrack_vmm_present()) {
		v.call.op = CUDA_ERROR_NOT_SUPPORTED;
		return v;
	}
	CUcontext prev;
	if ((v.call.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return v;
	CUstreamCaptureMode m = memtrack_relaxed();
	if ((v.call.op = memtrack_cu.cuMemUnmap(ptr, size)) != CUDA_SUCCESS) {
		v.failed = MEMTRACK_VMM_UNMAP;
	} else if ((v.call.op = memtrack_cu.cuMemRelease(handle)) != CUDA_SUCCESS) {
		v.failed = MEMTRACK_VMM_RELEASE;
	}
	memtrack_unrelax(m);
	v.call.restore = memtrack_leave(ctx, prev);
	return v;
}
*/
import "C"

import "strconv"

// VMM fails, with a *MissingError, where the driver lacks a call of
// virtual memory management (CUDA 10.2): AddressReserve, AddressFree, Map,
// Unmap and Granularity then answer CUDA_ERROR_NOT_SUPPORTED. A driver
// that has them may still run on a device without the support
// (VMMSupported).
func VMM() error {
	return missingCall("cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease",
		"cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemGetAllocationGranularity")
}

// VMMSupported reports whether device ordinal supports virtual memory
// management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
// in one call that needs no context.
func VMMSupported(ordinal int) (bool, Result) {
	var s C.int
	r := Result(C.memtrack_vmm_supported(C.int(ordinal), &s))
	return s != 0, r
}

// Granularity returns the minimum and the recommended granularity of
// device ordinal's pinned memory (cuMemGetAllocationGranularity with
// CU_MEM_ALLOC_GRANULARITY_MINIMUM and _RECOMMENDED), in one call that
// needs no context. Map's address and size, and AddressReserve's size, are
// multiples of the minimum.
func Granularity(ordinal int) (minimum, recommended int64, _ Result) {
	var lo, hi C.size_t
	r := Result(C.memtrack_granularity(C.int(ordinal), &lo, &hi))
	return int64(lo), int64(hi), r
}

// AddressReserve reserves size bytes of address space, at an address that
// is a multiple of alignment (a power of two; 0 for the driver's default,
// which it does not document), in ctx (cuMemAddressReserve). A reservation
// holds no memory.
func AddressReserve(ctx Context, size, alignment int64) (uintptr, Call) {
	r := C.memtrack_address_reserve(C.uintptr_t(ctx), C.size_t(size), C.size_t(alignment))
	return uintptr(r.ptr), callOf(r)
}

// AddressFree frees the reservation of size bytes at ptr, which
// AddressReserve returned with that size (cuMemAddressFree). Nothing may be
// mapped in it: what the driver does otherwise it does not document.
func AddressFree(ctx Context, ptr uintptr, size int64) Call {
	return callOf(C.memtrack_address_free(C.uintptr_t(ctx), C.CUdeviceptr(ptr), C.size_t(size)))
}

// Handle is physical memory made by cuMemCreate
// (CUmemGenericAllocationHandle), as a number; 0 is none.
type Handle uint64

// Step is a step of Map or Unmap: the driver call it makes.
type Step int

// The steps, in the order Map and Unmap take them.
const (
	StepNone    Step = C.MEMTRACK_VMM_NONE    // no step failed
	StepCreate  Step = C.MEMTRACK_VMM_CREATE  // cuMemCreate
	StepMap     Step = C.MEMTRACK_VMM_MAP     // cuMemMap
	StepAccess  Step = C.MEMTRACK_VMM_ACCESS  // cuMemSetAccess
	StepUnmap   Step = C.MEMTRACK_VMM_UNMAP   // cuMemUnmap
	StepRelease Step = C.MEMTRACK_VMM_RELEASE // cuMemRelease
)

// String returns the name of the step's driver call, or "" for StepNone.
func (s Step) String() string {
	switch s {
	case StepNone:
		return ""
	case StepCreate:
		return "cuMemCreate"
	case StepMap:
		return "cuMemMap"
	case StepAccess:
		return "cuMemSetAccess"
	case StepUnmap:
		return "cuMemUnmap"
	case StepRelease:
		return "cuMemRelease"
	}
	return "Step(" + strconv.Itoa(int(s)) + ")"
}

// VMMCall is what Map and Unmap report: the results of entering the
// context and restoring the thread's (Call.Enter, Call.Restore), and of
// the operation (Call.Op: that of the step whose call failed, or Success);
// that step; and, for Map, how undoing the steps before it went.
type VMMCall struct {
	Call
	Step Step // the step whose driver call failed, or StepNone
	// Undo is, where Map's cuMemMap or cuMemSetAccess failed, the result of
	// undoing the steps before it (cuMemUnmap, then cuMemRelease): Success
	// where nothing is left behind.
	Undo Result
}

// Map creates size bytes of physical memory on device ordinal, pinned and
// with no shareable handle (cuMemCreate), maps it at ptr in a reservation
// (cuMemMap) and makes it readable and writable for the device
// (cuMemSetAccess): ptr and size are multiples of the device's minimum
// granularity, and the range is reserved and mapped by nothing. It runs
// in ctx, in relaxed stream-capture mode, in one cgo call, and returns the
// memory's handle, which Unmap takes. Where cuMemMap or cuMemSetAccess
// fails, Map unmaps and releases what it made and reports how that went
// (VMMCall.Undo); the handle is 0 unless that failed too, and then it is
// the memory left behind.
func Map(ctx Context, ordinal int, ptr uintptr, size int64) (Handle, VMMCall) {
	v := C.memtrack_vmm_map(C.uintptr_t(ctx), C.int(ordinal), C.CUdeviceptr(ptr), C.size_t(size))
	return Handle(v.handle), vmmCallOf(v)
}

// Unmap unmaps the mapping of size bytes at ptr that Map made
// (cuMemUnmap) and releases its memory, h (cuMemRelease), in ctx, in
// relaxed stream-capture mode, in one cgo call. The driver frees the
// memory once both are done. Where cuMemUnmap fails, nothing is released.
func Unmap(ctx Context, ptr uintptr, size int64, h Handle) VMMCall {
	return vmmCallOf(C.memtrack_vmm_unmap(C.uintptr_t(ctx), C.CUdeviceptr(ptr), C.size_t(size), C.CUmemGenericAllocationHandle(h)))
}

func vmmCallOf(v C.memtrack_vmm) VMMCall {
	return VMMCall{Call: callOf(v.call), Step: Step(v.failed), Undo: Result(v.undo)}
}
