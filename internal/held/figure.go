package held

import (
	"sync"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// Figure is the device-side figure of one device: the bytes the device
// holds for the library's buffers, with its peak. It counts every buffer
// from the allocation's return; [Figure.Drop] uncounts a buffer whose free
// returned the memory, and a free in stream order ([Figure.Enqueue]) is
// uncounted once its stream has executed it. E is the driver's event, Q the
// adapter's [Querier] of such events.
//
// A zero Figure must be given its Querier ([Figure.Init]) before any other
// call, and must not be copied after.
type Figure[E comparable, Q Querier[E]] struct {
	// The 64-bit words come first: the counter's alignment puts them on
	// 8-byte boundaries on 32-bit platforms too, which go.uber.org/atomic's
	// Int64 does not ask for itself.
	counts
	npending atomic.Int64 // the frees awaiting their events: in pending, or in waiting
	reapAt   atomic.Int64 // Enqueue reaps at this many pending (at least PendingBound), set by reap

	// pending holds the frees awaiting their events that no reap has taken
	// yet: pushed by Enqueue, taken whole by reap (so no node is ever
	// popped alone, and a stack needs no lock).
	pending atomic.Pointer[Free[E]]

	// reapMu lets one reap run at a time, and guards what the reaps keep:
	// waiting, the frees taken from pending whose streams had not reached
	// their events, by stream and in each stream's order, and the events
	// of the last query with where each stream's end, for reuse.
	reapMu  sync.Mutex
	waiting []*Free[E]
	events  []E
	ends    []int
	queries Q

	spareMu sync.Mutex
	spare   []*Free[E] // frees retired, with their events, reached, for reuse
}

// counts is the figure and its pooled part: the part of a Figure that
// names no type parameter, so that the methods on it (Drop, Pooled) are
// called directly, with no dictionary of the Figure's instance.
type counts struct {
	held   tracker.Counter
	pooled atomic.Int64 // the part of held that stream-ordered buffers take
}

// Init gives f, a zero Figure, the querier through which it learns that
// the frees in stream order have executed. It must come before any other
// call.
func (f *Figure[E, Q]) Init(q Q) { f.queries = q }

// Add adds size bytes, allocated on the device, to the figure, and to its
// part that stream-ordered buffers take where pooled. Uncounting the frees
// known to have executed can only lower the figure, so it must come first
// only where the addition raises the peak: an addition that stays within
// the peak is made without it, in one compare-and-swap against the peak,
// and only where that fails (or the figures show it would) are the frees
// reaped (one call of the querier) before the addition that raises the
// peak. With peak scopes open, every addition may raise one of theirs, so
// the frees are reaped first.
func (f *Figure[E, Q]) Add(size int64, pooled bool) {
	if cur, peak := f.held.Load(); size > peak-cur || f.held.HasOpenScopes() || f.held.AllocWithin(size, peak) != nil {
		f.reap()
		_ = f.held.Alloc(size) // cannot fail: the caller's record already holds size
	}
	if pooled {
		f.pooled.Add(size)
	}
}

// Drop takes size bytes from the figure, and from its part that
// stream-ordered buffers take where pooled: a free's that returned the
// memory at once, or a free's in stream order, once its stream has executed
// it.
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
