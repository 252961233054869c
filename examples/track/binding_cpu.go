//go:build !cuda

package main

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/memtrack/memtrack"
)

const bindingName = "Go memory, tracked with Device.Track; build with -tags cuda for the GPU through mumax's cu"

// cpuBinding allocates Go memory: the tensors are tracked as the binding
// allocates them, the workspaces by the caller.
type cpuBinding struct{ dev memtrack.Device }

func newBinding() (binding, error) {
	fmt.Fprintln(os.Stderr, "track: built without -tags cuda: running on the CPU")
	return cpuBinding{memtrack.CPU()}, nil
}

func (c cpuBinding) device() memtrack.Device { return c.dev }

func (c cpuBinding) tensor(n int64) func() {
	p := make([]byte, n)
	h, err := c.dev.Track(n, uintptr(unsafe.Pointer(&p[0])))
	check(err)
	return func() {
		check(h.Release())
		p = nil // the garbage collector frees it
	}
}

func (c cpuBinding) workspace(n int64) (uintptr, func()) {
	p := make([]byte, n)
	return uintptr(unsafe.Pointer(&p[0])), func() { p = nil }
}
