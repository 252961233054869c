//go:build cuda

package memtrack

import (
	"runtime"
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// capturing runs f on a locked thread while stream s of d captures a graph
// begun in mode on that thread, and returns the number of nodes the graph
// captured and the result of ending the capture.
func capturing(t *testing.T, d Device, s Stream, mode cudatest.CaptureMode, f func()) (nodes int, r cudadrv.Result) {
	t.Helper()
	inContext(t, d, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), mode))
		f()
		nodes, r = cudatest.EndCapture(uintptr(s))
	})
	return nodes, r
}

// TestCUDACaptureRefusesStreamOrdered: while a stream captures a graph,
// AllocAsync and FreeAsync on it are refused (in a graph they would run at
// every launch, and the event recorded after the free would count it at
// every launch), and nothing moves; the capture stays valid and
// holds nothing of memtrack's.
func TestCUDACaptureRefusesStreamOrdered(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	live, err := d.AllocAsync(1<<20, s)
	require.NoError(t, err)
	before := d.MemoryStats()
	nodes, r := capturing(t, d, s, cudatest.CaptureGlobal, func() {
		b, err := d.AllocAsync(1<<20, s)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, ErrNotSupported)
		assert.ErrorContains(t, err, "capturing a CUDA graph")
		err = live.FreeAsync(s)
		assert.ErrorIs(t, err, ErrNotSupported)
		assert.False(t, live.Freed(), "the buffer stays live")
		assert.Equal(t, before, d.MemoryStats(), "no figure moves")
	})
	assert.Equal(t, cudadrv.Success, r, "the capture is still valid")
	assert.Zero(t, nodes, "memtrack put nothing in the graph")
	require.NoError(t, live.FreeAsync(s))
	syncStream(t, d, s)
	assert.Equal(t, before.Held-1<<20, d.MemoryStats().Held)
}

// TestCUDACaptureAllocDoesNotInvalidate: Device.Alloc and Free, from the
// capturing thread or from another, neither fail nor invalidate a capture
// begun in global mode (the driver forbids cuMemAlloc and cuMemFree then,
// and invalidates the capture, unless the calling thread's mode is relaxed).
func TestCUDACaptureAllocDoesNotInvalidate(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	allocFree := func() {
		b, err := d.Alloc(4096)
		if assert.NoError(t, err) {
			assert.NoError(t, b.Free())
		}
	}
	t.Run("same thread", func(t *testing.T) {
		_, r := capturing(t, d, s, cudatest.CaptureGlobal, allocFree)
		assert.Equal(t, cudadrv.Success, r)
	})
	t.Run("another thread", func(t *testing.T) {
		_, r := capturing(t, d, s, cudatest.CaptureGlobal, func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread() // surely another thread than the capture's
				defer runtime.UnlockOSThread()
				allocFree()
			}()
			<-done
		})
		assert.Equal(t, cudadrv.Success, r)
	})
}
