//go:build cuda

package cudatest

// #include "calls.h"
import "C"

import (
	"sync"
	"unsafe"

	"github.com/memtrack/memtrack/internal/cudadrv"
)

var load struct {
	once sync.Once
	err  error
}

// Load loads the driver (cudadrv.Load) and fills the table of the tests'
// calls, once per process. Until it has succeeded, every call answers
// CUDA_ERROR_NOT_SUPPORTED, as does an optional call the driver lacks.
func Load() error {
	load.once.Do(func() {
		if _, err := cudadrv.Load(); err != nil {
			load.err = err
			return
		}
		var n C.int
		entries := C.cudatest_table(&n)
		for _, m := range cudadrv.Fill(unsafe.Pointer(entries), int(n)) {
			if m.Essential {
				load.err = &m
				return
			}
		}
	})
	return load.err
}

// handleOf returns what a C helper made, as the package's functions return
// it.
func handleOf(h C.cudatest_handle) (uintptr, cudadrv.Result) {
	return uintptr(h.h), cudadrv.Result(h.r)
}
