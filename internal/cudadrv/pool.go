//go:build cuda

package cudadrv

// The figures and controls of a device's current memory pool, the one
// cuMemAllocAsync allocates from.

/*
#include <cuda.h>

typedef struct {
	CUresult status;
	int supported;
	CUmemoryPool pool;
} memtrack_pool;

// memtrack_pools_supported reports whether device ordinal has memory pools.
static memtrack_pool memtrack_pools_supported(int ordinal) {
	memtrack_pool p = {CUDA_SUCCESS, 0, NULL};
	CUdevice dev;
	p.status = cuDeviceGet(&dev, ordinal);
	if (p.status == CUDA_SUCCESS) p.status = cuDeviceGetAttribute(&p.supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev);
	return p;
}

// memtrack_current_pool returns the current memory pool of device ordinal.
static memtrack_pool memtrack_current_pool(int ordinal) {
	memtrack_pool p = {CUDA_SUCCESS, 1, NULL};
	CUdevice dev;
	p.status = cuDeviceGet(&dev, ordinal);
	if (p.status == CUDA_SUCCESS) p.status = cuDeviceGetMemPool(&p.pool, dev);
	return p;
}

typedef struct {
	CUresult status;
	cuuint64_t reserved, reserved_high, used, used_high, threshold;
} memtrack_pool_stats;

static memtrack_pool_stats memtrack_pool_get(CUmemoryPool pool) {
	memtrack_pool_stats s = {CUDA_SUCCESS, 0, 0, 0, 0, 0};
	s.status = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &s.reserved);
	if (s.status == CUDA_SUCCESS) s.status = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &s.reserved_high);
	if (s.status == CUDA_SUCCESS) s.status = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &s.used);
	if (s.status == CUDA_SUCCESS) s.status = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &s.used_high);
	if (s.status == CUDA_SUCCESS) s.status = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &s.threshold);
	return s;
}

// memtrack_pool_reset_highs sets both high-water marks to the current
// figures: the driver accepts 0 for them and nothing else.
static CUresult memtrack_pool_reset_highs(CUmemoryPool pool) {
	cuuint64_t zero = 0;
	CUresult r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
	if (r == CUDA_SUCCESS) r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
	return r;
}

static CUresult memtrack_pool_set_threshold(CUmemoryPool pool, cuuint64_t threshold) {
	return cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
}
*/
import "C"

import "unsafe"

// Pool is a CUDA memory pool (CUmemoryPool).
type Pool struct{ p C.CUmemoryPool }

// Handle returns the pool as a number.
func (p Pool) Handle() PoolHandle { return PoolHandle(uintptr(unsafe.Pointer(p.p))) }

// PoolsSupported reports whether device ordinal has memory pools
// (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED).
func PoolsSupported(ordinal int) (bool, Result) {
	p := C.memtrack_pools_supported(C.int(ordinal))
	return p.supported != 0, Result(p.status)
}

// MemPool returns the current memory pool of device ordinal
// (cuDeviceGetMemPool): the default one unless cuDeviceSetMemPool set
// another.
func MemPool(ordinal int) (Pool, Result) {
	p := C.memtrack_current_pool(C.int(ordinal))
	return Pool{p.pool}, Result(p.status)
}

// PoolAttributes are a pool's figures (cuMemPoolGetAttribute), named as
// memtrack's glossary names them.
type PoolAttributes struct {
	PoolReserved     int64 // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
	PeakPoolReserved int64 // CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
	PoolUsed         int64 // CU_MEMPOOL_ATTR_USED_MEM_CURRENT
	PeakPoolUsed     int64 // CU_MEMPOOL_ATTR_USED_MEM_HIGH
	ReleaseThreshold int64 // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
}

// PoolGet reads the pool's figures, in one call.
func PoolGet(p Pool) (PoolAttributes, Result) {
	s := C.memtrack_pool_get(p.p)
	return PoolAttributes{
		PoolReserved: int64(s.reserved), PeakPoolReserved: int64(s.reserved_high),
		PoolUsed: int64(s.used), PeakPoolUsed: int64(s.used_high), ReleaseThreshold: int64(s.threshold),
	}, Result(s.status)
}

// PoolResetHighs sets the pool's high-water marks to its current figures
// (the driver accepts 0 for them and nothing else).
func PoolResetHighs(p Pool) Result { return Result(C.memtrack_pool_reset_highs(p.p)) }

// PoolSetReleaseThreshold sets CU_MEMPOOL_ATTR_RELEASE_THRESHOLD.
func PoolSetReleaseThreshold(p Pool, bytes int64) Result {
	return Result(C.memtrack_pool_set_threshold(p.p, C.cuuint64_t(bytes)))
}

// PoolTrimTo returns to the device what the pool reserves beyond
// max(keep, what is in use) (cuMemPoolTrimTo).
func PoolTrimTo(p Pool, keep int64) Result { return Result(C.cuMemPoolTrimTo(p.p, C.size_t(keep))) }
