package memtrack

import (
	"sync"
	"time"

	"go.uber.org/atomic"
)

// cpuCapacityValidity is how long the CPU backend trusts the capacity it
// last read (the machine's memory, or its cgroup's limit, which can change
// at run time) before a request that needs it reads it again.
const cpuCapacityValidity = 100 * time.Millisecond

// cpuCapacity is the CPU backend's capacity, the most memory the process
// may hold, as it was last read, and when. The zero cpuCapacity has read
// nothing: its figure is unknown until the first read.
//
// The figure is read again, once it is older than [cpuCapacityValidity],
// by a large request (from mmapThreshold, which makes a system call
// anyway) and by a small one that the figure would refuse. A small request
// that fits reads no file and no clock: one atomic load of the figure.
type cpuCapacity struct {
	figure atomic.Int64 // the figure last read; 0 if unknown
	mu     sync.Mutex   // serialises reads
	readAt time.Time    // when it was last read, under mu; zero if never
}

// get returns the capacity at time now, read with read first if it was
// never read or was read cpuCapacityValidity or more before now; 0 if
// unknown. A read that fails, or gives no positive figure, keeps the
// figure there was, and is not tried again before cpuCapacityValidity has
// passed.
func (c *cpuCapacity) get(now time.Time, read func() (int64, error)) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readAt.IsZero() || now.Sub(c.readAt) >= cpuCapacityValidity {
		if v, err := read(); err == nil && v > 0 {
			c.figure.Store(v)
		}
		c.readAt = now
	}
	return c.figure.Load()
}

// fits reports whether size bytes, beside the held bytes the device holds
// already, fit without a read of the capacity: a request under
// mmapThreshold that fits the figure last read, or finds it unknown. It
// reads no file and no clock: one atomic load. A request that does not is
// checked by refuses.
func (c *cpuCapacity) fits(size, held int64) bool {
	last := c.figure.Load()
	return size < mmapThreshold && (last <= 0 || size <= last-held)
}

// refuses returns the capacity that size bytes, beside the held bytes the
// device holds already, pass, or 0 where they fit or the capacity is
// unknown; the capacity is read again first where it is stale at now
// ([cpuCapacity.get]).
func (c *cpuCapacity) refuses(size, held int64, now time.Time, read func() (int64, error)) int64 {
	if capacity := c.get(now, read); capacity > 0 && size > capacity-held {
		return capacity
	}
	return 0
}
