//go:build unix

package bench

import "syscall"

// mapMemory maps size bytes of anonymous memory, as memtrack's CPU backend
// does.
func mapMemory(size int) ([]byte, error) {
	return syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

// unmapMemory returns memory from mapMemory to the OS.
func unmapMemory(b []byte) error { return syscall.Munmap(b) }
