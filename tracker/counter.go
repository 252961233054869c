package tracker

import (
	"fmt"
	"runtime"
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
// Alloc and Free each perform one atomic add, and Alloc a compare-and-swap
// only when the peak really rises. The current figure and the peak sit on
// cache lines of their own, so the peak check is a load from a line that is
// only written when the peak rises.
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
	if n <= MaxCount {
		if v := c.cur.Add(n); v >= 0 && v <= MaxCount {
			raise(&c.peak, v)
			return nil
		}
		// Past MaxCount, or a refused Free of another goroutine is being
		// taken back: undo and decide exactly.
		c.cur.Sub(n)
	}
	return c.AllocWithin(n, MaxCount)
}

// AllocWithin adds n to the current figure only if the result stays within
// limit, so that concurrent callers can never exceed it together. It fails
// with a [*LimitError] (matching [ErrLimitExceeded]) if the limit would be
// passed, or with [ErrCapacity] past [MaxCount]; it performs a
// compare-and-swap loop instead of an add. A negative limit is an error.
func (c *Counter) AllocWithin(n, limit int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", ErrInvalidSize, limit)
	}
	capped := limit >= MaxCount
	limit = min(limit, MaxCount)
	for {
		o := c.load()
		if n > limit-o {
			if capped {
				return fmt.Errorf("%w: holding %d, adding %d, at most %d", ErrCapacity, o, n, int64(MaxCount))
			}
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
//
// A Free of more than is held is a caller's bug: its add is taken back at
// once and the decision made again exactly, and readers wait out the instant
// in between.
func (c *Counter) Free(n int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if n <= MaxCount {
		if c.cur.Add(-n) >= 0 {
			return nil
		}
		// An Alloc that ran in between saw a figure too low by n and may
		// have skipped raising the peak: raise from the restored figure.
		raise(&c.peak, c.cur.Add(n))
	}
	for {
		o := c.load()
		if n > o {
			return freeExceeds(n, o)
		}
		if c.cur.CompareAndSwap(o, o-n) {
			return nil
		}
	}
}

// load returns the current figure, waiting out a refused Free that is being
// taken back (the only time the figure is negative).
func (c *Counter) load() int64 {
	for {
		if v := c.cur.Load(); v >= 0 {
			return v
		}
		runtime.Gosched()
	}
}

// Current returns the current figure.
func (c *Counter) Current() int64 { return c.load() }

// Peak returns the largest value the current figure has held since the last
// [Counter.ResetPeak]. It is never below the current figure read before it.
func (c *Counter) Peak() int64 {
	p := c.peak.Load()
	return max(p, c.load())
}

// Load returns the current figure and the peak as one consistent pair, with
// peak >= current.
func (c *Counter) Load() (current, peak int64) {
	current = c.load()
	return current, max(c.peak.Load(), current)
}

// ResetPeak sets the peak to the current figure, so that the next peak
// measures only what happens from now on (the semantics of PyTorch's
// reset_peak_memory_stats). A new peak raised by a concurrent Alloc is kept.
func (c *Counter) ResetPeak() {
	c.peak.Store(c.load())
	// An Alloc that added before the load above but compared with the old,
	// higher peak did not raise it; this second load sees its value.
	raise(&c.peak, c.load())
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
