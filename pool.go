package memtrack

import (
	"fmt"
)

// Pool is the current memory pool of one CUDA or AMD (ROCm) device, the
// one [Device.AllocAsync] allocates from: its figures and controls. Obtain
// it with [Device.Pool]; it is a small comparable value, as [Device] is. On
// a device that is neither, or has no memory pools, its methods fail with
// [ErrNotSupported].
type Pool struct{ dev Device }

// Pool returns the device's current memory pool.
func (d Device) Pool() Pool { return Pool{dev: d} }

// Device returns the device of the pool.
func (p Pool) Device() Device { return p.dev }

// pools returns the stream-ordered allocator of the device of the pool, or
// the error of pool call op where it has none ([Device.streamTable]).
func (p Pool) pools(op string, change bool) (streamBackend, error) {
	_, sb, err := p.dev.streamTable(op, change, "stream-ordered allocation and memory pools")
	return sb, err
}

// Stats returns the figures of the device's current memory pool (the
// default pool, unless cuDeviceSetMemPool set another) as the driver
// reports them. It fails with [ErrNotSupported] on a device that is
// not a CUDA GPU or has no memory pools.
func (p Pool) Stats() (PoolStats, error) {
	sb, err := p.pools("PoolStats", false)
	if err != nil {
		return PoolStats{Device: p.dev}, err
	}
	ps, err := sb.poolStats(p.dev.ordinal)
	err = fillError(err, p.dev, 0, nil)
	ps.Device = p.dev
	return ps, err
}

// Usage returns the tracked and device-side figures of the device beside
// its memory pool's; see [PoolUsage] for how to read their differences.
// It fails as [Pool.Stats] does.
func (p Pool) Usage() (PoolUsage, error) {
	d := p.dev
	sb, err := p.pools("PoolUsage", false)
	if err != nil {
		return PoolUsage{Device: d}, err
	}
	var tracked int64
	if r := d.peek(); r != nil {
		tracked = r.Tracked()
	}
	held, _ := deviceHeld(d, tracked, tracked)
	pooled := sb.pooled(d.ordinal)
	ps, err := sb.poolStats(d.ordinal)
	err = fillError(err, d, 0, nil)
	if err != nil {
		return PoolUsage{Device: d, Tracked: tracked, Held: held}, err
	}
	return PoolUsage{
		Device: d, Tracked: tracked, Held: held, PoolUsed: ps.PoolUsed, PoolReserved: ps.PoolReserved,
		InFlight: held - tracked, Rounding: max(0, ps.PoolUsed-pooled), Cached: ps.PoolReserved - ps.PoolUsed,
	}, nil
}

// Trim returns to the device the memory the pool reserves beyond
// max(keep, what is in use) (cuMemPoolTrimTo): the counterpart of
// torch.cuda.empty_cache for stream-ordered memory. A pool of 64 MiB
// reserved with 2 MiB in use holds, after Pool().Trim(0), the 2 MiB (rounded
// up to the driver's granularity); [PoolStats] shows the figures before and
// after. The driver trims only memory whose frees the host has observed
// complete, "eg. by a synchronize": a buffer freed with [Buffer.FreeAsync]
// whose stream has not been synchronized may stay reserved even once the
// device-side figure no longer counts it (FreeAsync learns of executed
// frees by event queries, which the driver need not count), so Pool().Trim can
// return less than [PoolUsage].Cached suggests; synchronize the streams
// first to return all of it. It fails with [ErrInvalidSize] for keep < 0 and with
// [ErrNotSupported] where the device has no memory pool.
func (p Pool) Trim(keep int64) error {
	sb, err := p.change("Pool().Trim", "bytes to keep", keep)
	if err != nil {
		return err
	}
	return fillError(sb.trimPool(p.dev.ordinal, keep), p.dev, 0, nil)
}

// SetReleaseThreshold sets how much reserved memory the pool keeps at
// each synchronization (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD): with the
// driver's default of 0, the pool returns everything unused to the device
// whenever a stream, event or context is synchronized; with a threshold, it
// keeps up to that many bytes reserved for later allocations, which then
// cost no call to the OS. [PoolStats].PoolReserved shows the effect
// after the next synchronization. It fails with [ErrInvalidSize] for a
// negative threshold and with [ErrNotSupported] where the device has no
// memory pool.
func (p Pool) SetReleaseThreshold(bytes int64) error {
	sb, err := p.change("Pool().SetReleaseThreshold", "release threshold in bytes", bytes)
	if err != nil {
		return err
	}
	return fillError(sb.setReleaseThreshold(p.dev.ordinal, bytes), p.dev, 0, nil)
}

// change is the checks of pool call op that changes the pool to n bytes
// of what, which must not be negative: the argument first, then the
// device, as pools checks it (registering the device as used).
func (p Pool) change(op, what string, n int64) (streamBackend, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: %s(%d) on %v: want the %s, >= 0", ErrInvalidSize, op, n, p.dev, what)
	}
	return p.pools(op, true)
}

// PoolUsage puts side by side, for a CUDA device, the figures of its
// stream-ordered memory at two moments and at two levels, and names their
// differences:
//
//	Tracked       bytes of live buffers, counted when the host calls Free or FreeAsync
//	Held          bytes the device holds for this package's buffers: Tracked plus
//	              the buffers freed with FreeAsync whose stream has not reached the free
//	PoolUsed      the pool's used bytes, as the driver reports them
//	PoolReserved  the pool's reserved bytes, as the driver reports them
//
// Held - Tracked (InFlight) is memory freed on the host and still in use on
// the device. PoolUsed - Held (Rounding) counts only the stream-ordered
// buffers of Held, those [Device.AllocAsync] took from the pool (buffers of
// [Device.Alloc] are not in the pool): it is the driver's rounding of each
// allocation and stream-ordered allocations made outside this package, and
// is never negative. The driver's reference does not say when a free's
// bytes leave the pool's used figure: when the stream executes the free, or
// as soon as it is enqueued (memory freed on a stream may be reused at once
// by later allocations on that stream); under the second reading PoolUsed
// can fall below the stream-ordered part of Held by up to InFlight, and
// Rounding, taken as 0 there, is a lower bound. PoolReserved - PoolUsed
// (Cached) is memory the pool keeps for later allocations without anything
// in it, which [Pool.Trim] returns to the device. The figures are read
// one after another, not at one instant.
type PoolUsage struct {
	Device       Device
	Tracked      int64
	Held         int64
	PoolUsed     int64
	PoolReserved int64

	InFlight int64 // Held - Tracked: freed on the host, not yet on the device
	Rounding int64 // PoolUsed - Held of stream-ordered buffers, or 0: the driver's rounding and allocations outside this package
	Cached   int64 // PoolReserved - PoolUsed: reserved by the pool, used by nothing
}
