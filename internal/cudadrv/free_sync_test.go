//go:build cuda

package cudadrv_test

import (
	"os"
	"testing"
	"time"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cuMemFree of a cuMemAlloc pointer "may perform implicit
// synchronization" (the reference; of a pointer of the stream-ordered
// allocator it "will not"). Whether it waits for a stream that a host
// function holds back: "waits", as an NVIDIA H200 (driver 580.159.04)
// did (testdata/gpu-runs/h200-2026-12-04-probes/tests.log), or "none"
// (FAKECUDA_FREE_SYNC=none). The free runs on another thread; the stream
// is let go once the free has returned or a second has passed, and the
// reading is whether the free returned before. It is logged as "free-sync
// reading: …" for scripts/gpu-check.sh and, on the fake, checked against
// the switch, then against the other reading in a process of its own.
func TestFreeSyncReading(t *testing.T) {
	observe := func(t *testing.T) string {
		ctx := primary(t, 0)
		held := newStream(t, ctx)
		onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(held)) })
		t.Cleanup(cudatest.ReleaseStreams)
		p, c := cudadrv.Alloc(ctx, 4096)
		require.Equal(t, cudadrv.Success, c.Op, "cuMemAlloc while a stream is held")
		freed := make(chan cudadrv.Call, 1)
		go func() { freed <- cudadrv.Free(ctx, p) }()
		reading := "waits"
		select {
		case c := <-freed:
			require.Equal(t, cudadrv.Success, c.Op)
			reading = "none"
			cudatest.ReleaseStreams()
		case <-time.After(time.Second):
			cudatest.ReleaseStreams()
			assert.Equal(t, cudadrv.Success, (<-freed).Op, "the free returns once the stream runs")
		}
		onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(held)) })
		return reading
	}
	t.Run("as configured", func(t *testing.T) {
		reading := observe(t)
		t.Logf("free-sync reading: %s (cuMemFree of a cuMemAlloc pointer while a blocking stream of its context is held back by a host function)", reading)
		if !isFake(t) {
			return
		}
		want := "waits"
		if os.Getenv("FAKECUDA_FREE_SYNC") == "none" {
			want = "none"
		}
		assert.Equal(t, want, reading, "the fake's reading, FAKECUDA_FREE_SYNC=%s", os.Getenv("FAKECUDA_FREE_SYNC"))
	})
	t.Run("none", func(t *testing.T) {
		if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", "FAKECUDA_FREE_SYNC=none") {
			return
		}
		requireFakeDriver(t)
		assert.Equal(t, "none", observe(t))
	})
}
