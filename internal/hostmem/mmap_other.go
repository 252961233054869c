//go:build !unix

package hostmem

import (
	"errors"
	"math"
)

// Map allocates size bytes from the Go heap where mmap is not
// available; the memory goes back to the OS when the garbage collector and
// scavenger release it, not at once.
func Map(size int64) ([]byte, error) {
	if size > math.MaxInt {
		return nil, errors.New("size exceeds the address space")
	}
	return make([]byte, size), nil
}

// Unmap does nothing here: the garbage collector returns the memory.
func Unmap([]byte) error { return nil }
