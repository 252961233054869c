package memtrack

import "fmt"

// Stream is a CUDA stream (a CUstream handle), for stream-ordered
// allocation with [Device.AllocAsync] and [Buffer.FreeAsync]. The zero
// Stream is [DefaultStream]. A stream of github.com/mumax/3/cuda/cu converts
// to it, memtrack.Stream(cu.StreamCreate()), and so does the handle of
// another binding, memtrack.Stream(h) for a uintptr h. A Stream belongs to
// the device whose context created it; memtrack never destroys one.
type Stream uintptr

// DefaultStream is the legacy default stream (the NULL stream) of the
// device's primary context.
const DefaultStream Stream = 0

// The stream-ordered calls ([Device.AllocAsync], [Category.AllocAsync]) and
// the pool calls ([Device.PoolStats], [Device.PoolUsage], [Device.TrimPool],
// [Device.SetPoolReleaseThreshold]) check in one order in every build, with
// or without -tags cuda, as [Device.Alloc] does: their argument first
// (ErrInvalidSize for a size, keep or threshold out of range), then the
// device (ErrInvalidDevice for the zero Device, ErrBackendNotBuilt for a
// CUDA device in a build without the tag, ErrNotSupported for a device that
// is not a CUDA GPU or has no memory pools), then the stream.

// checkAsyncSize is the argument check of a stream-ordered allocation.
func checkAsyncSize(size int64, d Device) error {
	if size <= 0 {
		return fmt.Errorf("%w: %d bytes requested on %v", ErrInvalidSize, size, d)
	}
	return nil
}

// checkPoolBytes is the argument check of a pool call given a number of
// bytes, what, that must not be negative.
func checkPoolBytes(op, what string, n int64, d Device) error {
	if n < 0 {
		return fmt.Errorf("%w: %s(%d) on %v: want the %s, >= 0", ErrInvalidSize, op, n, d, what)
	}
	return nil
}

// notCUDA is the error of a stream-ordered or pool call on d, which is not
// a CUDA device: the zero Device is no device, and a CPU or Metal device
// never has CUDA's pools.
func notCUDA(op string, d Device) error {
	if d.kind == 0 || d.kind >= numKinds {
		return errZeroDevice(d)
	}
	return fmt.Errorf("%w: %s on %v: stream-ordered allocation and memory pools are CUDA's", ErrNotSupported, op, d)
}

// PoolStats are the figures of a CUDA device's current memory pool (the
// default one unless cuDeviceSetMemPool set another), the one
// [Device.AllocAsync] allocates from, as the driver reports them
// (cuMemPoolGetAttribute). Reserved is what the pool holds of the device,
// used or not: PyTorch's memory_reserved and max_memory_reserved. Used is
// what live stream-ordered allocations take of it, by anyone in the process,
// rounded as the driver rounds them. The highs are reset by
// [Device.ResetPeakMemoryStats].
type PoolStats struct {
	Device           Device
	PoolReserved     int64 // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
	PeakPoolReserved int64 // CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
	PoolUsed         int64 // CU_MEMPOOL_ATTR_USED_MEM_CURRENT
	PeakPoolUsed     int64 // CU_MEMPOOL_ATTR_USED_MEM_HIGH
	ReleaseThreshold int64 // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
}

// String describes the pool's figures on one line.
func (p PoolStats) String() string {
	return fmt.Sprintf("%v pool: reserved %s (high %s), used %s (high %s), release threshold %s",
		p.Device, exactBytes(p.PoolReserved), exactBytes(p.PeakPoolReserved),
		exactBytes(p.PoolUsed), exactBytes(p.PeakPoolUsed), exactBytes(p.ReleaseThreshold))
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
// in it, which [Device.TrimPool] returns to the device. The figures are read
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

// poolUsage puts the figures side by side; pooled is the part of held that
// stream-ordered buffers take.
func poolUsage(d Device, tracked, held, pooled int64, p PoolStats) PoolUsage {
	return PoolUsage{
		Device: d, Tracked: tracked, Held: held, PoolUsed: p.PoolUsed, PoolReserved: p.PoolReserved,
		InFlight: held - tracked, Rounding: max(0, p.PoolUsed-pooled), Cached: p.PoolReserved - p.PoolUsed,
	}
}
