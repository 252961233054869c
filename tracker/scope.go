package tracker

import (
	"errors"
	"fmt"
	"runtime"
	stdatomic "sync/atomic"
)

// ErrScopeClosed is returned by [Scope.Close] on a scope already closed.
var ErrScopeClosed = errors.New("memtrack: peak scope already closed")

// The states of a Scope.
const (
	scopeOpen int32 = iota
	scopeClosing
	scopeClosed
)

// Scope is a peak scope: the high-water mark of one figure (the bytes a
// [Record] holds, or a [Counter]'s current figure) from [Record.OpenScope]
// or [Counter.OpenScope] to [Scope.Close]. Any number of scopes may be open
// on one figure at once, opened and closed from any goroutines; each has
// its own peak, exact in the sense of the figure's own peak, and none is
// moved by another scope or by ResetPeak.
//
// An allocation that runs while a scope opens or closes may count in the
// scope or not, as one that runs during a ResetPeak may count before the
// reset or after it; every allocation that begins after OpenScope returns
// and ends before Close begins counts.
type Scope struct {
	peak  int64 // atomic: raised by the allocations while the scope is open
	final int64 // atomic: the peak at Close, valid in state scopeClosed
	state int32 // atomic: scopeOpen, scopeClosing or scopeClosed
	set   *scopeSet
	fig   func() int64 // reads the figure the scope measures
}

// scopeSet is the open scopes of one figure, published as an immutable
// slice that is replaced (copy on write, by compare-and-swap) when a scope
// opens or closes. While none is open the pointer is nil, so that the
// allocation path pays one atomic load to learn that it has nothing to do.
type scopeSet struct {
	list stdatomic.Pointer[[]*Scope]
}

// none reports whether no scope is open.
func (s *scopeSet) none() bool { return s.list.Load() == nil }

// raise lifts the peak of every open scope to v.
func (s *scopeSet) raise(v int64) {
	if p := s.list.Load(); p != nil {
		for _, sc := range *p {
			raise(&sc.peak, v)
		}
	}
}

// open publishes a new scope of fig and starts its peak at fig's current
// figure, read after the scope is published: every allocation that adds
// after that read finds the scope published and raises it.
func (s *scopeSet) open(fig func() int64) *Scope {
	sc := &Scope{set: s, fig: fig}
	for {
		old := s.list.Load()
		var next []*Scope
		if old != nil {
			next = make([]*Scope, 0, len(*old)+1)
			next = append(next, *old...)
		}
		next = append(next, sc)
		if s.list.CompareAndSwap(old, &next) {
			break
		}
	}
	raise(&sc.peak, fig())
	return sc
}

// remove unpublishes sc; the last scope to go leaves the pointer nil.
func (s *scopeSet) remove(sc *Scope) {
	for {
		old := s.list.Load()
		if old == nil {
			return
		}
		var next []*Scope
		for _, o := range *old {
			if o != sc {
				next = append(next, o)
			}
		}
		var p *[]*Scope
		if len(next) > 0 {
			p = &next
		}
		if s.list.CompareAndSwap(old, p) {
			return
		}
	}
}

// Peak returns the high-water mark of the figure since the scope opened:
// while it is open, never below the current figure read before it; once it
// is closed, the peak [Scope.Close] returned, which no later allocation
// moves.
func (sc *Scope) Peak() int64 {
	for {
		switch stdatomic.LoadInt32(&sc.state) {
		case scopeOpen:
			p := stdatomic.LoadInt64(&sc.peak)
			return max(p, sc.fig())
		case scopeClosed:
			return stdatomic.LoadInt64(&sc.final)
		}
		// Closing: wait for the final figure rather than return one that
		// Close is about to fix lower.
		runtime.Gosched()
	}
}

// Closed reports whether [Scope.Close] was called.
func (sc *Scope) Closed() bool { return stdatomic.LoadInt32(&sc.state) != scopeOpen }

// Close ends the scope and returns its peak, which later calls of
// [Scope.Peak] return too. Closing a scope again changes nothing: it
// returns the same peak and an error matching [ErrScopeClosed].
func (sc *Scope) Close() (int64, error) {
	if !stdatomic.CompareAndSwapInt32(&sc.state, scopeOpen, scopeClosing) {
		return sc.Peak(), fmt.Errorf("%w: Close called again", ErrScopeClosed)
	}
	sc.set.remove(sc)
	// The peak is read after the scope is unpublished, and the current
	// figure after that: an allocation that added before the removal and
	// had not raised the scope yet is in the current figure, unless a
	// free ran in between (then it counts as running after Close).
	p := max(stdatomic.LoadInt64(&sc.peak), sc.fig())
	stdatomic.StoreInt64(&sc.final, p)
	stdatomic.StoreInt32(&sc.state, scopeClosed)
	return p, nil
}

// OpenScope opens a peak [Scope] on the bytes the record holds. While any
// scope of the record is open, Alloc raises the scopes' peaks beside the
// record's, one load per open scope (and a compare-and-swap where a peak
// rises); while none is, it pays one atomic load for the check.
func (r *Record) OpenScope() *Scope { return r.scopes.open(r.Tracked) }

// OpenScope opens a peak [Scope] on the counter's current figure; see
// [Record.OpenScope].
func (c *Counter) OpenScope() *Scope { return c.scopes.open(c.Current) }

// HasOpenScopes reports whether a peak scope of the counter is open, for a
// caller that must prepare its figure before an addition raises a scope's
// peak as it does before one raises the counter's.
func (c *Counter) HasOpenScopes() bool { return !c.scopes.none() }

// HasOpenScopes reports whether a peak scope of the record is open.
func (r *Record) HasOpenScopes() bool { return !r.scopes.none() }
