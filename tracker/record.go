package tracker

import (
	"fmt"
	"runtime"
	stdatomic "sync/atomic"
	"unsafe"
)

// The bytes word holds the bytes held in its low 48 bits (MaxBytes plus
// room for the transient adds of goroutines in flight), in bits 48-52 a
// limit generation: 0 while no limit is set, bumped (1 to 31) by every
// SetLimit that sets one, and in bits 53-63 a tag that every operation moves
// by one when it changes the bytes (wrapping freely out of the word). A
// fast-path add lands on the generation it finds, so an Alloc that started
// before SetLimit and adds after it sees a non-zero generation and takes the
// exact path, and a compare-and-swap prepared under one limit fails once
// another is set.
//
// The counts word holds the live buffers in its low 32 bits and the frees
// (modulo 2^32, folded into a 64-bit total every 2^31) in its high 32 bits,
// so that one add moves both on a Free and the cumulative allocations
// (live + frees) never trail or lead.
//
// Every operation changes the bytes word first (with its tag) and the counts
// word last (an Alloc adds one live buffer, a Free moves one buffer from live
// to freed: either way live + 2*frees grows by one), with a Free's freed
// bytes in between; an operation refused after its first add takes its adds
// back in reverse order. So the tag equals live + 2*frees (modulo 2^11)
// exactly when no operation is between its first and its last add: a reader
// that loads the counts, then the other words, and finds them matching has
// one consistent state, the one at its load of the counts (see cut).
const (
	heldBits  = 48
	heldMask  = 1<<heldBits - 1
	genShift  = heldBits
	genMask   = 31 << genShift
	lowMask   = 1<<tagShift - 1 // held bytes and generation
	tagShift  = genShift + 5
	tagUnit   = 1 << tagShift
	stepMask  = 1<<(64-tagShift) - 1
	liveMask  = 1<<32 - 1
	freeDelta = 1<<32 - 1              // frees+1, live-1
	unfree    = ^uint64(freeDelta - 1) // -freeDelta
	foldAt    = 1 << 63                // frees field at 2^31
	notAdded  = -1 << 63               // no fast-path add was made
)

// consistent reports whether the bytes word b and the counts word c, loaded
// in the order c then b, describe one state: no operation between its
// first and its last add, no refused change being taken back.
func consistent(b int64, c uint64) bool {
	steps := c&liveMask + 2*(c>>32)
	return b&heldMask <= MaxBytes && c&liveMask <= MaxBuffers && uint64(b)>>tagShift == steps&stepMask
}

const (
	// MaxBytes is the most bytes a [Record] holds at once (64 TiB).
	MaxBytes = 1 << 46
	// MaxBuffers is the most live buffers a [Record] holds at once (2^31).
	MaxBuffers = 1 << 31
)

// Stats is a snapshot of a [Record].
type Stats struct {
	Tracked      int64 // bytes held now
	PeakTracked  int64 // high-water mark of Tracked since the last ResetPeak
	Buffers      int64 // live buffers now
	PeakBuffers  int64 // high-water mark of Buffers since the last ResetPeak
	AllocBytes   int64 // cumulative bytes allocated since the last ResetAccumulated
	FreedBytes   int64 // cumulative bytes freed since the last ResetAccumulated
	Allocs       int64 // cumulative allocations since the last ResetAccumulated
	Frees        int64 // cumulative frees since the last ResetAccumulated
	FailedAllocs int64 // allocations refused or failed since the last ResetAccumulated
	Limit        int64 // the limit on Tracked; 0 means none
}

