//go:build cuda

package memtrack

// The figures and controls of each CUDA device's current memory pool, the
// one AllocAsync allocates from (cuda_stream.go): cuMemAllocAsync takes
// memory from the pool current to the stream's device (cuDeviceGetMemPool),
// which is the default pool unless cuDeviceSetMemPool set another, so the
// pool is looked up at every reading.

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/mumax/3/cuda/cu"
)

// poolsSupported fails where CUDA device d has no memory pools.
func poolsSupported(d Device) error {
	supported, r := cudadrv.PoolsSupported(d.ordinal)
	if r != cudadrv.Success {
		return fillError(resultError("memory pool", "", cu.Result(r)), d, 0, nil)
	}
	if !supported {
		return fmt.Errorf("%w: %v has no memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0): stream-ordered allocation needs CUDA 11.2 or later and a device that supports it; allocate with Device.Alloc instead",
			ErrNotSupported, d)
	}
	return nil
}

// currentPool returns the current memory pool of CUDA device d.
func currentPool(d Device) (cudadrv.Pool, error) {
	p, r := cudadrv.MemPool(d.ordinal)
	if r != cudadrv.Success {
		return p, fillError(resultError("memory pool", "", cu.Result(r)), d, 0, nil)
	}
	return p, nil
}

// PoolStats returns the figures of the device's current memory pool (the
// default pool, unless cuDeviceSetMemPool set another) as the driver
// reports them. It fails with [ErrNotSupported] on a device that is
// not a CUDA GPU or has no memory pools.
func (d Device) PoolStats() (PoolStats, error) {
	_, pool, err := cudaPool(d)
	if err != nil {
		return PoolStats{Device: d}, err
	}
	s, r := cudadrv.PoolGet(pool)
	if r != cudadrv.Success {
		return PoolStats{Device: d}, fillError(resultError("memory pool", "", cu.Result(r)), d, 0, nil)
	}
	return PoolStats{
		Device:           d,
		PoolReserved:     s.PoolReserved,
		PeakPoolReserved: s.PeakPoolReserved,
		PoolUsed:         s.PoolUsed,
		PeakPoolUsed:     s.PeakPoolUsed,
		ReleaseThreshold: s.ReleaseThreshold,
	}, nil
}

// PoolUsage returns the tracked and device-side figures of the device beside
// its memory pool's; see [PoolUsage] for how to read their differences.
func (d Device) PoolUsage() (PoolUsage, error) {
	st := d.MemoryStats()
	var pooled int64
	if sd := sideOf(d.ordinal); d.kind == KindCUDA && sd != nil {
		pooled = sd.pooled.Load()
	}
	p, err := d.PoolStats()
	if err != nil {
		return PoolUsage{Device: d, Tracked: st.Tracked, Held: st.Held}, err
	}
	return poolUsage(d, st.Tracked, st.Held, pooled, p), nil
}

// TrimPool returns to the device the memory the pool reserves beyond
// max(keep, what is in use) (cuMemPoolTrimTo): the counterpart of
// torch.cuda.empty_cache for stream-ordered memory. A pool of 64 MiB
// reserved with 2 MiB in use holds, after TrimPool(0), the 2 MiB (rounded
// up to the driver's granularity); [PoolStats] shows the figures before and
// after. The driver trims only memory whose frees the host has observed
// complete, "eg. by a synchronize": a buffer freed with [Buffer.FreeAsync]
// whose stream has not been synchronized may stay reserved even once the
// device-side figure no longer counts it (FreeAsync learns of executed
// frees by event queries, which the driver need not count), so TrimPool can
// return less than [PoolUsage].Cached suggests; synchronize the streams
// first to return all of it. It fails with [ErrInvalidSize] for keep < 0 and with
// [ErrNotSupported] where the device has no memory pool.
func (d Device) TrimPool(keep int64) error {
	if keep < 0 {
		return fmt.Errorf("%w: TrimPool(%d) on %v: want the bytes to keep, >= 0", ErrInvalidSize, keep, d)
	}
	_, pool, err := cudaPool(d)
	if err != nil {
		return err
	}
	if r := cudadrv.PoolTrimTo(pool, keep); r != cudadrv.Success {
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
	if r := cudadrv.PoolSetReleaseThreshold(pool, bytes); r != cudadrv.Success {
		return fillError(resultError("set release threshold", "", cu.Result(r)), d, 0, nil)
	}
	return nil
}

// resetPoolHighs resets the pool's high-water marks, where d has a pool.
func (sd *deviceSide) resetPoolHighs(d Device) {
	if _, pool, err := cudaPool(d); err == nil {
		cudadrv.PoolResetHighs(pool)
	}
}
