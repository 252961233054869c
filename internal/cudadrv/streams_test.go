//go:build cuda

package cudadrv_test

import (
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countsCalls skips t where the driver counts no calls (a real one).
func countsCalls(t *testing.T) {
	t.Helper()
	if _, ok := cudatest.DriverCalls("cuInit"); !ok {
		t.Skip("the driver counts no calls: needs the fake driver of testdata/fakecuda")
	}
}

// calls returns how many calls of entry point name the process has made.
func calls(name string) uint64 {
	n, _ := cudatest.DriverCalls(name)
	return n
}

// TestDefaultStreamContext: a default stream's handle names the default
// stream of the thread's current context, so the stream-ordered calls ask
// the driver for the stream's context (cuStreamGetCtx) only for a stream
// of one's own; each reports the stream's context.
func TestDefaultStreamContext(t *testing.T) {
	ctx := primary(t, 0)
	countsCalls(t)
	if err := cudadrv.MemPools(); err != nil {
		t.Skip(err)
	}
	own := newStream(t, ctx)
	for _, c := range []struct {
		name   string
		stream uintptr
		asks   uint64
	}{
		{"NULL", 0, 0},
		{"CU_STREAM_LEGACY", cudadrv.StreamLegacy, 0},
		{"CU_STREAM_PER_THREAD", cudadrv.StreamPerThread, 0},
		{"a stream of its own", own, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := calls("cuStreamGetCtx")
			a := cudadrv.AllocAsync(ctx, 1<<10, c.stream)
			require.Equal(t, cudadrv.Call{}, a.Call)
			assert.Equal(t, ctx, a.StreamCtx)
			assert.False(t, a.Foreign)
			f := cudadrv.FreeAsync(ctx, a.Ptr, c.stream, cudadrv.Event{})
			require.Equal(t, cudadrv.Call{}, f.Call)
			assert.Equal(t, ctx, f.StreamCtx)
			assert.Equal(t, 2*c.asks, calls("cuStreamGetCtx")-before)
			onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(c.stream)) })
			cudadrv.EventDestroy(f.Event)
		})
	}
}
