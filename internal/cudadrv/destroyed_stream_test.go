//go:build cuda

package cudadrv_test

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stream's handle is released by cuStreamDestroy, and a call with it is
// undefined behaviour: an NVIDIA H200 (driver 580.159.04) stopped the
// process with SIGSEGV where memtrack asked cuStreamGetCtx about a stream
// the program had destroyed. The fake driver stops the process at every
// call that takes the handle, naming the call and the handle
// (testdata/fakecuda/RULES.md); each case runs in a child process, which
// destroys a stream and makes one call with its handle.
func TestDestroyedStreamStops(t *testing.T) {
	requireFakeDriver(t)
	type env struct {
		ctx        cudadrv.Context
		live, gone uintptr // a stream, and the handle of one destroyed
	}
	cases := []struct {
		call string // the driver call the fake names
		make func(t *testing.T, e env)
	}{
		{"cuStreamQuery", func(t *testing.T, e env) { cudatest.StreamQuery(e.gone) }},
		{"cuStreamSynchronize", func(t *testing.T, e env) { cudatest.StreamSynchronize(e.gone) }},
		{"cuStreamGetCtx", func(t *testing.T, e env) { cudatest.StreamContext(e.gone) }},
		{"cuStreamGetCaptureInfo", func(t *testing.T, e env) { cudatest.CaptureStatus(e.gone, false) }},
		{"cuStreamIsCapturing", func(t *testing.T, e env) { cudatest.CaptureStatus(e.gone, true) }},
		{"cuEventRecord", func(t *testing.T, e env) { cudatest.RecordQuery(e.gone) }},
		{"cuStreamWaitEvent", func(t *testing.T, e env) { cudatest.StreamWait(e.gone, e.live) }},
		{"cuLaunchHostFunc", func(t *testing.T, e env) { cudatest.HoldStream(e.gone) }},
		{"cuMemsetD8Async", func(t *testing.T, e env) { cudatest.MemsetD8Async(0, 0, 0, e.gone) }},
		{"cuMemAllocAsync", func(t *testing.T, e env) { cudatest.AllocAsync(uintptr(e.ctx), 4096, e.gone) }},
		{"cuMemFreeAsync", func(t *testing.T, e env) {
			p, r := cudatest.AllocAsync(uintptr(e.ctx), 4096, e.live)
			require.Equal(t, cudadrv.Success, r)
			require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(e.live))
			cudatest.FreeAsync(uintptr(e.ctx), p, e.gone, 0)
		}},
		{"cuStreamBeginCapture", func(t *testing.T, e env) { cudatest.BeginCapture(e.gone, cudatest.CaptureRelaxed) }},
		{"cuStreamEndCapture", func(t *testing.T, e env) { cudatest.EndCapture(e.gone) }},
		{"cuGraphUpload", func(t *testing.T, e env) { cudatest.GraphUpload(emptyExec(t, e.live), e.gone) }},
		{"cuGraphLaunch", func(t *testing.T, e env) { cudatest.GraphLaunch(emptyExec(t, e.live), e.gone) }},
		{"cuStreamDestroy", func(t *testing.T, e env) { cudatest.StreamDestroy(e.gone) }},
		// memtrack's own calls on a stream begin with cuStreamGetCtx: it
		// makes them only with a handle the program passes in that call.
		{"cuStreamGetCtx", func(t *testing.T, e env) { cudadrv.CaptureInfo(e.ctx, e.gone) }},
		{"cuStreamGetCtx", func(t *testing.T, e env) { cudadrv.AllocAsync(e.ctx, 4096, e.gone) }},
	}
	handle := regexp.MustCompile(`destroyed stream (0x[0-9a-f]+)\n`)
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d/%s", i, c.call), func(t *testing.T) {
			child, out := childtest.InStoppedChild(t, "MEMTRACK_CUDADRV_CHILD")
			if !child {
				m := handle.FindStringSubmatch(out)
				require.NotNil(t, m, "the child names the handle it destroyed:\n%s", out)
				assert.Contains(t, out, fmt.Sprintf("fakecuda: %s with stream %s, which cuStreamDestroy destroyed", c.call, m[1]))
				assert.Contains(t, out, "SIGABRT", "the fake aborted the process")
				return
			}
			ctx := primary(t, 0)
			onThread(t, ctx, func() {
				e := env{ctx: ctx, live: newStream(t, ctx)}
				var r cudadrv.Result
				e.gone, r = cudatest.StreamCreate()
				require.Equal(t, cudadrv.Success, r)
				require.Equal(t, cudadrv.Success, cudatest.StreamDestroy(e.gone))
				fmt.Fprintf(os.Stderr, "destroyed stream %#x\n", e.gone)
				c.make(t, e)
				t.Errorf("%s with a destroyed stream's handle returned", c.call)
			})
		})
	}
}

// emptyExec returns a graph exec of a graph of no node, captured on stream.
func emptyExec(t *testing.T, stream uintptr) uintptr {
	t.Helper()
	require.Equal(t, cudadrv.Success, cudatest.BeginCapture(stream, cudatest.CaptureRelaxed))
	g, r := cudatest.EndCaptureGraph(stream)
	require.Equal(t, cudadrv.Success, r)
	e, r := cudatest.GraphInstantiate(g, false)
	require.Equal(t, cudadrv.Success, r)
	return e
}

// What outlives a destroyed stream is still the program's: an event
// recorded on the stream before, which the driver lets complete, answers;
// the stream's work ran (cuStreamDestroy drains it in the fake, where the
// driver "will return immediately and the resources associated with
// hStream will be released automatically once the device has completed all
// work in hStream"); and a stream created after it has a handle of its own
// (the fake never gives a destroyed stream's handle again).
func TestDestroyedStreamLeaves(t *testing.T) {
	requireFakeDriver(t)
	ctx := primary(t, 0)
	onThread(t, ctx, func() {
		s, r := cudatest.StreamCreate()
		require.Equal(t, cudadrv.Success, r)
		require.Equal(t, cudadrv.Success, cudatest.HoldStream(s))
		event, r := cudatest.RecordQuery(s)
		require.Equal(t, cudadrv.NotReady, r, "the host function holds the stream back")
		done := make(chan cudadrv.Result)
		go func() { done <- cudatest.InContext(uintptr(ctx), func() { done <- cudatest.StreamDestroy(s) }) }()
		cudatest.ReleaseStreams()
		assert.Equal(t, cudadrv.Success, <-done, "cuStreamDestroy")
		assert.Equal(t, cudadrv.Success, <-done, "its context")
		assert.Equal(t, cudadrv.Success, cudatest.EventQuery(event), "the event recorded before the destroy completed")
		assert.Equal(t, cudadrv.Success, cudatest.EventDestroy(event))
		for range 8 {
			n, r := cudatest.StreamCreate()
			require.Equal(t, cudadrv.Success, r)
			assert.NotEqual(t, s, n, "a new stream gets a handle of its own")
			assert.Equal(t, cudadrv.Success, cudatest.StreamQuery(n))
			require.Equal(t, cudadrv.Success, cudatest.StreamDestroy(n))
		}
	})
}
