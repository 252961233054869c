//go:build cuda

package memtrack

// The figures and controls of each CUDA device's default memory pool, the
// one AllocAsync allocates from (cuda_stream.go).

/*
#cgo CFLAGS: -I/usr/local/cuda/include
#cgo LDFLAGS: -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>

typedef struct {
	CUresult status;
	int supported;
	CUmemoryPool pool;
} memtrack_pool;

// memtrack_default_pool returns the default memory pool of device ordinal,
// or supported = 0 where the device has none.
static memtrack_pool memtrack_default_pool(int ordinal) {
	memtrack_pool p = {CUDA_SUCCESS, 0, NULL};
	CUdevice dev;
	p.status = cuDeviceGet(&dev, ordinal);
	if (p.status == CUDA_SUCCESS) p.status = cuDeviceGetAttribute(&p.supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev);
	if (p.status == CUDA_SUCCESS && p.supported) p.status = cuDeviceGetDefaultMemPool(&p.pool, dev);
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

import (
	"fmt"

	"github.com/mumax/3/cuda/cu"
)

// defaultPool returns the default memory pool of CUDA device d.
func defaultPool(d Device) (C.CUmemoryPool, error) {
	p := C.memtrack_default_pool(C.int(d.ordinal))
	if p.status != C.CUDA_SUCCESS {
		return nil, fillError(resultError("memory pool", "", cu.Result(p.status)), d, 0, nil)
	}
	if p.supported == 0 {
		return nil, fmt.Errorf("%w: %v has no memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0): stream-ordered allocation needs CUDA 11.2 or later and a device that supports it; allocate with Device.Alloc instead",
			ErrNotSupported, d)
	}
	return p.pool, nil
}

// PoolStats returns the figures of the device's default memory pool as the
// driver reports them. It fails with [ErrNotSupported] on a device that is
// not a CUDA GPU or has no memory pools.
func (d Device) PoolStats() (PoolStats, error) {
	_, pool, err := cudaPool(d)
	if err != nil {
		return PoolStats{Device: d}, err
	}
	s := C.memtrack_pool_get(pool)
	if s.status != C.CUDA_SUCCESS {
		return PoolStats{Device: d}, fillError(resultError("memory pool", "", cu.Result(s.status)), d, 0, nil)
	}
	return PoolStats{
		Device:           d,
		PoolReserved:     int64(s.reserved),
		PeakPoolReserved: int64(s.reserved_high),
		PoolUsed:         int64(s.used),
		PeakPoolUsed:     int64(s.used_high),
		ReleaseThreshold: int64(s.threshold),
	}, nil
}

// PoolUsage returns the tracked and device-side figures of the device beside
// its memory pool's; see [PoolUsage] for how to read their differences.
func (d Device) PoolUsage() (PoolUsage, error) {
	st := d.MemoryStats()
	p, err := d.PoolStats()
	if err != nil {
		return PoolUsage{Device: d, Tracked: st.Tracked, Held: st.Held}, err
	}
	return poolUsage(d, st.Tracked, st.Held, p), nil
}

// TrimPool returns to the device the memory the pool reserves beyond
// max(keep, what is in use) (cuMemPoolTrimTo): the counterpart of
// torch.cuda.empty_cache for stream-ordered memory. A pool of 64 MiB
// reserved with 2 MiB in use holds, after TrimPool(0), the 2 MiB (rounded
// up to the driver's granularity); [PoolStats] shows the figures before and
// after. It fails with [ErrInvalidSize] for keep < 0 and with
// [ErrNotSupported] where the device has no memory pool.
func (d Device) TrimPool(keep int64) error {
	if keep < 0 {
		return fmt.Errorf("%w: TrimPool(%d) on %v: want the bytes to keep, >= 0", ErrInvalidSize, keep, d)
	}
	_, pool, err := cudaPool(d)
	if err != nil {
		return err
	}
	if r := C.cuMemPoolTrimTo(pool, C.size_t(keep)); r != C.CUDA_SUCCESS {
		return fillError(resultError("trim pool", "", cu.Result(r)), d, 0, nil)
	}
	return nil
}

// SetPoolReleaseThreshold sets how much reserved memory the pool keeps at
// each synchronization (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD): with the
// driver's default of 0, the pool returns everything unused to the device
// whenever a stream, event or context is synchronized; with a threshold, it
// keeps up to that many bytes reserved for later allocations, which then
// cost no call to the OS. [PoolStats].PoolReserved shows the effect
// after the next synchronization. It fails with [ErrInvalidSize] for a
// negative threshold and with [ErrNotSupported] where the device has no
// memory pool.
func (d Device) SetPoolReleaseThreshold(bytes int64) error {
	if bytes < 0 {
		return fmt.Errorf("%w: release threshold %d on %v: want bytes >= 0", ErrInvalidSize, bytes, d)
	}
	_, pool, err := cudaPool(d)
	if err != nil {
		return err
	}
	if r := C.memtrack_pool_set_threshold(pool, C.cuuint64_t(bytes)); r != C.CUDA_SUCCESS {
		return fillError(resultError("set release threshold", "", cu.Result(r)), d, 0, nil)
	}
	return nil
}

// resetPoolHighs resets the pool's high-water marks, where d has a pool.
func (sd *deviceSide) resetPoolHighs(d Device) {
	if _, pool, err := cudaPool(d); err == nil {
		C.memtrack_pool_reset_highs(pool)
	}
}
