//go:build cuda

package cudatest

// The raw calls of virtual memory management, one driver call each, in
// the calling thread's current context and stream capture mode: for tests
// of the driver's rules, and the raw map and unmap the library's are
// compared with (RawMap, RawUnmap).

/*
#include <stdint.h>
#include <string.h>

#include "calls.h"

static CUmemAllocationProp cudatest_pinned(int ordinal) {
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ordinal;
	return prop;
}

static cudatest_handle cudatest_address_reserve(size_t size, size_t alignment) {
	CUdeviceptr p = 0;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuMemAddressReserve, &p, size, alignment, 0, 0);
	return (cudatest_handle){(uintptr_t)p, r};
}

static CUresult cudatest_address_free(uintptr_t ptr, size_t size) {
	return CUDATEST_CALL(cudatest_lib.cuMemAddressFree, (CUdeviceptr)ptr, size);
}

static CUresult cudatest_mem_create(int ordinal, size_t size, CUmemGenericAllocationHandle *h) {
	CUmemAllocationProp prop = cudatest_pinned(ordinal);
	return CUDATEST_CALL(cudatest_lib.cuMemCreate, h, size, &prop, 0);
}

static CUresult cudatest_mem_release(CUmemGenericAllocationHandle h) { return CUDATEST_CALL(cudatest_lib.cuMemRelease, h); }

static CUresult cudatest_mem_map(uintptr_t ptr, size_t size, CUmemGenericAllocationHandle h) {
	return CUDATEST_CALL(cudatest_lib.cuMemMap, (CUdeviceptr)ptr, size, 0, h, 0);
}

static CUresult cudatest_mem_unmap(uintptr_t ptr, size_t size) { return CUDATEST_CALL(cudatest_lib.cuMemUnmap, (CUdeviceptr)ptr, size); }

static CUresult cudatest_set_access(uintptr_t ptr, size_t size, int ordinal, int flags) {
	CUmemAccessDesc d;
	memset(&d, 0, sizeof d);
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = ordinal;
	d.flags = flags;
	return CUDATEST_CALL(cudatest_lib.cuMemSetAccess, (CUdeviceptr)ptr, size, &d, 1);
}

static CUresult cudatest_get_access(uintptr_t ptr, int ordinal, unsigned long long *flags) {
	CUmemLocation l;
	memset(&l, 0, sizeof l);
	l.type = CU_MEM_LOCATION_TYPE_DEVICE;
	l.id = ordinal;
	*flags = 0;
	return CUDATEST_CALL(cudatest_cu.cuMemGetAccess, flags, &l, (CUdeviceptr)ptr);
}

// cudatest_raw_map is the raw map: cuMemCreate, cuMemMap, cuMemSetAccess.
static CUresult cudatest_raw_map(int ordinal, uintptr_t ptr, size_t size, CUmemGenericAllocationHandle *h) {
	CUresult r = cudatest_mem_create(ordinal, size, h);
	if (r == CUDA_SUCCESS) r = cudatest_mem_map(ptr, size, *h);
	if (r == CUDA_SUCCESS) r = cudatest_set_access(ptr, size, ordinal, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	return r;
}
*/
import "C"

import "github.com/memtrack/memtrack/internal/cudadrv"

// The access a location has to a mapping (CUmemAccess_flags).
const (
	AccessNone      = C.CU_MEM_ACCESS_FLAGS_PROT_NONE
	AccessRead      = C.CU_MEM_ACCESS_FLAGS_PROT_READ
	AccessReadWrite = C.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
)

// AddressReserve reserves size bytes of address space aligned to alignment
// (0: the driver's default) (cuMemAddressReserve).
func AddressReserve(size, alignment int64) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_address_reserve(C.size_t(size), C.size_t(alignment)))
}

// AddressFree frees a reservation (cuMemAddressFree).
func AddressFree(ptr uintptr, size int64) cudadrv.Result {
	return cudadrv.Result(C.cudatest_address_free(C.uintptr_t(ptr), C.size_t(size)))
}

// MemCreate creates size bytes of pinned memory on device ordinal
// (cuMemCreate).
func MemCreate(ordinal int, size int64) (cudadrv.Handle, cudadrv.Result) {
	var h C.CUmemGenericAllocationHandle
	r := cudadrv.Result(C.cudatest_mem_create(C.int(ordinal), C.size_t(size), &h))
	return cudadrv.Handle(h), r
}

// MemRelease releases a handle of MemCreate (cuMemRelease).
func MemRelease(h cudadrv.Handle) cudadrv.Result {
	return cudadrv.Result(C.cudatest_mem_release(C.CUmemGenericAllocationHandle(h)))
}

// MemMap maps size bytes of h at ptr, from offset 0 (cuMemMap).
func MemMap(ptr uintptr, size int64, h cudadrv.Handle) cudadrv.Result {
	return cudadrv.Result(C.cudatest_mem_map(C.uintptr_t(ptr), C.size_t(size), C.CUmemGenericAllocationHandle(h)))
}

// MemUnmap unmaps size bytes at ptr (cuMemUnmap).
func MemUnmap(ptr uintptr, size int64) cudadrv.Result {
	return cudadrv.Result(C.cudatest_mem_unmap(C.uintptr_t(ptr), C.size_t(size)))
}

// SetAccess gives device ordinal access flags (AccessNone, AccessRead,
// AccessReadWrite) to size bytes mapped at ptr (cuMemSetAccess).
func SetAccess(ptr uintptr, size int64, ordinal, flags int) cudadrv.Result {
	return cudadrv.Result(C.cudatest_set_access(C.uintptr_t(ptr), C.size_t(size), C.int(ordinal), C.int(flags)))
}

// GetAccess returns the access device ordinal has to the mapping of ptr
// (cuMemGetAccess).
func GetAccess(ptr uintptr, ordinal int) (int, cudadrv.Result) {
	var f C.ulonglong
	r := cudadrv.Result(C.cudatest_get_access(C.uintptr_t(ptr), C.int(ordinal), &f))
	return int(f), r
}

// RawMap is the raw map that cudadrv.Map is compared with: cuMemCreate,
// cuMemMap and cuMemSetAccess (read-write for device ordinal), in the
// current context, with nothing undone where a step fails.
func RawMap(ordinal int, ptr uintptr, size int64) (cudadrv.Handle, cudadrv.Result) {
	var h C.CUmemGenericAllocationHandle
	r := cudadrv.Result(C.cudatest_raw_map(C.int(ordinal), C.uintptr_t(ptr), C.size_t(size), &h))
	return cudadrv.Handle(h), r
}

// RawUnmap is the raw unmap that cudadrv.Unmap is compared with:
// cuMemUnmap, then cuMemRelease, in the current context.
func RawUnmap(ptr uintptr, size int64, h cudadrv.Handle) cudadrv.Result {
	if r := MemUnmap(ptr, size); r != cudadrv.Success {
		return r
	}
	return MemRelease(h)
}