// Record keeps one device's allocation statistics: bytes and live buffers,
// each with its peak, the cumulative allocation and free figures, and the
// failed allocations. It is safe for concurrent use and its zero value is
// ready to use; it must not be copied after first use.
//
// The allocation path is built for contention. Without a limit, Alloc of up
// to 16 MiB performs two atomic adds (bytes, live buffers) and Free three
// (bytes, live buffers with frees, freed bytes), all on the record's first
// cache line. Their fast paths are not inlinable: the adds and their checks
// alone cost more than the compiler's budget.
// Larger sizes, and every Alloc while a limit is set, take a
// compare-and-swap loop instead of the bytes add. The peaks and the limit
// sit on a second line that is written only when a peak rises, so the peak
// checks are plain loads; beside them, Alloc loads the pointer to the open
// peak scopes from the same line ([Record.OpenScope]), nil while none is
// open. Cumulative allocation figures are derived, not
// counted: allocations = live + frees, allocated bytes = held + freed bytes.
//
// The record occupies whole cache lines of its own: records of different
// devices never share one.
type Record struct {
	_ [0]stdatomic.Int64 // 64-bit alignment on 32-bit platforms
	_ [cacheLineSize]byte

	// Hot line: written by every Alloc and Free.
	bytes      int64  // atomic: gen<<genShift | bytes held
	counts     uint64 // atomic: frees<<32 | live, frees since the last fold
	freedBytes int64  // atomic: cumulative freed bytes
	_          [cacheLineSize - 24]byte

	// Read-mostly line: read by every Alloc, written when a peak rises.
	peakBytes int64    // atomic
	peakLive  int64    // atomic
	limit     int64    // atomic
	scopes    scopeSet // the open peak scopes (Record.OpenScope): nil while none is open
	_         [cacheLineSize - 24 - unsafe.Sizeof(scopeSet{})]byte

	// Cold line: written on folds, failures, resets and by readers.
	foldSeq     stdatomic.Int64 // odd while a fold moves frees
	foldedFrees stdatomic.Int64
	failed      stdatomic.Int64
	limitMu     stdatomic.Int64 // 1 while a SetLimit runs
	limitGen    int64           // the last non-zero generation; under limitMu
	// Cancelled allocations (Record.Cancel): counted in the counts word and
	// the freed bytes as frees, and taken out of the cumulative figures.
	cancels, cancelledBytes stdatomic.Int64
	// The bases are the figures at the last ResetAccumulated, written
	// under baseSeq (odd while they change).
	baseSeq                                                           stdatomic.Int64
	baseAllocs, baseAllocBytes, baseFrees, baseFreedBytes, baseFailed stdatomic.Int64
	_                                                                 [cacheLineSize]byte
}

// Alloc records an allocation of n bytes: the bytes held and the live
// buffers go up, and their peaks follow. It fails, changing nothing but the
// failure count, with [ErrInvalidSize] if n <= 0 (not counted as a failure),
// with a [*LimitError] if a limit is set and would be passed, and with
// [ErrCapacity] past [MaxBytes] bytes or [MaxBuffers] buffers.
func (r *Record) Alloc(n int64) error {
	v, l := int64(notAdded), int64(0)
	if uint64(n-1) < fastMax && stdatomic.LoadInt64(&r.limit) == 0 {
		v = stdatomic.AddInt64(&r.bytes, n+tagUnit) & lowMask
		if v <= MaxBytes {
			l = int64(stdatomic.AddUint64(&r.counts, 1) & liveMask)
			if l <= MaxBuffers && v <= stdatomic.LoadInt64(&r.peakBytes) && l <= stdatomic.LoadInt64(&r.peakLive) && r.scopes.none() {
				return nil
			}
		}
	}
	return r.allocSlow(n, v, l)
}

// allocSlow finishes an Alloc whose fast path did not. If v != notAdded,
// the fast path added n to the bytes (v the held bytes and generation after
// it) and, if v is within [0, MaxBytes] (no limit, no transient), one buffer
// to the counts (l the live buffers after it).
func (r *Record) allocSlow(n, v, l int64) error {
	if v != notAdded {
		if v <= MaxBytes {
			if l <= MaxBuffers {
				r.raisePeaks(v, l)
				return nil
			}
			stdatomic.AddUint64(&r.counts, ^uint64(0))
		}
		// Past a capacity, a limit set meanwhile, or a refused Free of
		// another goroutine being taken back: undo and decide exactly.
		if !r.takeBack(n) {
			return r.keep()
		}
	}
	if n <= 0 {
		return invalidSize(n)
	}
	return r.allocExact(n)
}

