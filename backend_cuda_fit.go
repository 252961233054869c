//go:build cuda

package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/fit"
)

// The CUDA backend's rules for a prediction (fitBackend): cuMemAlloc
// grows the device's used memory by the size rounded up to the allocation
// granularity, a mapping takes whole granules (both
// cuMemGetAllocationGranularity's minimum, which the driver gives), and a
// memory pool reserves in chunks that the driver gives nowhere, learned
// once per device by a probe of a pool of memtrack's own
// (cudadrv.PoolChunk).

// fitRules returns the granularity of device ordinal, and, where pool is
// set, the chunk of its memory pools, probing them the first time.
func (b *cudaBackend) fitRules(ordinal int, pool bool) (fit.Rules, error) {
	dev, ctx, err := b.device(ordinal, "fit rules")
	if err != nil {
		return fit.Rules{}, err
	}
	g, err := granularityOf(dev)
	if err != nil {
		return fit.Rules{}, err
	}
	r := fit.Rules{AllocUnit: g}
	if pool {
		if err := b.poolsSupported(ordinal); err != nil {
			return fit.Rules{}, err
		}
		if r.PoolChunk, err = poolChunkOf(dev, ctx); err != nil {
			return fit.Rules{}, err
		}
	}
	return r, nil
}

// poolChunkOf returns the chunk in which dev's memory pools reserve
// memory, learning it by a probe the first time (one probe at a time);
// a failed probe is tried again by the next call.
func poolChunkOf(dev *cudaDevice, ctx cuContext) (int64, error) {
	if c := dev.poolChunk.Load(); c > 0 {
		return c, nil
	}
	dev.poolChunkMu.Lock()
	defer dev.poolChunkMu.Unlock()
	if c := dev.poolChunk.Load(); c > 0 {
		return c, nil
	}
	if err := cudadrv.PoolChunks(); err != nil {
		return 0, fmt.Errorf("%w: the chunk of the memory pools of cuda:%d: %w", ErrNotSupported, dev.ordinal, err)
	}
	p, c := cudadrv.PoolChunk(ctx)
	if err := dev.settle("pool chunk", resultOf(c)); err != nil {
		return 0, err
	}
	if p.Chunk <= 0 {
		return 0, fmt.Errorf("%w: the chunk of the memory pools of cuda:%d: a pool of 1 byte reserved %d bytes", ErrNotSupported, dev.ordinal, p.Chunk)
	}
	dev.poolChunk.Store(p.Chunk)
	return p.Chunk, nil
}
