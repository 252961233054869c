//go:build cuda

package memtrack

import (
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// destroyedChild names, in a child process, the test it runs
// (childtest.InChild).
const destroyedChild = "MEMTRACK_DESTROYED_STREAM_CHILD"

// TestCUDAReadingsAfterStreamDestroyed: memtrack calls the driver with a
// stream's handle only where the program passes that stream in the same
// call. cuStreamDestroy releases the handle, and a call with it afterwards
// is undefined behaviour: an NVIDIA H200 stopped the process with SIGSEGV
// where Graphs.Captures asked cuStreamGetCtx about the stream of a capture
// that had ended, its stream destroyed, and the fake driver stops the
// process there, naming the call (testdata/fakecuda/RULES.md). Here a
// capture that memtrack saw in progress ends, and its stream is destroyed,
// without memtrack being told; and a buffer freed in stream order on
// another stream, which the program destroys before any reading learned
// that the free ran. Then every reading succeeds, Graphs.Captures lists
// the capture as memtrack last saw it, in progress with its nodes, and the
// free is learned to have run (Held drops), by the event memtrack recorded
// after it, which outlives its stream. It runs in a process of its own,
// whose device has seen no other test's capture.
func TestCUDAReadingsAfterStreamDestroyed(t *testing.T) {
	if !childtest.InChild(t, destroyedChild) {
		return
	}
	d := cudaDevices(t, 1)[0]
	if _, err := d.Graphs().Stats(); err != nil {
		require.ErrorIs(t, err, ErrNotSupported)
		t.Skip(err)
	}
	var s uintptr
	var seen Capture
	inContext(t, d, func() {
		var r cudadrv.Result
		s, r = cudatest.StreamCreate()
		require.Equal(t, cudadrv.Success, r)
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureRelaxed))
		b, err := d.AllocAsync(4096, Stream(s))
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(Stream(s)))
		seen, err = d.Graphs().Capture(Stream(s))
		require.NoError(t, err)
		g, r := cudatest.EndCaptureGraph(s)
		require.Equal(t, cudadrv.Success, r)
		require.Equal(t, cudadrv.Success, cudatest.GraphDestroy(g))
		require.Equal(t, cudadrv.Success, cudatest.StreamDestroy(s))
	})
	heldBefore := d.MemoryStats().Held
	inContext(t, d, func() {
		s2, r := cudatest.StreamCreate()
		require.Equal(t, cudadrv.Success, r)
		b, err := d.AllocAsync(1<<20, Stream(s2))
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(Stream(s2)))
		require.Equal(t, cudadrv.Success, cudatest.StreamDestroy(s2))
	})
	require.NotZero(t, seen.ID)
	assert.Equal(t, Capture{Device: d, ID: seen.ID, Stream: Stream(s), Capturing: true, Allocs: 1, Frees: 1, Need: seen.Need}, seen)

	list, err := d.Graphs().Captures()
	require.NoError(t, err)
	assert.Equal(t, []Capture{seen}, list, "the capture as memtrack last saw it: memtrack asks nothing of a stream it was not given")
	for _, rd := range cudaReadings(t, d, newStream(t, d)) {
		assert.NoError(t, rd.read(), rd.name)
	}
	assert.Equal(t, heldBefore, d.MemoryStats().Held, "the free on the destroyed stream ran, and is known to have")
}
