//go:build rocm

package hiptest

// #include "calls.h"
import "C"

import (
	"sync"
	"unsafe"

	"github.com/memtrack/memtrack/internal/hipdrv"
)

var load struct {
	once sync.Once
	err  error
}

// Load loads the runtime (hipdrv.Load) and fills the table of the tests'
// calls, once per process. Until it has succeeded, every call answers
// hipErrorNotSupported, as does an optional call the runtime lacks.
func Load() error {
	load.once.Do(func() {
		if _, err := hipdrv.Load(); err != nil {
			load.err = err
			return
		}
		var n C.int
		entries := C.hiptest_table(&n)
		for _, m := range hipdrv.Fill(unsafe.Pointer(entries), int(n)) {
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
func handleOf(h C.hiptest_handle) (uintptr, hipdrv.Result) {
	return uintptr(h.h), hipdrv.Result(h.r)
}
