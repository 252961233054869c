//go:build rocm

package hipdrv

// The figures and controls of a device's current memory pool, the one
// hipMallocAsync allocates from. None needs a current device: each call
// names its device or pool.

/*
#include <stdint.h>

#include "runtime.h"

typedef struct {
	hipError_t status;
	int supported;
	hipMemPool_t pool;
} memtrack_hip_pool;

// memtrack_hip_pools_supported reports whether device has memory pools.
static memtrack_hip_pool memtrack_hip_pools_supported(int device) {
	memtrack_hip_pool p = {hipSuccess, 0, NULL};
	p.status = memtrack_hip.hipDeviceGetAttribute(&p.supported, hipDeviceAttributeMemoryPoolsSupported, device);
	return p;
}

// memtrack_hip_current_pool returns the current memory pool of device.
static memtrack_hip_pool memtrack_hip_current_pool(int device) {
	memtrack_hip_pool p = {hipErrorNotSupported, 1, NULL};
	if (!memtrack_hip.hipDeviceGetMemPool) return p;
	p.status = memtrack_hip.hipDeviceGetMemPool(&p.pool, device);
	return p;
}

typedef struct {
	hipError_t status;
	uint64_t reserved, reserved_high, used, used_high, threshold;
} memtrack_hip_pool_stats;

static memtrack_hip_pool_stats memtrack_hip_pool_get(uintptr_t handle) {
	hipMemPool_t pool = (hipMemPool_t)handle;
	memtrack_hip_pool_stats s = {hipErrorNotSupported, 0, 0, 0, 0, 0};
	if (!memtrack_hip.hipMemPoolGetAttribute) return s;
	s.status = memtrack_hip.hipMemPoolGetAttribute(pool, hipMemPoolAttrReservedMemCurrent, &s.reserved);
	if (s.status == hipSuccess) s.status = memtrack_hip.hipMemPoolGetAttribute(pool, hipMemPoolAttrReservedMemHigh, &s.reserved_high);
	if (s.status == hipSuccess) s.status = memtrack_hip.hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemCurrent, &s.used);
	if (s.status == hipSuccess) s.status = memtrack_hip.hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemHigh, &s.used_high);
	if (s.status == hipSuccess) s.status = memtrack_hip.hipMemPoolGetAttribute(pool, hipMemPoolAttrReleaseThreshold, &s.threshold);
	return s;
}

// memtrack_hip_pool_reset_highs resets both high-water marks: "High
// watermark can only be reset to zero" (hipMemPoolAttr).
static hipError_t memtrack_hip_pool_reset_highs(uintptr_t handle) {
	hipMemPool_t pool = (hipMemPool_t)handle;
	if (!memtrack_hip.hipMemPoolSetAttribute) return hipErrorNotSupported;
	uint64_t zero = 0;
	hipError_t r = memtrack_hip.hipMemPoolSetAttribute(pool, hipMemPoolAttrReservedMemHigh, &zero);
	if (r == hipSuccess) r = memtrack_hip.hipMemPoolSetAttribute(pool, hipMemPoolAttrUsedMemHigh, &zero);
	return r;
}

static hipError_t memtrack_hip_pool_set_threshold(uintptr_t pool, uint64_t threshold) {
	if (!memtrack_hip.hipMemPoolSetAttribute) return hipErrorNotSupported;
	return memtrack_hip.hipMemPoolSetAttribute((hipMemPool_t)pool, hipMemPoolAttrReleaseThreshold, &threshold);
}

static hipError_t memtrack_hip_pool_trim(uintptr_t pool, size_t keep) {
	if (!memtrack_hip.hipMemPoolTrimTo) return hipErrorNotSupported;
	return memtrack_hip.hipMemPoolTrimTo((hipMemPool_t)pool, keep);
}
*/
import "C"

import "unsafe"

// Pool is a HIP memory pool (hipMemPool_t), as a number.
type Pool uintptr

// PoolsSupported reports whether device has memory pools
// (hipDeviceAttributeMemoryPoolsSupported: "Device supports HIP Stream
// Ordered Memory Allocator").
func PoolsSupported(device int) (bool, Result) {
	p := C.memtrack_hip_pools_supported(C.int(device))
	return p.supported != 0, Result(p.status)
}

// MemPool returns the current memory pool of device (hipDeviceGetMemPool):
// the default one unless hipDeviceSetMemPool set another.
func MemPool(device int) (Pool, Result) {
	p := C.memtrack_hip_current_pool(C.int(device))
	return Pool(uintptr(unsafe.Pointer(p.pool))), Result(p.status)
}

// PoolAttributes are a pool's figures (hipMemPoolGetAttribute), named as
// memtrack's glossary names them.
type PoolAttributes struct {
	PoolReserved     int64 // hipMemPoolAttrReservedMemCurrent: "backing memory currently allocated for the mempool"
	PeakPoolReserved int64 // hipMemPoolAttrReservedMemHigh
	PoolUsed         int64 // hipMemPoolAttrUsedMemCurrent: "memory from the pool that is currently in use by the application"
	PeakPoolUsed     int64 // hipMemPoolAttrUsedMemHigh
	ReleaseThreshold int64 // hipMemPoolAttrReleaseThreshold
}

// PoolGet reads the pool's figures, in one call.
func PoolGet(p Pool) (PoolAttributes, Result) {
	s := C.memtrack_hip_pool_get(C.uintptr_t(p))
	return PoolAttributes{
		PoolReserved: int64(s.reserved), PeakPoolReserved: int64(s.reserved_high),
		PoolUsed: int64(s.used), PeakPoolUsed: int64(s.used_high), ReleaseThreshold: int64(s.threshold),
	}, Result(s.status)
}

// PoolResetHighs resets the pool's two high-water marks
// (hipMemPoolSetAttribute of 0, the one value they accept). Whether they
// then read 0 or the current figures, the reference does not say
// (testdata/fakehip/RULES.md).
func PoolResetHighs(p Pool) Result { return Result(C.memtrack_hip_pool_reset_highs(C.uintptr_t(p))) }

// PoolSetReleaseThreshold sets hipMemPoolAttrReleaseThreshold: the
// reserved memory the pool keeps at a synchronization.
func PoolSetReleaseThreshold(p Pool, bytes int64) Result {
	return Result(C.memtrack_hip_pool_set_threshold(C.uintptr_t(p), C.uint64_t(bytes)))
}

// PoolTrimTo returns to the device what the pool reserves beyond keep
// bytes and what backs outstanding allocations (hipMemPoolTrimTo).
func PoolTrimTo(p Pool, keep int64) Result {
	return Result(C.memtrack_hip_pool_trim(C.uintptr_t(p), C.size_t(keep)))
}
