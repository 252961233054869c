package memtrack

import (
	"fmt"
	"sync"
)

// mmapThreshold is the size from which CPU buffers come from the OS (mmap)
// and go back to it on Free, so that the process's resident memory follows
// the tracked figure; smaller buffers come from the Go heap.
const mmapThreshold = 1 << 20

// cpuBackend allocates host memory. It has one device, ordinal 0.
type cpuBackend struct {
	capOnce sync.Once
	cap     int64 // the most memory the process may hold: cgroup limit or RAM

	modelMu sync.Mutex
	model   *string // the CPU's model name, once read
}

func newCPUBackend() backend { return &cpuBackend{} }

func (*cpuBackend) devices() (int, error) { return 1, nil }

// capacity returns the memory the process can hold at most, read once.
func (c *cpuBackend) capacity() int64 {
	c.capOnce.Do(func() {
		if _, total, err := hostMemInfo(); err == nil {
			c.cap = total
		}
	})
	return c.cap
}

func (c *cpuBackend) alloc(_ int, size int64) (memory, error) {
	if size < mmapThreshold {
		return memory{host: make([]byte, size)}, nil
	}
	// Go's runtime aborts the process on a make it cannot satisfy, and an
	// mmap past RAM can succeed only to be killed when touched: refuse what
	// the machine (or cgroup) cannot hold, and let mmap refuse the rest.
	if limit := c.capacity(); limit > 0 && size > limit {
		return memory{}, &OutOfMemoryError{Reason: fmt.Sprintf("larger than the memory of this machine or cgroup (%s)", formatBytes(limit))}
	}
	b, err := mapMemory(size)
	if err != nil {
		return memory{}, &OutOfMemoryError{Reason: "mmap: " + err.Error()}
	}
	return memory{host: b}, nil
}

func (*cpuBackend) free(_ int, m memory) error {
	if len(m.host) < mmapThreshold {
		return nil // Go heap memory: the garbage collector takes it back
	}
	if err := unmapMemory(m.host); err != nil {
		return &BackendError{Op: "free", Err: fmt.Errorf("munmap: %w", err)}
	}
	return nil
}

func (*cpuBackend) memInfo(int) (free, total int64, err error) {
	free, total, err = hostMemInfo()
	if err != nil {
		return 0, 0, &BackendError{Op: "meminfo", Err: err}
	}
	return free, total, nil
}

// info names the CPU by its model, read once it reads without error; the
// CPU has no identifier.
func (c *cpuBackend) info(int) (name, uuid string, err error) {
	c.modelMu.Lock()
	defer c.modelMu.Unlock()
	if c.model == nil {
		m, err := cpuModelName()
		if err != nil {
			return "", "", &BackendError{Op: "info", Err: err}
		}
		c.model = &m
	}
	return *c.model, "", nil
}
