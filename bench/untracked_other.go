//go:build !unix

package bench

// mapMemory takes size bytes from the Go heap where mmap is not available,
// as memtrack's CPU backend does.
func mapMemory(size int) ([]byte, error) { return make([]byte, size), nil }

// unmapMemory leaves the memory to the garbage collector.
func unmapMemory([]byte) error { return nil }
