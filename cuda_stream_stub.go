//go:build !cuda

package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/tracker"
)

// Stream-ordered allocation and memory pools are CUDA's. In a build without
// -tags cuda these calls keep the contract of the CUDA build for every
// device this build can give them (a CPU or Metal device is never a CUDA
// GPU, so they fail with ErrNotSupported there); a CUDA device, which this
// build cannot give, would fail with ErrBackendNotBuilt.

// streamsUnsupported is the error of a stream-ordered call or pool query on
// d in a build without CUDA.
func streamsUnsupported(op string, d Device) error {
	if d.kind == KindCUDA {
		return fmt.Errorf("%w: %s on %v needs the CUDA backend, compiled only with -tags cuda", ErrBackendNotBuilt, op, d)
	}
	return notCUDA(op, d)
}

// AllocAsync allocates size bytes on a CUDA device in stream order: from the
// device's default memory pool (cuMemAllocAsync), usable by work enqueued on
// stream after this call. It checks, counts and fails as [Device.Alloc]
// does, and fails with [ErrNotSupported] on a device that is not a CUDA GPU
// (the CPU and Metal devices never support it) or whose driver has no memory
// pools, changing nothing. Release the buffer with [Buffer.FreeAsync], or
// with [Buffer.Free] once the work that uses it is done. Only a build with
// -tags cuda has CUDA devices; see docs/streams.md.
func (d Device) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	if err := checkAsyncSize(size, d); err != nil {
		return nil, err
	}
	return nil, streamsUnsupported("AllocAsync", d)
}

// AllocAsync allocates size bytes in stream order on the category's device
// and counts them in the category, as [Device.AllocAsync] does on the
// device; in a build without -tags cuda it fails as Device.AllocAsync does
// (with [ErrInvalidCategory] for the zero Category), counting nothing.
func (c Category) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	if c.set == nil {
		return nil, fmt.Errorf("%w: AllocAsync of %d bytes through the zero Category; obtain one with Device.Category", ErrInvalidCategory, size)
	}
	return c.dev.AllocAsync(size, stream)
}

// FreeAsync frees a buffer of [Device.AllocAsync] in stream order
// (cuMemFreeAsync). It fails with [ErrDoubleFree] on a buffer already freed,
// with [ErrNilBuffer] on a nil buffer and with [ErrInvalidArgument] on a
// buffer that [Device.Alloc] allocated (free it with [Buffer.Free]); in a
// build without -tags cuda every buffer is one of these.
func (b *Buffer) FreeAsync(stream Stream) error {
	if !b.valid() {
		return b.refuseFree()
	}
	return fmt.Errorf("%w: FreeAsync of a %d-byte buffer on %v that Device.Alloc allocated; free it with Free", ErrInvalidArgument, b.size, b.Device())
}

// PoolStats returns the figures of a CUDA device's default memory pool as
// the driver reports them. It fails with [ErrNotSupported] on a device that
// is not a CUDA GPU or has no memory pools.
func (d Device) PoolStats() (PoolStats, error) {
	return PoolStats{Device: d}, streamsUnsupported("PoolStats", d)
}

// PoolUsage returns the tracked and device-side figures of a CUDA device
// beside its memory pool's; see [PoolUsage] for how to read their
// differences. It fails as [Device.PoolStats] does.
func (d Device) PoolUsage() (PoolUsage, error) {
	return PoolUsage{Device: d}, streamsUnsupported("PoolUsage", d)
}

// TrimPool returns to a CUDA device the memory its pool reserves beyond
// max(keep, what is in use) (cuMemPoolTrimTo), the counterpart of
// torch.cuda.empty_cache for stream-ordered memory. It fails with
// [ErrInvalidSize] for keep < 0 and with [ErrNotSupported] where the device
// has no memory pool.
func (d Device) TrimPool(keep int64) error {
	if err := checkPoolBytes("TrimPool", "bytes to keep", keep, d); err != nil {
		return err
	}
	return streamsUnsupported("TrimPool", d)
}

// SetPoolReleaseThreshold sets how much reserved memory a CUDA device's pool
// keeps at each synchronization (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD). It fails
// with [ErrInvalidSize] for a negative threshold and with [ErrNotSupported]
// where the device has no memory pool.
func (d Device) SetPoolReleaseThreshold(bytes int64) error {
	if err := checkPoolBytes("SetPoolReleaseThreshold", "release threshold in bytes", bytes, d); err != nil {
		return err
	}
	return streamsUnsupported("SetPoolReleaseThreshold", d)
}

func sideAlloc(Device, int64)  {}
func sideFree(Device, int64)   {}
func pooledFree(Device, int64) {}

func deviceHeld(_ Device, current, peak int64) (int64, int64) { return current, peak }

func resetDevicePeaks(Device) {}

// Without -tags cuda the device-side figure is the tracked one: a
// PeakScope needs no scope of its own for it.

func openHeldScope(Device) *tracker.Scope { return nil }

func heldScopePeak(_ Device, sc *tracker.Scope) int64 { return sc.Peak() }

func closeHeldScope(_ Device, sc *tracker.Scope) error {
	_, err := sc.Close()
	return err
}
