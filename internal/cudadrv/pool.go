//go:build cuda

package cudadrv

// The figures and controls of a device's current memory pool, the one
// cuMemAllocAsync allocates from. Each call runs in relaxed stream-capture
// mode (memtrack_relaxed): the driver prohibits cuMemPoolGetAttribute,
// cuMemPoolSetAttribute and cuMemPoolTrimTo while any thread captures in
// global mode, failing them and invalidating the capture (on an H200;
// testdata/fakecuda/RULES.md, "Calls unsafe during a capture"), and a
// reading must never break the program's capture.

/*
#include "context.h"

#include <stdint.h>

typedef struct {
	CUresult status;
	int supported;
	CUmemoryPool pool;
} memtrack_pool;

// memtrack_pools_supported reports whether device ordinal has memory pools.
static memtrack_pool memtrack_pools_supported(int ordinal) {
	memtrack_pool p = {CUDA_SUCCESS, 0, NULL};
	CUdevice dev;
	CUstreamCaptureMode m = memtrack_relaxed();
	p.status = memtrack_cu.cuDeviceGet(&dev, ordinal);
	if (p.status == CUDA_SUCCESS) p.status = memtrack_cu.cuDeviceGetAttribute(&p.supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev);
	memtrack_unrelax(m);
	return p;
}

// memtrack_current_pool returns the current memory pool of device ordinal.
static memtrack_pool memtrack_current_pool(int ordinal) {
	memtrack_pool p = {CUDA_ERROR_NOT_SUPPORTED, 1, NULL};
	if (!memtrack_cu.cuDeviceGetMemPool) return p;
	CUdevice dev;
	CUstreamCaptureMode m = memtrack_relaxed();
	p.status = memtrack_cu.cuDeviceGet(&dev, ordinal);
	if (p.status == CUDA_SUCCESS) p.status = memtrack_cu.cuDeviceGetMemPool(&p.pool, dev);
	memtrack_unrelax(m);
	return p;
}

typedef struct {
	CUresult status;
	cuuint64_t reserved, reserved_high, used, used_high, threshold;
} memtrack_pool_stats;

static memtrack_pool_stats memtrack_pool_get(uintptr_t handle) {
	CUmemoryPool pool = (CUmemoryPool)handle;
	memtrack_pool_stats s = {CUDA_ERROR_NOT_SUPPORTED, 0, 0, 0, 0, 0};
	if (!memtrack_cu.cuMemPoolGetAttribute) return s;
	CUstreamCaptureMode m = memtrack_relaxed();
	s.status = memtrack_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &s.reserved);
	if (s.status == CUDA_SUCCESS) s.status = memtrack_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &s.reserved_high);
	if (s.status == CUDA_SUCCESS) s.status = memtrack_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &s.used);
	if (s.status == CUDA_SUCCESS) s.status = memtrack_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &s.used_high);
	if (s.status == CUDA_SUCCESS) s.status = memtrack_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &s.threshold);
	memtrack_unrelax(m);
	return s;
}

// memtrack_pool_reset_highs sets both high-water marks to the current
// figures: the driver accepts 0 for them and nothing else.
static CUresult memtrack_pool_reset_highs(uintptr_t handle) {
	CUmemoryPool pool = (CUmemoryPool)handle;
	if (!memtrack_cu.cuMemPoolSetAttribute) return CUDA_ERROR_NOT_SUPPORTED;
	cuuint64_t zero = 0;
	CUstreamCaptureMode m = memtrack_relaxed();
	CUresult r = memtrack_cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
	memtrack_unrelax(m);
	return r;
}

static CUresult memtrack_pool_set_threshold(uintptr_t pool, cuuint64_t threshold) {
	if (!memtrack_cu.cuMemPoolSetAttribute) return CUDA_ERROR_NOT_SUPPORTED;
	CUstreamCaptureMode m = memtrack_relaxed();
	CUresult r = memtrack_cu.cuMemPoolSetAttribute((CUmemoryPool)pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
	memtrack_unrelax(m);
	return r;
}

static CUresult memtrack_pool_trim(uintptr_t pool, size_t keep) {
	if (!memtrack_cu.cuMemPoolTrimTo) return CUDA_ERROR_NOT_SUPPORTED;
	CUstreamCaptureMode m = memtrack_relaxed();
	CUresult r = memtrack_cu.cuMemPoolTrimTo((CUmemoryPool)pool, keep);
	memtrack_unrelax(m);
	return r;
}
*/
import "C"

import "unsafe"

// Pool is a CUDA memory pool (CUmemoryPool), as a number.
type Pool uintptr

// PoolsSupported reports whether device ordinal has memory pools
// (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED).
func PoolsSupported(ordinal int) (bool, Result) {
	p := C.memtrack_pools_supported(C.int(ordinal))
	return p.supported != 0, Result(p.status)
}

// MemPool returns the current memory pool of device ordinal
// (cuDeviceGetMemPool): the default one unless cuDeviceSetMemPool set
// another. It runs in relaxed stream-capture mode.
func MemPool(ordinal int) (Pool, Result) {
	p := C.memtrack_current_pool(C.int(ordinal))
	return Pool(uintptr(unsafe.Pointer(p.pool))), Result(p.status)
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

// PoolGet reads the pool's figures, in one call, in relaxed stream-capture
// mode (as every call of this file): during a capture in global mode the
// driver would refuse cuMemPoolGetAttribute and invalidate the capture.
func PoolGet(p Pool) (PoolAttributes, Result) {
	s := C.memtrack_pool_get(C.uintptr_t(p))
	return PoolAttributes{
		PoolReserved: int64(s.reserved), PeakPoolReserved: int64(s.reserved_high),
		PoolUsed: int64(s.used), PeakPoolUsed: int64(s.used_high), ReleaseThreshold: int64(s.threshold),
	}, Result(s.status)
}

// PoolResetHighs sets the pool's high-water marks to its current figures
// (the driver accepts 0 for them and nothing else), in relaxed
// stream-capture mode.
func PoolResetHighs(p Pool) Result { return Result(C.memtrack_pool_reset_highs(C.uintptr_t(p))) }

// PoolSetReleaseThreshold sets CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, in
// relaxed stream-capture mode.
func PoolSetReleaseThreshold(p Pool, bytes int64) Result {
	return Result(C.memtrack_pool_set_threshold(C.uintptr_t(p), C.cuuint64_t(bytes)))
}

// PoolTrimTo returns to the device what the pool reserves beyond
// max(keep, what is in use) (cuMemPoolTrimTo), in relaxed stream-capture
// mode.
func PoolTrimTo(p Pool, keep int64) Result {
	return Result(C.memtrack_pool_trim(C.uintptr_t(p), C.size_t(keep)))
}
