//go:build unix

package hostmem

import (
	"math"
	"syscall"
)

// Map maps size bytes of zeroed anonymous memory.
func Map(size int64) ([]byte, error) {
	if size > math.MaxInt {
		return nil, syscall.ENOMEM
	}
	return syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

// Unmap returns memory from Map to the OS.
func Unmap(b []byte) error { return syscall.Munmap(b) }
