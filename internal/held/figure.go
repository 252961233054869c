package held

import (
	"sync"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// Figure is the device-side figure of one device: the bytes the device
// holds for the library's buffers, with its peak. It counts every buffer
// from the allocation's return; [Figure.Drop] uncounts a buffer whose free
// returned the memory, and a free in stream order ([Figure.Freed]) is
// uncounted once a reading has learned that its stream executed it, or an
// allocation on its stream took its bytes over. E is the driver's event, Q
// the adapter's [Querier] of events.
//
// A zero Figure must be given its Querier ([Figure.Init]) before any other
// call, and must not be copied after.
type Figure[E comparable, Q Querier[E]] struct {
	// The 64-bit words come first: the counter's alignment puts them on
	// 8-byte boundaries on 32-bit platforms too, which go.uber.org/atomic's
	// Int64 does not ask for itself.
	counts
	// pending is the bytes of the frees in stream order not yet learned
	// executed, less what allocations took over: the part of held that a
	// reading may uncount.
	pending  atomic.Int64
	npending atomic.Int64 // the frees awaiting their events
	reapAt   atomic.Int64 // Freed reads at this many pending (at least PendingBound), set by reapLocked
	// seq numbers the frees in stream order as they are counted (Order).
	seq atomic.Uint64

	// streams is the table of the streams with frees pending, or had them
	// lately: read without a lock, replaced whole under tableMu.
	streams atomic.Pointer[table[E]]
	tableMu sync.Mutex

	// reapMu lets one reading run at a time, and guards what the readings
	// keep: the buffers of the last one's questions, for reuse.
	reapMu  sync.Mutex
	asked   []asked[E]
	qs      []Query[E]
	events  []E
	reached []E // the events a reading found reached, on their way to spare
	queries Q
	reuse   bool

	spareMu sync.Mutex
	spare   []E // events of the device's own context, reached, for the next frees to record again
}

// counts is the figure and its pooled part: the part of a Figure that
// names no type parameter, so that the methods on it (Drop, Pooled) are
// called directly, with no dictionary of the Figure's instance.
type counts struct {
	held   tracker.Counter
	pooled atomic.Int64 // the part of held that stream-ordered buffers take
}

// Init gives f, a zero Figure, the querier through which it learns that
// the frees in stream order have executed, and says whether an allocation
// in stream order takes over the bytes of frees pending on its stream
// (reuse): the driver's pool hands a block freed on a stream to the next
// allocation on that stream at once. It must come before any other call.
func (f *Figure[E, Q]) Init(q Q, reuse bool) {
	f.queries, f.reuse = q, reuse
	f.streams.Store(&table[E]{})
}

// Order is where the count of frees in stream order stood at a moment
// ([Figure.Order]): an allocation asked of the driver after it can have
// come after those frees on their streams, and after no free counted
// later.
type Order uint64

// Order returns where the count of frees in stream order stands: taken
// before a stream-ordered allocation is asked of the driver, it says
// which pending frees the allocation may take over ([Figure.Add]).
func (f *Figure[E, Q]) Order() Order { return Order(f.seq.Load()) }

// Add adds size bytes, allocated on the device, to the figure: a buffer
// allocated at once (pooled false), or one allocated in stream order
// (pooled) on stream, which was asked of the driver after at. Where f
// reuses, the stream-ordered allocation takes over first the bytes of the
// frees pending on stream that were counted before at, the newest first,
// and adds only the rest. Uncounting the frees known to have executed can
// only lower the figure, so it must come first only where the addition
// raises the peak: an addition that stays within the peak is made without
// it, in one compare-and-swap against the peak, and only where that fails
// (or the figures show it would) are the frees reaped (one call of the
// querier) before the addition that raises the peak. With peak scopes
// open, every addition may raise one of theirs, so the frees are reaped
// first.
func (f *Figure[E, Q]) Add(size int64, pooled bool, stream uintptr, at Order) {
	add := size
	if pooled && f.reuse && f.pending.Load() > 0 {
		add -= f.takeOver(stream, at, size)
	}
	if add == 0 {
		return
	}
	if cur, peak := f.held.Load(); add > peak-cur || f.held.HasOpenScopes() || f.held.AllocWithin(add, peak) != nil {
		f.reap()
		_ = f.held.Alloc(add) // cannot fail: the caller's record already holds size
	}
	if pooled {
		f.pooled.Add(add)
	}
}

// Drop takes size bytes from the figure, and from its part that
// stream-ordered buffers take where pooled: a free's that returned the
// memory at once, or frees' in stream order learned executed.
func (c *counts) Drop(size int64, pooled bool) {
	_ = c.held.Free(size) // cannot fail: the figure holds the buffer's bytes
	if pooled {
		c.pooled.Add(-size)
	}
}

// Load returns the figure and its peak, after uncounting the frees in
// stream order known to have executed.
func (f *Figure[E, Q]) Load() (cur, peak int64) {
	f.reap()
	return f.held.Load()
}

// Pooled returns the part of the figure that stream-ordered buffers take,
// as it stands: without learning of executed frees.
func (c *counts) Pooled() int64 { return c.pooled.Load() }

// Pending returns the bytes of frees in stream order that the figure
// counts as not yet executed, as it stands: without learning of executed
// frees.
func (f *Figure[E, Q]) Pending() int64 { return f.pending.Load() }

// ResetPeak sets the peak to the figure, after uncounting the frees known
// to have executed.
func (f *Figure[E, Q]) ResetPeak() {
	f.reap()
	f.held.ResetPeak()
}

// OpenScope opens a peak scope on the figure, after uncounting the frees
// known to have executed, so that it starts from the figure the device
// holds.
func (f *Figure[E, Q]) OpenScope() *tracker.Scope {
	f.reap()
	return f.held.OpenScope()
}

// ScopePeak returns the peak of sc, a scope of f's OpenScope, after
// learning which frees have executed where sc is still open, as Load does.
func (f *Figure[E, Q]) ScopePeak(sc *tracker.Scope) int64 {
	if !sc.Closed() {
		f.reap()
	}
	return sc.Peak()
}

// CloseScope closes sc, a scope of f's OpenScope, after learning which
// frees have executed where it is still open; closing it again fails as
// [tracker.Scope.Close] does.
func (f *Figure[E, Q]) CloseScope(sc *tracker.Scope) error {
	if !sc.Closed() {
		f.reap()
	}
	_, err := sc.Close()
	return err
}
