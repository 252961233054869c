//go:build !cuda

package memtrack

import "fmt"

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

// Stats returns the figures of a CUDA device's default memory pool as
// the driver reports them. It fails with [ErrNotSupported] on a device that
// is not a CUDA GPU or has no memory pools.
func (p Pool) Stats() (PoolStats, error) {
	d := p.dev
	return PoolStats{Device: d}, streamsUnsupported("PoolStats", d)
}

// Usage returns the tracked and device-side figures of a CUDA device
// beside its memory pool's; see [PoolUsage] for how to read their
// differences. It fails as [Pool.Stats] does.
func (p Pool) Usage() (PoolUsage, error) {
	d := p.dev
	return PoolUsage{Device: d}, streamsUnsupported("PoolUsage", d)
}

// Trim returns to a CUDA device the memory its pool reserves beyond
// max(keep, what is in use) (cuMemPoolTrimTo), the counterpart of
// torch.cuda.empty_cache for stream-ordered memory. It fails with
// [ErrInvalidSize] for keep < 0 and with [ErrNotSupported] where the device
// has no memory pool.
func (p Pool) Trim(keep int64) error {
	d := p.dev
	if err := checkPoolBytes("Pool().Trim", "bytes to keep", keep, d); err != nil {
		return err
	}
	return streamsUnsupported("Pool().Trim", d)
}

// SetReleaseThreshold sets how much reserved memory a CUDA device's pool
// keeps at each synchronization (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD). It fails
// with [ErrInvalidSize] for a negative threshold and with [ErrNotSupported]
// where the device has no memory pool.
func (p Pool) SetReleaseThreshold(bytes int64) error {
	d := p.dev
	if err := checkPoolBytes("Pool().SetReleaseThreshold", "release threshold in bytes", bytes, d); err != nil {
		return err
	}
	return streamsUnsupported("Pool().SetReleaseThreshold", d)
}
