//go:build unix

package memtrack

import (
	"math"
	"syscall"
)

// mapMemory maps size bytes of zeroed anonymous memory.
func mapMemory(size int64) ([]byte, error) {
	if size > math.MaxInt {
		return nil, syscall.ENOMEM
	}
	return syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

// unmapMemory returns memory from mapMemory to the OS.
func unmapMemory(b []byte) error { return syscall.Munmap(b) }
