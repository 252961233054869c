package tracker

import (
	"fmt"
	stdatomic "sync/atomic"

	"go.uber.org/atomic"
)

// MaxCount is the largest value a [Counter] holds. An Alloc that would take
// the current figure past it fails with [ErrCapacity]; no real memory comes
// near it (it is 4 EiB).
const MaxCount = 1 << 62

// Counter is a high-water-mark gauge: the current figure of one quantity and
// the largest value it has held since the last [Counter.ResetPeak]. It is
// exact under any concurrency and its zero value is ready to use.
//
// Alloc performs one atomic add, and a compare-and-swap only when the peak
// really rises; Free performs one compare-and-swap, which refuses a free of
// more than is held. The current figure and the peak sit on cache lines of
// their own, so the peak check is a load from a line that is only written
// when the peak rises.
//
// A Counter must not be copied after first use.
type Counter struct {
	_    [0]stdatomic.Int64 // 64-bit alignment on 32-bit platforms
	cur  atomic.Int64
	_    [cacheLineSize - 8]byte
	peak atomic.Int64
	_    [cacheLineSize - 8]byte
}

// Alloc adds n to the current figure and raises the peak if the result is a
// new high. It fails with [ErrInvalidSize] if n <= 0 and with [ErrCapacity]
// if the result would exceed [MaxCount]; a failed Alloc changes nothing.
func (c *Counter) Alloc(n int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if n > MaxCount {
		return fmt.Errorf("%w: %d exceeds %d", ErrCapacity, n, int64(MaxCount))
	}
	v := c.cur.Add(n)
	if v > MaxCount || v < 0 {
		// Only reachable past 4 EiB; the refused amount is visible to
		// concurrent readers until the next instruction takes it back.
		c.cur.Sub(n)
		return fmt.Errorf("%w: holding %d, adding %d", ErrCapacity, v-n, n)
	}
	raise(&c.peak, v)
	return nil
}

// AllocWithin adds n to the current figure only if the result stays within
// limit, so that concurrent callers can never exceed it together. It fails
// with a [*LimitError] (matching [ErrLimitExceeded]) if the limit would be
// passed; it performs a compare-and-swap loop instead of an add.
func (c *Counter) AllocWithin(n, limit int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	limit = min(limit, MaxCount)
	for {
		o := c.cur.Load()
		if n > limit-o {
			return &LimitError{Requested: n, Current: o, Limit: limit}
		}
		if c.cur.CompareAndSwap(o, o+n) {
			raise(&c.peak, o+n)
			return nil
		}
	}
}

// Free subtracts n from the current figure. It fails with [ErrInvalidSize]
// if n <= 0 and with [ErrFreeExceedsHeld] if n is more than is held; a failed
// Free changes nothing, so the current figure never goes negative.
func (c *Counter) Free(n int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	for {
		o := c.cur.Load()
		if n > o {
			return freeExceeds(n, o)
		}
		if c.cur.CompareAndSwap(o, o-n) {
			return nil
		}
	}
}

// Current returns the current figure.
func (c *Counter) Current() int64 { return c.cur.Load() }

// Peak returns the largest value the current figure has held since the last
// [Counter.ResetPeak]. It is never below the current figure read before it.
func (c *Counter) Peak() int64 {
	p := c.peak.Load()
	return max(p, c.cur.Load())
}

// Load returns the current figure and the peak as one consistent pair, with
// peak >= current.
func (c *Counter) Load() (current, peak int64) {
	current = c.cur.Load()
	return current, max(c.peak.Load(), current)
}

// ResetPeak sets the peak to the current figure, so that the next peak
// measures only what happens from now on (the semantics of PyTorch's
// reset_peak_memory_stats). A new peak raised by a concurrent Alloc is kept.
func (c *Counter) ResetPeak() {
	c.peak.Store(c.cur.Load())
	// An Alloc that added before the load above but compared with the old,
	// higher peak did not raise it; this second load sees its value.
	raise(&c.peak, c.cur.Load())
}

// raise lifts p to v if v is higher, with a compare-and-swap loop that starts
// from a plain load and stops as soon as p is at least v.
func raise(p *atomic.Int64, v int64) {
	for {
		o := p.Load()
		if v <= o || p.CompareAndSwap(o, v) {
			return
		}
	}
}
