//go:build cuda

package cudadrv

// Memory pools of one's own (cuMemPoolCreate) and the device's current pool
// (cuDeviceSetMemPool), for tests that set a pool other than the default
// one current, as an application may.

/*
#include <cuda.h>
#include <stdint.h>
#include <string.h>

static CUresult memtrack_pool_create(int ordinal, uintptr_t *out) {
	CUmemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = ordinal;
	CUmemoryPool p = NULL;
	CUresult r = cuMemPoolCreate(&p, &props);
	*out = (uintptr_t)p;
	return r;
}

static CUresult memtrack_set_pool(int ordinal, uintptr_t pool) {
	CUdevice dev;
	CUresult r = cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS) r = cuDeviceSetMemPool(dev, (CUmemoryPool)pool);
	return r;
}

static CUresult memtrack_default_pool(int ordinal, uintptr_t *out) {
	CUdevice dev;
	CUmemoryPool p = NULL;
	CUresult r = cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS) r = cuDeviceGetDefaultMemPool(&p, dev);
	*out = (uintptr_t)p;
	return r;
}

static CUresult memtrack_pool_destroy(uintptr_t pool) { return cuMemPoolDestroy((CUmemoryPool)pool); }
*/
import "C"

// PoolHandle is a CUmemoryPool as a number.
type PoolHandle uintptr

// CreatePool creates a memory pool of device memory on device ordinal
// (cuMemPoolCreate).
func CreatePool(ordinal int) (PoolHandle, Result) {
	var p C.uintptr_t
	r := Result(C.memtrack_pool_create(C.int(ordinal), &p))
	return PoolHandle(p), r
}

// SetMemPool makes pool the current pool of device ordinal
// (cuDeviceSetMemPool), the one cuMemAllocAsync allocates from.
func SetMemPool(ordinal int, pool PoolHandle) Result {
	return Result(C.memtrack_set_pool(C.int(ordinal), C.uintptr_t(pool)))
}

// DefaultPool returns the default pool of device ordinal
// (cuDeviceGetDefaultMemPool).
func DefaultPool(ordinal int) (PoolHandle, Result) {
	var p C.uintptr_t
	r := Result(C.memtrack_default_pool(C.int(ordinal), &p))
	return PoolHandle(p), r
}

// DestroyPool destroys a pool of one's own (cuMemPoolDestroy).
func DestroyPool(pool PoolHandle) Result {
	return Result(C.memtrack_pool_destroy(C.uintptr_t(pool)))
}
