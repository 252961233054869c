package tracker

import (
	"fmt"
	"runtime"
	stdatomic "sync/atomic"
	"unsafe"
)

// MaxCount is the largest value a [Counter] holds. An Alloc that would take
// the current figure past it fails with [ErrCapacity]; no real memory comes
// near it (it is 4 EiB).
const MaxCount = 1 << 62

// fastMax is the largest size the add-based fast paths of Counter and Record
// take; larger sizes take the exact compare-and-swap path. An add that turns
// out to be refused is taken back at once, so the figure is off by at most
// fastMax per goroutine between an add and its take-back: with fewer than
// 2^32 goroutines at once (2^32 goroutine stacks alone would fill 8 TiB) the
// word stays at least 2^60 away from wrapping, whatever the sizes asked for.
const fastMax = 1 << 24

// Counter is a high-water-mark gauge: the current figure of one quantity and
// the largest value it has held since the last [Counter.ResetPeak]. It is
// exact under any concurrency and its zero value is ready to use.
//
// Alloc and Free of up to 16 MiB each perform one atomic add (larger sizes a
// compare-and-swap), and Alloc a compare-and-swap only when the peak really
// rises. Free's fast path is small enough for the compiler to inline;
// Alloc's is not, because its slow path needs the figure its add produced
// as well as the size (see intendedInlining in the tests). The
// current figure and the peak sit on cache lines of their own, so the peak
// check is a load from a line that is only written when the peak rises (or
// a peak scope opens or closes: Alloc also loads the pointer to the open
// scopes there, nil while none is open; see [Counter.OpenScope]).
//
// A Counter must not be copied after first use.
type Counter struct {
	_    [0]stdatomic.Int64 // 64-bit alignment on 32-bit platforms
	cur  int64              // atomic
	_    [cacheLineSize - 8]byte
	peak int64 // atomic
	// The open peak scopes (Counter.OpenScope), read by every Alloc: nil while
	// none is open.
	scopes scopeSet
	_      [cacheLineSize - 8 - unsafe.Sizeof(scopeSet{})]byte
}

// Alloc adds n to the current figure and raises the peak if the result is a
// new high. It fails with [ErrInvalidSize] if n <= 0 and with [ErrCapacity]
// if the result would exceed [MaxCount]; a failed Alloc changes nothing.
func (c *Counter) Alloc(n int64) error {
	var v int64
	if uint64(n-1) < fastMax {
		v = stdatomic.AddInt64(&c.cur, n)
		if uint64(v) <= MaxCount && v <= stdatomic.LoadInt64(&c.peak) && c.scopes.none() {
			return nil
		}
	}
	return c.allocSlow(n, v)
}

// allocSlow finishes an Alloc whose fast path did not: v is the figure its
// add produced, if it added (n <= fastMax).
func (c *Counter) allocSlow(n, v int64) error {
	if uint64(n-1) < fastMax {
		if uint64(v) <= MaxCount {
			c.raise(v)
			return nil
		}
		// Past MaxCount, or a refused Free of another goroutine is being
		// taken back: take the add back and decide exactly.
		stdatomic.AddInt64(&c.cur, -n)
	}
	if n <= 0 {
		return invalidSize(n)
	}
	return c.allocWithin(n, MaxCount)
}

// AllocWithin adds n to the current figure only if the result stays within
// limit, so that concurrent callers can never exceed it together. It fails
// with a [*LimitError] (matching [ErrLimitExceeded]) if the limit would be
// passed, or with [ErrCapacity] past [MaxCount]; it performs a
// compare-and-swap instead of an add. A negative limit is an error.
//
// The limit is the caller's, and each call is checked against the limit it
// was given. A caller that lowers its limit while other goroutines allocate
// must let the calls that were given the old limit return before it relies
// on the new one; [Record] does this for its own limit.
//
// The limit holds against every other AllocWithin and Free. A Counter that
// also takes plain Allocs has one gap, opened only by a caller's bug: a
// Free of more than is held is refused, but between its add and the add
// that takes it back, a plain Alloc's add can lift the figure back into
// range, and an AllocWithin in that instant sees a figure too low by that
// Free's size and may pass its limit by as much. [Record] has no such gap.
func (c *Counter) AllocWithin(n, limit int64) error {
	o := stdatomic.LoadInt64(&c.cur)
	v := o + n
	if uint64(n-1) < fastMax && v <= limit && uint64(o) < uint64(v) && uint64(v) <= MaxCount && stdatomic.CompareAndSwapInt64(&c.cur, o, v) {
		if v <= stdatomic.LoadInt64(&c.peak) && c.scopes.none() {
			return nil
		}
	} else {
		v = 0
	}
	return c.allocWithinSlow(n, limit, v)
}

