package memtrack

import (
	"fmt"
	"sync"
	"time"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/hostmem"
	"github.com/memtrack/memtrack/tracker"
)

// mmapThreshold is the size from which CPU buffers come from the OS (mmap)
// and go back to it on Free, so that the process's resident memory follows
// the tracked figure; smaller buffers come from the Go heap.
const mmapThreshold = 1 << 20

// cpuBackend allocates host memory. It has one device, ordinal 0.
//
// It refuses a request when the bytes its device holds plus the request
// pass the capacity, the most memory the process may hold (the cgroup's
// limit or the machine's memory): Go's runtime aborts the process on a make
// it cannot satisfy, and an mmap past RAM can succeed only to be killed when
// touched. The capacity is read when the device table is made and again
// when it is stale ([hostmem.Capacity]).
type cpuBackend struct {
	records  *tracker.Table   // the device table's records (recordUser)
	capacity hostmem.Capacity // read with hostCapacity, at time.Now

	modelMu sync.Mutex
	model   *string // the CPU's model name, once read (package hostmem)

	// maps holds the buffers mapped from the OS (from mmapThreshold), so
	// that the figures can say how much of them is not resident yet.
	maps hostmem.Mappings
}

func newCPUBackend() backend { return new(cpuBackend) }

// hostCapacity returns the memory of the machine, or of its cgroup where
// that is lower.
func hostCapacity() (int64, error) {
	_, total, err := hostmem.MemInfo()
	return total, err
}

func (c *cpuBackend) useRecords(t *tracker.Table) { c.records = t }

func (c *cpuBackend) devices() (int, error) {
	c.capacity.Get(time.Now(), hostCapacity)
	return 1, nil
}

// held returns the bytes the device holds.
func (c *cpuBackend) held() int64 {
	if c.records == nil {
		return 0
	}
	if r := c.records.Lookup(0); r != nil {
		return r.Tracked()
	}
	return 0
}

// alloc allocates size bytes, unless, beside what the device holds, they
// pass the capacity; a small buffer's memory may have come with its Buffer
// already (inlineHost), in m.host.
func (c *cpuBackend) alloc(_ int, size int64, m *memory) error {
	held := c.held()
	if size < mmapThreshold {
		if !c.capacity.Fits(size, held) {
			if capacity := c.capacity.Refuses(size, held, time.Now(), hostCapacity); capacity > 0 {
				return pastCapacity(capacity, held)
			}
		}
		if m.host == nil {
			m.setHost(make([]byte, size))
		}
		return nil
	}
	if capacity := c.capacity.Refuses(size, held, time.Now(), hostCapacity); capacity > 0 {
		return pastCapacity(capacity, held)
	}
	b, err := c.maps.Map(size)
	if err != nil {
		return &callError{op: "alloc", oom: true, err: fmt.Errorf("mmap: %w", err)}
	}
	m.setHost(b)
	return nil
}

// pastCapacity is the refusal of a request that, beside the held bytes the
// device holds already, passes the capacity.
func pastCapacity(capacity, held int64) error {
	return &callError{op: "alloc", oom: true, capacity: capacity, err: fmt.Errorf(
		"the machine or its cgroup gives the process at most %s, and the device already holds %s", bytesize.Format(capacity), bytesize.Format(held))}
}

// inlineHost reports that a CPU buffer of up to inlineMax bytes may come
// with its memory, which the allocation path allocates with the Buffer.
func (*cpuBackend) inlineHost() bool { return true }

// goHeap reports whether the memory of a buffer of size bytes is the Go
// heap's, which the garbage collector takes back with its Buffer.
func (*cpuBackend) goHeap(size int64) bool { return size < mmapThreshold }

func (c *cpuBackend) free(_ int, size int64, m *memory) error {
	if size < mmapThreshold {
		return nil // Go heap memory: the garbage collector takes it back
	}
	if err := c.maps.Unmap(m.hostBytes(size)); err != nil {
		return &callError{op: "free", err: fmt.Errorf("munmap: %w", err)}
	}
	return nil
}

// memInfo reports the CPU as a process sees it: the total is the machine's
// memory or its cgroup's limit where that is lower, and what is used is the
// process's own (its cgroup's usage where that limit applies, else its
// resident memory), so that free is what the process may still take. Where
// the OS gives no figure of the process, free is the machine's.
func (*cpuBackend) memInfo(int) (free, total int64, err error) {
	free, total, err = hostmem.MemInfo()
	if err != nil {
		return 0, 0, &callError{op: "meminfo", err: err}
	}
	if used, err := hostmem.ProcessUsed(); err == nil {
		free = max(total-used, 0)
	}
	return free, total, nil
}

// notResident returns the bytes of the buffers mapped from the OS that are
// not resident (pages never written), which the process's resident set
// leaves out; it is read with the figures, never on the allocation path.
// Buffers under mmapThreshold come from the Go heap and are not in it.
func (c *cpuBackend) notResident(int) (int64, error) {
	n, err := c.maps.NotResident()
	if err != nil {
		return 0, &callError{op: "meminfo", err: err}
	}
	return n, nil
}

// info names the CPU by its model, read once it reads without error; the
// CPU has no identifier.
func (c *cpuBackend) info(int) (name, uuid string, err error) {
	c.modelMu.Lock()
	defer c.modelMu.Unlock()
	if c.model == nil {
		m, err := hostmem.ModelName()
		if err != nil {
			return "", "", &callError{op: "info", err: err}
		}
		c.model = &m
	}
	return *c.model, "", nil
}