// allocExact is the exact path: a compare-and-swap loop on a consistent
// state that refuses what would pass the limit or the record's capacity.
func (r *Record) allocExact(n int64) error {
	for {
		o, c := r.load()
		held := o & heldMask
		lim := stdatomic.LoadInt64(&r.limit)
		room := int64(MaxBytes)
		if o&genMask != 0 && lim > 0 {
			room = min(lim, MaxBytes)
		}
		if n > room-held {
			r.failed.Add(1)
			if room == MaxBytes {
				return fmt.Errorf("%w: holding %d, adding %d, at most %d", ErrCapacity, held, n, int64(MaxBytes))
			}
			return &LimitError{Requested: n, Tracked: held, Limit: room}
		}
		if c&liveMask >= MaxBuffers {
			r.failed.Add(1)
			return fmt.Errorf("%w: a record holds at most %d buffers", ErrCapacity, int64(MaxBuffers))
		}
		// The compare-and-swap succeeds only if no operation changed the
		// bytes since the consistent load, so the counts are still c.
		if stdatomic.CompareAndSwapInt64(&r.bytes, o, o+n+tagUnit) {
			// A compare-and-swap prepared under one limit passes under
			// another where the generations came round to the same one
			// while this goroutine was suspended (see SetLimit). So the
			// limit is read again now: a SetLimit that returned before the
			// compare-and-swap has stored it. Until the counts move, no
			// reader sees the new figure (the tag is ahead), so an add
			// past that limit is taken back unseen, and the state decided
			// again. Only if a Free of more than was held (a caller's bug)
			// passed against this add in the meantime would taking it
			// back leave the figure below zero: then the add stays.
			if lim := stdatomic.LoadInt64(&r.limit); lim > 0 && held+n > lim {
				if r.takeBack(n) {
					continue
				}
				return r.keep()
			}
			l := int64(stdatomic.AddUint64(&r.counts, 1) & liveMask)
			r.raisePeaks(held+n, l)
			return nil
		}
	}
}

// takeBack takes back an Alloc's add of n bytes to the bytes word, made
// before the Alloc was refused and before it counted a buffer, and reports
// whether it did. It does not where that would leave the bytes held below
// zero: a Free of more than was held (a caller's bug) passed against the
// add while it was in place, or a refused Free of another goroutine has
// still to take its own add back. Then the add stays, and the Alloc
// completes with keep, so that no figure is ever left below zero for
// readers to wait on.
func (r *Record) takeBack(n int64) bool {
	if w := stdatomic.AddInt64(&r.bytes, -(n+tagUnit)) & heldMask; w <= MaxBytes {
		return true
	}
	stdatomic.AddInt64(&r.bytes, n+tagUnit)
	return false
}

// keep completes an Alloc whose add takeBack kept: it counts the buffer and
// raises the peaks from the next consistent state.
func (r *Record) keep() error {
	stdatomic.AddUint64(&r.counts, 1)
	b, c := r.load()
	r.raisePeaks(b&heldMask, int64(c&liveMask))
	return nil
}

// raisePeaks lifts the peaks of the bytes (the record's and the open
// scopes') and of the live buffers to bytes and live.
func (r *Record) raisePeaks(bytes, live int64) {
	r.raiseBytes(bytes)
	if live > stdatomic.LoadInt64(&r.peakLive) {
		raise(&r.peakLive, live)
	}
}

