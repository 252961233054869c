//go:build cuda

package rendertest

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Rendering is one way a package renders devices' figures: a scrape, a
// collection, a page, a profile, a dump.
type Rendering struct {
	Name   string
	Render func() error
}

// DuringCapture makes each rendering while a program captures a CUDA
// graph of a stream of d in global mode (cuStreamBeginCapture's default,
// and PyTorch's), from another goroutine and from the capturing thread
// itself (cudatest.DuringCapture): each must succeed, and the program's
// capture end with its graph. A free in stream order on d stays pending
// throughout, its stream held back, so that every figure that learns
// which frees have executed queries the driver; it is still held at the
// end. Run it in a child (InChild), on cuda:0 (CUDA0).
func DuringCapture(t *testing.T, d memtrack.Device, renderings []Rendering) {
	t.Helper()
	if _, err := d.Pool().Stats(); err != nil {
		t.Skipf("no memory pools: %v", err)
	}
	require.NoError(t, cudatest.Load())
	ctx, r := cudadrv.Retain(d.Ordinal())
	require.Equal(t, cudadrv.Success, r, "cuDevicePrimaryCtxRetain")
	held := cudatest.NewStream(t, uintptr(ctx))
	require.Equal(t, cudadrv.Success, cudatest.InContext(uintptr(ctx), func() {
		require.Equal(t, cudadrv.Success, cudatest.HoldStream(held))
	}))
	t.Cleanup(cudatest.ReleaseStreams) // before the stream is destroyed
	b, err := d.AllocAsync(1<<20, memtrack.Stream(held))
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(memtrack.Stream(held)))
	before := d.MemoryStats().Held
	for _, where := range cudatest.Threads {
		for _, rd := range renderings {
			t.Run(where.String()+"/"+rd.Name, func(t *testing.T) {
				var err error
				nodes, ended := cudatest.DuringCapture(t, d.Ordinal(), where, func() { err = rd.Render() })
				assert.NoError(t, err)
				assert.Equal(t, cudadrv.Success, ended, "the program's capture ends with its graph (901: invalidated)")
				assert.Equal(t, 1, nodes, "its one node")
			})
		}
	}
	assert.Equal(t, before, d.MemoryStats().Held, "the free still pending is still held")
}
