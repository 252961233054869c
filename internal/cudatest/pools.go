//go:build cuda

package cudatest

// Memory pools of one's own (cuMemPoolCreate) and the device's current pool
// (cuDeviceSetMemPool), as an application may set another than the default.

/*
#include <stdint.h>
#include <string.h>

#include "calls.h"

static cudatest_handle cudatest_pool_create(int ordinal) {
	CUmemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = ordinal;
	CUmemoryPool p = NULL;
	CUresult r = CUDATEST_CALL(cudatest_cu.cuMemPoolCreate, &p, &props);
	return (cudatest_handle){(uintptr_t)p, r};
}

static CUresult cudatest_set_pool(int ordinal, uintptr_t pool) {
	CUdevice dev;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuDeviceGet, &dev, ordinal);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_cu.cuDeviceSetMemPool, dev, (CUmemoryPool)pool);
	return r;
}

static cudatest_handle cudatest_default_pool(int ordinal) {
	CUdevice dev;
	CUmemoryPool p = NULL;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuDeviceGet, &dev, ordinal);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_cu.cuDeviceGetDefaultMemPool, &p, dev);
	return (cudatest_handle){(uintptr_t)p, r};
}

static CUresult cudatest_pool_destroy(uintptr_t pool) { return CUDATEST_CALL(cudatest_cu.cuMemPoolDestroy, (CUmemoryPool)pool); }
*/
import "C"

import "github.com/memtrack/memtrack/internal/cudadrv"

// CreatePool creates a memory pool of device memory on device ordinal
// (cuMemPoolCreate).
func CreatePool(ordinal int) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_pool_create(C.int(ordinal)))
}

// SetMemPool makes pool the current pool of device ordinal
// (cuDeviceSetMemPool), the one cuMemAllocAsync allocates from.
func SetMemPool(ordinal int, pool uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_set_pool(C.int(ordinal), C.uintptr_t(pool)))
}

// DefaultPool returns the default pool of device ordinal
// (cuDeviceGetDefaultMemPool).
func DefaultPool(ordinal int) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_default_pool(C.int(ordinal)))
}

// DestroyPool destroys a pool of CreatePool (cuMemPoolDestroy).
func DestroyPool(pool uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_pool_destroy(C.uintptr_t(pool)))
}