// raiseBytes lifts the record's peak of the bytes and the open scopes'
// peaks to bytes.
func (r *Record) raiseBytes(bytes int64) {
	if bytes > stdatomic.LoadInt64(&r.peakBytes) {
		raise(&r.peakBytes, bytes)
	}
	r.scopes.raise(bytes)
}

// Free records the release of one buffer of n bytes. It fails with
// [ErrInvalidSize] if n <= 0 and with [ErrFreeExceedsTracked] if n is more than
// is held or no buffer is live; a failed Free changes nothing.
//
// A Free of more than is held is a caller's bug: the record takes its adds
// back at once and decides again exactly, and readers wait out the instant
// in between. It is judged against the bytes held at its add, which for an
// instant include the add of an Alloc that is about to be refused (a limit
// set just then); an over-large Free that lands in that instant passes, and
// then the Alloc keeps its add and succeeds rather than leave the bytes held
// below zero. Buffers of the Device layer are freed with their own sizes,
// once, and never meet this.
func (r *Record) Free(n int64) error {
	var v int64 = -1
	var c uint64
	if uint64(n-1) < fastMax {
		v = stdatomic.AddInt64(&r.bytes, tagUnit-n) & heldMask
		if v <= MaxBytes {
			stdatomic.AddInt64(&r.freedBytes, n)
			c = stdatomic.AddUint64(&r.counts, freeDelta)
			if c&liveMask < MaxBuffers && c < foldAt {
				return nil
			}
		}
	}
	return r.freeSlow(n, v, c)
}

// freeSlow finishes a Free whose fast path did not. If n <= fastMax, the
// fast path took n from the bytes (v the held bytes after it) and, if v is
// within [0, MaxBytes], added n to the freed bytes and counted the free (c
// the counts after it).
func (r *Record) freeSlow(n, v int64, c uint64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if uint64(n-1) < fastMax {
		counted := v <= MaxBytes
		if counted && c&liveMask < MaxBuffers {
			r.foldIfDue(c)
			return nil
		}
		if counted {
			stdatomic.AddUint64(&r.counts, unfree)
			stdatomic.AddInt64(&r.freedBytes, -n)
		}
		// An Alloc that added in between on the fast path saw a figure
		// too low by n and may have skipped raising the peak: raise from
		// the restored figure. While no limit is set (generation 0), the
		// only other transients are refused Frees (lower, taken back
		// with the same raise) or adds past MaxBytes (not raised); under
		// a limit no Alloc succeeds on the fast path.
		if w := stdatomic.AddInt64(&r.bytes, n-tagUnit) & lowMask; w <= MaxBytes {
			r.raiseBytes(w)
		}
	}
	return r.freeExact(n, false)
}

// freeExact is the exact path of Free, and of Cancel where cancel is set:
// a compare-and-swap loop on a consistent state. A cancel's figures are
// written beside the freed bytes, between the bytes and the counts, where
// readers load them (see absolute).
func (r *Record) freeExact(n int64, cancel bool) error {
	for {
		o, cs := r.load()
		held := o & heldMask
		if n > held || cs&liveMask == 0 {
			return freeExceeds(n, held)
		}
		if stdatomic.CompareAndSwapInt64(&r.bytes, o, o-n+tagUnit) {
			if cancel {
				r.cancels.Add(1)
				r.cancelledBytes.Add(n)
				r.failed.Add(1)
			}
			stdatomic.AddInt64(&r.freedBytes, n)
			r.foldIfDue(stdatomic.AddUint64(&r.counts, freeDelta))
			return nil
		}
	}
}

// foldIfDue moves the frees of the counts word into the 64-bit total once
// they reach 2^31, long before they could carry out of the word. One
// goroutine folds at a time; readers retry a read that a fold overlapped.
func (r *Record) foldIfDue(c uint64) {
	if c < foldAt {
		return
	}
	seq := r.foldSeq.Load()
	if seq&1 != 0 || !r.foldSeq.CompareAndSwap(seq, seq+1) {
		return
	}
	const k = 1 << 31
	if stdatomic.LoadUint64(&r.counts) >= foldAt {
		stdatomic.AddUint64(&r.counts, ^uint64(k<<32-1))
		r.foldedFrees.Add(k)
	}
	r.foldSeq.Store(seq + 2)
}

