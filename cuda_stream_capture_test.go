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
