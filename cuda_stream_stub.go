//go:build !cuda

package memtrack

import "fmt"

// Stream-ordered allocation and memory pools are CUDA's: in a build without
// -tags cuda, each of these calls fails with ErrBackendNotBuilt.

func streamsNotBuilt(what string) error {
	return fmt.Errorf("%s: %w", what, unbuilt{kind: KindCUDA}.error())
}

// AllocAsync allocates size bytes in stream order on a CUDA device; this
// build has no CUDA backend, so it fails with [ErrBackendNotBuilt].
// Rebuild with -tags cuda.
func (d Device) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	return nil, streamsNotBuilt("memtrack: AllocAsync on " + d.String())
}

// AllocAsync allocates size bytes in stream order on a CUDA device, in the
// category; this build has no CUDA backend, so it fails with
// [ErrBackendNotBuilt].
func (c Category) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	return nil, streamsNotBuilt("memtrack: AllocAsync on " + c.String())
}

// FreeAsync frees a buffer of [Device.AllocAsync] in stream order; this
// build has no CUDA backend, so it fails with [ErrBackendNotBuilt].
func (b *Buffer) FreeAsync(stream Stream) error {
	return streamsNotBuilt("memtrack: FreeAsync")
}

// PoolStats returns the figures of a CUDA device's memory pool; this build
// has no CUDA backend, so it fails with [ErrBackendNotBuilt].
func (d Device) PoolStats() (PoolStats, error) {
	return PoolStats{Device: d}, streamsNotBuilt("memtrack: PoolStats of " + d.String())
}

// PoolUsage puts a CUDA device's figures beside its memory pool's; this
// build has no CUDA backend, so it fails with [ErrBackendNotBuilt].
func (d Device) PoolUsage() (PoolUsage, error) {
	return PoolUsage{Device: d}, streamsNotBuilt("memtrack: PoolUsage of " + d.String())
}

// TrimPool trims a CUDA device's memory pool; this build has no CUDA
// backend, so it fails with [ErrBackendNotBuilt].
func (d Device) TrimPool(keep int64) error {
	return streamsNotBuilt("memtrack: TrimPool of " + d.String())
}

// SetPoolReleaseThreshold sets a CUDA memory pool's release threshold; this
// build has no CUDA backend, so it fails with [ErrBackendNotBuilt].
func (d Device) SetPoolReleaseThreshold(bytes int64) error {
	return streamsNotBuilt("memtrack: SetPoolReleaseThreshold of " + d.String())
}

func sideAlloc(Device, int64) {}
func sideFree(Device, int64)  {}

func deviceHeld(_ Device, current, peak int64) (int64, int64) { return current, peak }

func resetDevicePeaks(Device) {}
