//go:build !unix

package memtrack

import (
	"errors"
	"math"
)

// mapMemory allocates size bytes from the Go heap where mmap is not
// available; the memory goes back to the OS when the garbage collector and
// scavenger release it, not at once.
func mapMemory(size int64) ([]byte, error) {
	if size > math.MaxInt {
		return nil, errors.New("size exceeds the address space")
	}
	return make([]byte, size), nil
}

func unmapMemory([]byte) error { return nil }
