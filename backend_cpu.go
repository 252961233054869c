package memtrack

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/fit"
	"github.com/memtrack/memtrack/internal/hostmem"
	"github.com/memtrack/memtrack/internal/hostvm"
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

	// maps holds the buffers mapped from the OS (from mmapThreshold) and
	// the mappings of the reservations (the pages committed), so that the
	// figures can say how much of them is not resident yet.
	maps hostmem.Mappings

	// spaces holds the reservations of address space (vmmBackend), sorted
	// by base, so that a mapping finds its own.
	spacesMu sync.Mutex
	spaces   []*hostvm.Reservation
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

// fitRules gives the CPU's rules to a prediction: a buffer from
// mmapThreshold is mapped from the OS, in whole pages; a smaller one comes
// from the Go heap, taken as asked (the heap grows by spans of its own,
// which the prediction cannot know). The CPU has no memory pools.
func (*cpuBackend) fitRules(_ int, pool bool) (fit.Rules, error) {
	if pool {
		return fit.Rules{}, fmt.Errorf("%w: the CPU has no memory pools", ErrNotSupported)
	}
	return fit.Rules{AllocUnit: int64(os.Getpagesize()), HeapBelow: mmapThreshold}, nil
}

// notResident returns the bytes of the buffers mapped from the OS and of
// the reservations' mappings that are not resident (pages never written),
// which the process's resident set leaves out; it is read with the
// figures, never on the allocation path. Buffers under mmapThreshold come
// from the Go heap and are not in it.
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

// The CPU's elastic memory (vmmBackend): address space reserved with no
// access and no memory (package hostvm: mmap with PROT_NONE on Unix,
// VirtualAlloc with MEM_RESERVE on Windows), pages of it committed by a
// map and decommitted by an unmap, which gives their memory back to the OS
// at once, out of the process's resident set.

// vmmGranularity returns the page, or the reservations' granularity where
// that is larger (Windows's 64 KiB); it fails, wrapping ErrNotSupported, on
// an OS without reservations.
func (*cpuBackend) vmmGranularity(int) (int64, error) {
	if !hostvm.Supported() {
		return 0, fmt.Errorf("%w: %w", ErrNotSupported, hostvm.ErrNoReservations)
	}
	return max(hostvm.PageSize(), hostvm.ReserveGranularity()), nil
}

func (c *cpuBackend) reserve(_ int, size, _ int64) (uintptr, error) {
	r, err := hostvm.Reserve(size)
	if err != nil {
		if errors.Is(err, hostvm.ErrNoReservations) {
			err = fmt.Errorf("%w: %w", ErrNotSupported, err)
		}
		return 0, &callError{op: "reserve", err: err}
	}
	c.spacesMu.Lock()
	i, _ := slices.BinarySearchFunc(c.spaces, r.Base(), func(s *hostvm.Reservation, base uintptr) int { return cmpAddr(s.Base(), base) })
	c.spaces = slices.Insert(c.spaces, i, r)
	c.spacesMu.Unlock()
	return r.Base(), nil
}

// spaceOf returns the reservation that holds ptr, or nil.
func (c *cpuBackend) spaceOf(ptr uintptr) *hostvm.Reservation {
	c.spacesMu.Lock()
	defer c.spacesMu.Unlock()
	i, found := slices.BinarySearchFunc(c.spaces, ptr, func(s *hostvm.Reservation, p uintptr) int { return cmpAddr(s.Base(), p) })
	if !found {
		i--
	}
	if i < 0 || ptr-c.spaces[i].Base() >= uintptr(c.spaces[i].Size()) {
		return nil
	}
	return c.spaces[i]
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mapAt commits the pages, unless, beside what the device holds, they pass
// the capacity, as alloc refuses a buffer, and enters them in maps, as
// alloc enters a buffer mapped from the OS: a page is resident only from
// its first write, and NotResident counts the mapping's pages not written
// as it counts a buffer's.
func (c *cpuBackend) mapAt(_ int, ptr uintptr, size int64, m *memory) error {
	held := c.held()
	if capacity := c.capacity.Refuses(size, held, time.Now(), hostCapacity); capacity > 0 {
		return pastCapacity(capacity, held)
	}
	r := c.spaceOf(ptr)
	if r == nil {
		return &callError{op: "map", err: fmt.Errorf("%#x is in no reservation", ptr)}
	}
	off := int64(ptr - r.Base())
	host, err := r.Bytes(off, size)
	if err != nil {
		return &callError{op: "map", err: err}
	}
	if err := r.Commit(off, size); err != nil {
		return &callError{op: "map", oom: true, err: err}
	}
	c.maps.Add(host)
	m.ptr = ptr
	m.setHost(host)
	return nil
}

// unmap decommits the pages: their memory goes back to the OS at once. They
// leave maps first, so that NotResident never reads them decommitted; where
// the decommit fails, they stay mapped, and go back in.
func (c *cpuBackend) unmap(_ int, size int64, m *memory) error {
	r := c.spaceOf(m.ptr)
	if r == nil {
		return &callError{op: "unmap", err: fmt.Errorf("%#x is in no reservation", m.ptr)}
	}
	host := m.hostBytes(size)
	c.maps.Remove(host)
	if err := r.Decommit(int64(m.ptr-r.Base()), size); err != nil {
		c.maps.Add(host)
		return &callError{op: "unmap", err: err}
	}
	return nil
}

func (c *cpuBackend) freeSpace(_ int, base uintptr, _ int64) error {
	c.spacesMu.Lock()
	i, found := slices.BinarySearchFunc(c.spaces, base, func(s *hostvm.Reservation, b uintptr) int { return cmpAddr(s.Base(), b) })
	var r *hostvm.Reservation
	if found {
		r = c.spaces[i]
		c.spaces = slices.Delete(c.spaces, i, i+1)
	}
	c.spacesMu.Unlock()
	if r == nil {
		return &callError{op: "release", err: fmt.Errorf("no reservation at %#x", base)}
	}
	if err := r.Release(); err != nil {
		return &callError{op: "release", err: err}
	}
	return nil
}

// reservedResident returns the bytes of the reservations' pages that are
// resident, as the OS says page by page (mincore(2) on Linux): a page
// committed is memory from its first write until it is decommitted. It is
// exact where the process's resident set, which Usage reads, is not: that
// moves with everything else the process does (the Go runtime's heap, the
// race detector's shadow memory), and Linux gives it approximately
// (proc(5): "some of these values are inaccurate because of a
// kernel-internal scalability optimization").
func (c *cpuBackend) reservedResident(int) (int64, bool) {
	c.spacesMu.Lock()
	defer c.spacesMu.Unlock()
	var n int64
	for _, r := range c.spaces {
		b, err := r.Bytes(0, r.Size())
		if err != nil {
			return 0, false
		}
		m, err := hostmem.Resident(b)
		if err != nil {
			return 0, false
		}
		n += m
	}
	return n, true
}
