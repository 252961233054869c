package bench

import "github.com/memtrack/memtrack/internal/hostmem"

// mmapThreshold is the size from which memtrack's CPU backend maps buffers
// from the OS instead of taking them from the Go heap (memtrack's mmapThreshold).
const mmapThreshold = 1 << 20

// allocUntracked allocates size bytes the way memtrack's CPU backend does,
// without tracking them: from the Go heap below [mmapThreshold], mapped from
// the OS from there on (with the backend's own package hostmem). It is the baseline of the Device benchmarks.
func allocUntracked(size int) ([]byte, error) {
	if size < mmapThreshold {
		return make([]byte, size), nil
	}
	return hostmem.Map(int64(size))
}

// freeUntracked releases memory from [allocUntracked].
func freeUntracked(b []byte) error {
	if len(b) < mmapThreshold {
		return nil // the garbage collector takes it back
	}
	return hostmem.Unmap(b)
}
