package hostmem

import (
	"sync"
	"time"

	"go.uber.org/atomic"
)

// CapacityValidity is how long a [Capacity] trusts the figure it last
// read (the machine's memory, or its cgroup's limit, which can change at
// run time) before a request that needs it reads it again.
const CapacityValidity = 100 * time.Millisecond

// Capacity is the most memory the process may hold, as it was last read,
// and when: the CPU backend refuses a request past it, where Go's runtime
// would abort the process on a make it cannot satisfy and an mmap past RAM
// can succeed only to be killed when touched. The zero Capacity has read
// nothing: its figure is unknown until the first read.
//
// The figure is read again, once it is older than [CapacityValidity], by
// a request that [Capacity.Refuses] checks: the backend asks it for a
// large request (one that makes a system call anyway) and for a small one
// that [Capacity.Fits] does not let pass. A small request that fits reads
// no file and no clock: one atomic load of the figure.
type Capacity struct {
	figure atomic.Int64 // the figure last read; 0 if unknown
	mu     sync.Mutex   // serialises reads
	readAt time.Time    // when it was last read, under mu; zero if never
}

// Get returns the capacity at time now, read with read first if it was
// never read or was read CapacityValidity or more before now; 0 if
// unknown. A read that fails, or gives no positive figure, keeps the
// figure there was, and is not tried again before CapacityValidity has
// passed.
func (c *Capacity) Get(now time.Time, read func() (int64, error)) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readAt.IsZero() || now.Sub(c.readAt) >= CapacityValidity {
		if v, err := read(); err == nil && v > 0 {
			c.figure.Store(v)
		}
		c.readAt = now
	}
	return c.figure.Load()
}

// Fits reports whether size bytes, beside the held bytes the device holds
// already, fit the figure last read, or find it unknown, without reading
// it again: one atomic load. A request that does not is checked by
// Refuses.
func (c *Capacity) Fits(size, held int64) bool {
	last := c.figure.Load()
	return last <= 0 || size <= last-held
}

// Refuses returns the capacity that size bytes, beside the held bytes the
// device holds already, pass, or 0 where they fit or the capacity is
// unknown; the capacity is read again first where it is stale at now
// ([Capacity.Get]).
func (c *Capacity) Refuses(size, held int64, now time.Time, read func() (int64, error)) int64 {
	if capacity := c.Get(now, read); capacity > 0 && size > capacity-held {
		return capacity
	}
	return 0
}
