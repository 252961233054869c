//go:build cuda

package main

import (
	"runtime"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/cu" // was: "github.com/mumax/3/cuda/cu"
	rawcu "github.com/mumax/3/cuda/cu"
)

const bindingName = "tensors from the cu drop-in, workspaces from mumax's cu tracked with Device.Track"

// cudaBinding allocates GPU memory in device 0's primary context on the
// main goroutine's thread.
type cudaBinding struct{ dev memtrack.Device }

func init() {
	// CUDA contexts are current per OS thread: keep main on one.
	runtime.LockOSThread()
}

func newBinding() (binding, error) {
	dev, err := memtrack.CUDA(0)
	if err != nil {
		return nil, err
	}
	cu.CtxSetCurrent(cu.DevicePrimaryCtxRetain(cu.DeviceGet(0)))
	return cudaBinding{dev}, nil
}

func (c cudaBinding) device() memtrack.Device { return c.dev }

// tensor allocates through the drop-in: counted with no other change.
func (c cudaBinding) tensor(n int64) func() {
	p := cu.MemAlloc(n)
	return p.Free
}

// workspace allocates as a library does, through a binding of its own
// (here mumax's cu itself), which memtrack does not see.
func (c cudaBinding) workspace(n int64) (uintptr, func()) {
	p := rawcu.MemAlloc(n)
	return uintptr(p), func() { rawcu.MemFree(p) }
}