// allocWithinSlow finishes an AllocWithin: v > 0 is the figure its fast path
// already set, whose peak is still to raise.
func (c *Counter) allocWithinSlow(n, limit, v int64) error {
	if v > 0 {
		c.raise(v)
		return nil
	}
	if n <= 0 {
		return invalidSize(n)
	}
	if limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", ErrInvalidSize, limit)
	}
	return c.allocWithin(n, limit)
}

// allocWithin is the exact path: a compare-and-swap loop on a figure no
// refused change is inflating.
func (c *Counter) allocWithin(n, limit int64) error {
	capped := limit >= MaxCount
	limit = min(limit, MaxCount)
	for {
		o := c.load()
		if n > limit-o {
			if capped {
				return fmt.Errorf("%w: holding %d, adding %d, at most %d", ErrCapacity, o, n, int64(MaxCount))
			}
			return &LimitError{Requested: n, Tracked: o, Limit: limit}
		}
		if stdatomic.CompareAndSwapInt64(&c.cur, o, o+n) {
			c.raise(o + n)
			return nil
		}
	}
}

// Free subtracts n from the current figure. It fails with [ErrInvalidSize]
// if n <= 0 and with [ErrFreeExceedsTracked] if n is more than is held; a failed
// Free changes nothing, so the current figure never goes negative.
//
// A Free of more than is held is a caller's bug: its add is taken back at
// once and the decision made again exactly, and readers wait out the instant
// in between.
func (c *Counter) Free(n int64) (err error) {
	// The fast path is one add and one call, within the compiler's
	// inlining budget (TestIntendedInlining); the result is named so that
	// its return is bare, which the budget counts as cheaper.
	if uint64(n-1) < fastMax && uint64(stdatomic.AddInt64(&c.cur, -n)) <= MaxCount {
		return
	}
	return c.freeSlow(n)
}

// freeSlow finishes a Free whose fast path did not. If n <= fastMax, the
// fast path added -n and the figure it left was outside [0, MaxCount]:
// below zero (more than is held) or above MaxCount (a refused Alloc of
// another goroutine is being taken back, so the figure could not be
// trusted).
func (c *Counter) freeSlow(n int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if uint64(n-1) < fastMax {
		// An Alloc that ran in between saw a figure too low by n and may
		// have skipped raising the peak: raise from the restored figure.
		if w := stdatomic.AddInt64(&c.cur, n); uint64(w) <= MaxCount {
			c.raise(w)
		}
	}
	for {
		o := c.load()
		if n > o {
			return freeExceeds(n, o)
		}
		if stdatomic.CompareAndSwapInt64(&c.cur, o, o-n) {
			return nil
		}
	}
}

// load returns the current figure, waiting out a refused change that is
// being taken back (the only time the figure is outside [0, MaxCount]).
func (c *Counter) load() int64 {
	for {
		if v := stdatomic.LoadInt64(&c.cur); uint64(v) <= MaxCount {
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
	p := stdatomic.LoadInt64(&c.peak)
	return max(p, c.load())
}

// Load returns the current figure and the peak as one consistent pair, with
// peak >= current.
func (c *Counter) Load() (current, peak int64) {
	current = c.load()
	return current, max(stdatomic.LoadInt64(&c.peak), current)
}

// ResetPeak sets the peak to the current figure, so that the next peak
// measures only what happens from now on (the semantics of PyTorch's
// reset_peak_memory_stats). A new peak raised by a concurrent Alloc is kept.
func (c *Counter) ResetPeak() {
	stdatomic.StoreInt64(&c.peak, c.load())
	// An Alloc that added before the load above but compared with the old,
	// higher peak did not raise it; this second load sees its value.
	raise(&c.peak, c.load())
}

// raise lifts the peak and the open scopes' peaks to v.
func (c *Counter) raise(v int64) {
	raise(&c.peak, v)
	c.scopes.raise(v)
}

// raise lifts p to v if v is higher, with a compare-and-swap loop that starts
// from a plain load and stops as soon as p is at least v.
func raise(p *int64, v int64) {
	for {
		o := stdatomic.LoadInt64(p)
		if v <= o || stdatomic.CompareAndSwapInt64(p, o, v) {
			return
		}
	}
}