// RecordFailure counts an allocation that failed outside the record (in the
// allocator behind it), without changing any other figure.
func (r *Record) RecordFailure() { r.failed.Add(1) }

// Tracked returns the bytes held now.
func (r *Record) Tracked() int64 {
	b, _ := r.load()
	return b & heldMask
}

// PeakTracked returns the high-water mark of the bytes held since the last
// [Record.ResetPeak]; it is never below the current figure read before it.
func (r *Record) PeakTracked() int64 {
	p := stdatomic.LoadInt64(&r.peakBytes)
	return max(p, r.Tracked())
}

// Buffers returns the number of live buffers.
func (r *Record) Buffers() int64 {
	_, c := r.load()
	return int64(c & liveMask)
}

// SetLimit sets a limit on the bytes held: an allocation that lands after
// SetLimit returns never takes the bytes held past it. Zero removes the
// limit; a negative limit is an error. The current figure may already be
// above a new limit; nothing is freed.
func (r *Record) SetLimit(limit int64) error {
	if limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", ErrInvalidSize, limit)
	}
	for !r.limitMu.CompareAndSwap(0, 1) {
		runtime.Gosched()
	}
	defer r.limitMu.Store(0)
	stdatomic.StoreInt64(&r.limit, limit)
	// Publish the change in the bytes word: a new generation fails every
	// compare-and-swap prepared under the old limit, and a non-zero one
	// sends the fast path to the exact path.
	//
	// The non-zero generations cycle through 1 to 31 over the SetLimits
	// that set a limit, whatever limits were removed in between (a removal
	// writes generation 0 and leaves the cycle where it was). A
	// compare-and-swap of allocExact prepared under a limit (generation g)
	// can therefore pass under another only if, between its load and its
	// compare-and-swap, a multiple of 31 SetLimits set a limit, the last
	// SetLimit set one, and the operations on the record in that time left
	// the held bytes as they were and moved the tag by a multiple of 2^11
	// (a race test that switches limits in a loop saw it twice in 100,000
	// rounds); allocExact therefore reads the limit again after its
	// compare-and-swap, before the new figure can be read, and takes back
	// an add past it. One prepared without a limit (generation 0) can pass
	// only while no limit is set, which is what it assumed.
	g := int64(0)
	if limit > 0 {
		r.limitGen = r.limitGen%31 + 1
		g = r.limitGen
	}
	for {
		o, _ := r.load()
		if stdatomic.CompareAndSwapInt64(&r.bytes, o, o&^genMask|g<<genShift) {
			return nil
		}
	}
}

// Limit returns the limit on the bytes held, or 0 if none is set.
func (r *Record) Limit() int64 { return stdatomic.LoadInt64(&r.limit) }

// load returns the bytes and counts words of one consistent state (see
// consistent), waiting out operations between their first and last adds
// and refused changes being taken back. It loads the counts, the bytes and
// the counts again: if the counts did not change and the bytes' tag matches
// them, no operation was between its adds when the counts were loaded and
// none made its first add before the bytes were loaded (short of 2^11 of
// them stopped between their adds at once).
func (r *Record) load() (bytes int64, counts uint64) {
	for {
		c := stdatomic.LoadUint64(&r.counts)
		b := stdatomic.LoadInt64(&r.bytes)
		if consistent(b, c) && stdatomic.LoadUint64(&r.counts) == c {
			return b, c
		}
		runtime.Gosched()
	}
}

