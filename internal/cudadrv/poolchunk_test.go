//go:build cuda

package cudadrv_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
)

// poolFigures is what the probe must leave as it was: the device's current
// pool's figures and the device's free memory.
type poolFigures struct {
	pool cudadrv.PoolAttributes
	free int64
}

func readPool(t *testing.T, ctx cudadrv.Context) poolFigures {
	t.Helper()
	p, r := cudadrv.MemPool(0)
	require.Equal(t, cudadrv.Success, r)
	a, r := cudadrv.PoolGet(p)
	require.Equal(t, cudadrv.Success, r)
	free, _, c := cudadrv.MemInfo(ctx)
	require.Equal(t, cudadrv.Call{}, c)
	return poolFigures{a, free}
}

// PoolChunk learns the chunk of the device's memory pools by a pool of its
// own: the device's current pool reserves that chunk for one byte, and two
// for a chunk and a byte, whatever the driver's chunk; the probe leaves the
// current pool's figures, its high-water marks and the device's free memory
// as they were, keeps the current pool current, and breaks no capture
// begun in global mode, on another thread or the calling one.
func TestPoolChunk(t *testing.T) {
	ctx := primary(t, 0)
	if ok, r := cudadrv.PoolsSupported(0); r != cudadrv.Success || !ok {
		t.Skip("no memory pools")
	}
	require.NoError(t, cudadrv.PoolChunks())
	pool, r := cudadrv.MemPool(0)
	require.Equal(t, cudadrv.Success, r)
	require.Equal(t, cudadrv.Success, cudadrv.PoolTrimTo(pool, 0))
	require.Equal(t, cudadrv.Success, cudadrv.PoolResetHighs(pool))

	before := readPool(t, ctx)
	p, c := cudadrv.PoolChunk(ctx)
	require.Equal(t, cudadrv.Call{}, c)
	require.Positive(t, p.Chunk)
	assert.GreaterOrEqual(t, p.Used, int64(1), "the byte, as the pool rounds it")
	for range 5 {
		again, c := cudadrv.PoolChunk(ctx)
		require.Equal(t, cudadrv.Call{}, c)
		assert.Equal(t, p, again)
	}
	assert.Equal(t, before, readPool(t, ctx), "the probe leaves the current pool and the device as they were")
	t.Logf("chunk %d bytes", p.Chunk)

	t.Run("the current pool reserves in it", func(t *testing.T) {
		s := newStream(t, ctx)
		for _, tc := range []struct{ size, reserved int64 }{{1, p.Chunk}, {p.Chunk, p.Chunk}, {p.Chunk + 1, 2 * p.Chunk}} {
			onThread(t, ctx, func() {
				ptr, r := cudatest.AllocAsync(uintptr(ctx), tc.size, s)
				require.Equal(t, cudadrv.Success, r)
				a, r := cudadrv.PoolGet(pool)
				require.Equal(t, cudadrv.Success, r)
				assert.Equal(t, tc.reserved, a.PoolReserved, "%d bytes from the device's pool", tc.size)
				require.Equal(t, cudadrv.Success, cudatest.FreeAsync(uintptr(ctx), ptr, s, 0))
				require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s))
				require.Equal(t, cudadrv.Success, cudadrv.PoolTrimTo(pool, 0))
			})
		}
	})

	t.Run("a pool of the program's own stays current", func(t *testing.T) {
		own, r := cudatest.CreatePool(0)
		require.Equal(t, cudadrv.Success, r)
		def, r := cudatest.DefaultPool(0)
		require.Equal(t, cudadrv.Success, r)
		require.Equal(t, cudadrv.Success, cudatest.SetMemPool(0, own))
		defer func() {
			require.Equal(t, cudadrv.Success, cudatest.SetMemPool(0, def))
			require.Equal(t, cudadrv.Success, cudatest.DestroyPool(own))
		}()
		_, c := cudadrv.PoolChunk(ctx)
		require.Equal(t, cudadrv.Call{}, c)
		cur, r := cudadrv.MemPool(0)
		require.Equal(t, cudadrv.Success, r)
		assert.Equal(t, own, uintptr(cur))
	})

	for _, where := range []string{"another thread", "the capturing thread"} {
		t.Run("during a global capture on "+where, func(t *testing.T) {
			s := newStream(t, ctx)
			var got cudadrv.PoolProbe
			var c cudadrv.Call
			probe := func() { got, c = cudadrv.PoolChunk(ctx) }
			onThread(t, ctx, func() {
				require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureGlobal))
				ptr, r := cudatest.AllocAsync(uintptr(ctx), 1<<20, s)
				require.Equal(t, cudadrv.Success, r)
				if where == "another thread" {
					var wg sync.WaitGroup
					wg.Go(func() { onThread(t, ctx, probe) })
					wg.Wait()
				} else {
					probe()
				}
				require.Equal(t, cudadrv.Success, cudatest.FreeAsync(uintptr(ctx), ptr, s, 0), "the capture goes on")
				g, r := cudatest.EndCaptureGraph(s)
				require.Equal(t, cudadrv.Success, r, "and ends with its graph")
				require.Equal(t, cudadrv.Success, cudatest.GraphDestroy(g))
			})
			require.Equal(t, cudadrv.Call{}, c)
			assert.Equal(t, p, got)
		})
	}
}

// Without a call of its probe, PoolChunk says which (PoolChunks) and
// answers CUDA_ERROR_NOT_SUPPORTED, having made nothing; the device's
// pools work as before.
func TestPoolChunkMissing(t *testing.T) {
	if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", "FAKECUDA_HIDE=cuMemAllocFromPoolAsync") {
		return
	}
	requireFakeDriver(t)
	ctx := primary(t, 0)
	var m *cudadrv.MissingError
	require.ErrorAs(t, cudadrv.PoolChunks(), &m)
	assert.Equal(t, "cuMemAllocFromPoolAsync", m.Call)
	require.NoError(t, cudadrv.MemPools(), "stream-ordered allocation is there")
	before := readPool(t, ctx)
	p, c := cudadrv.PoolChunk(ctx)
	assert.Equal(t, cudadrv.NotSupported, c.Op)
	assert.Equal(t, cudadrv.PoolProbe{}, p)
	assert.Equal(t, before, readPool(t, ctx))
}