// Snapshot returns all the statistics as one consistent state: no figure is
// negative, Allocs-Frees == Buffers - (Buffers at the last ResetAccumulated),
// and AllocBytes-FreedBytes == Tracked - (Tracked at the last
// ResetAccumulated). Every operation counts wholly before or wholly after a
// reset, and no cumulative figure decreases between snapshots, except
// across ResetAccumulated.
func (r *Record) Snapshot() Stats {
	for {
		seq := r.baseSeq.Load()
		if seq&1 == 0 {
			ba, bab, bf, bfb, bfl := r.baseAllocs.Load(), r.baseAllocBytes.Load(), r.baseFrees.Load(), r.baseFreedBytes.Load(), r.baseFailed.Load()
			s := r.absolute()
			if r.baseSeq.Load() == seq {
				s.Allocs -= ba
				s.AllocBytes -= bab
				s.Frees -= bf
				s.FreedBytes -= bfb
				s.FailedAllocs -= bfl
				return s
			}
		}
		runtime.Gosched()
	}
}

// absolute returns the statistics of one consistent state, with the
// cumulative figures counted from the record's creation. The counts are
// loaded first, then the freed bytes, the bytes and the counts again: a
// Free adds its freed bytes between its bytes and its counts, so with the
// bytes' tag matching the counts, the freed bytes are those of the same
// state.
func (r *Record) absolute() Stats {
	var b, freed, folded, cancels, cancelled int64
	var c uint64
	for {
		seq := r.foldSeq.Load()
		if seq&1 == 0 {
			c = stdatomic.LoadUint64(&r.counts)
			cancels, cancelled = r.cancels.Load(), r.cancelledBytes.Load()
			freed = stdatomic.LoadInt64(&r.freedBytes)
			b = stdatomic.LoadInt64(&r.bytes)
			folded = r.foldedFrees.Load()
			if consistent(b, c) && stdatomic.LoadUint64(&r.counts) == c && r.foldSeq.Load() == seq {
				break
			}
		}
		runtime.Gosched()
	}
	frees := folded + int64(c>>32) - cancels
	freed -= cancelled
	live := int64(c & liveMask)
	cur := b & heldMask
	return Stats{
		Tracked:      cur,
		PeakTracked:  max(stdatomic.LoadInt64(&r.peakBytes), cur),
		Buffers:      live,
		PeakBuffers:  max(stdatomic.LoadInt64(&r.peakLive), live),
		AllocBytes:   cur + freed,
		FreedBytes:   freed,
		Allocs:       live + frees,
		Frees:        frees,
		FailedAllocs: r.failed.Load(),
		Limit:        stdatomic.LoadInt64(&r.limit),
	}
}

// ResetPeak sets both peaks (bytes and live buffers) to their current
// figures; a new peak raised by a concurrent Alloc is kept.
func (r *Record) ResetPeak() {
	stdatomic.StoreInt64(&r.peakBytes, r.Tracked())
	stdatomic.StoreInt64(&r.peakLive, r.Buffers())
	// See Counter.ResetPeak.
	r.raisePeaks(r.Tracked(), r.Buffers())
}

// ResetAccumulated sets the cumulative figures (allocations, frees, their
// bytes and the failures) back to zero; the current figures and peaks stay.
// The bases are one consistent state, written as one: every operation
// counts wholly before the reset or wholly after it, and a concurrent
// Snapshot sees all of the new bases or none.
func (r *Record) ResetAccumulated() {
	var seq int64
	for {
		seq = r.baseSeq.Load()
		if seq&1 == 0 && r.baseSeq.CompareAndSwap(seq, seq+1) {
			break
		}
		runtime.Gosched()
	}
	s := r.absolute()
	r.baseAllocs.Store(s.Allocs)
	r.baseAllocBytes.Store(s.AllocBytes)
	r.baseFrees.Store(s.Frees)
	r.baseFreedBytes.Store(s.FreedBytes)
	r.baseFailed.Store(s.FailedAllocs)
	r.baseSeq.Store(seq + 2)
}
