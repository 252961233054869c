package tracker

import (
	"fmt"
	"runtime"
	stdatomic "sync/atomic"

	"go.uber.org/atomic"
)

// The record's state word packs the bytes held and the live-buffer count, so
// that one atomic add moves both and returns both for the peak checks:
//
//	bit 63: always 0 (a negative word means a refused change is in flight)
//	bits 21-62: bytes held (42 bits)
//	bits 0-20: live buffers (21 bits; values above MaxLive are refused)
const (
	liveBits = 21
	liveMask = 1<<liveBits - 1
)

// The freed word packs the cumulative frees (low 20 bits) and freed bytes
// (high 44 bits). It is folded into 64-bit totals whenever either half
// reaches half of its range, long before it could carry.
const (
	freedCountBits  = 20
	freedCountMask  = 1<<freedCountBits - 1
	flushCount      = 1 << (freedCountBits - 1)
	flushFreedBytes = 1 << 42
)

const (
	// MaxBytes is the most bytes a [Record] holds at once (4 TiB - 1).
	MaxBytes = 1<<(63-liveBits) - 1
	// MaxLive is the most live buffers a [Record] holds at once.
	MaxLive = 1 << (liveBits - 1)
)

// Stats is a snapshot of a [Record].
type Stats struct {
	Current        int64 // bytes held now
	Peak           int64 // high-water mark of Current since the last ResetPeak
	Active         int64 // live buffers now
	PeakActive     int64 // high-water mark of Active since the last ResetPeak
	AllocatedBytes int64 // cumulative bytes allocated since the last ResetAccumulated
	FreedBytes     int64 // cumulative bytes freed since the last ResetAccumulated
	Allocs         int64 // cumulative allocations since the last ResetAccumulated
	Frees          int64 // cumulative frees since the last ResetAccumulated
	Failed         int64 // allocations refused or failed since the last ResetAccumulated
	Limit          int64 // the limit on Current; 0 means none
}

// Record keeps one device's allocation statistics: bytes and live buffers,
// each with its peak, the cumulative allocation and free figures, and the
// failed allocations. It is safe for concurrent use and its zero value is
// ready to use; it must not be copied after first use.
//
// The allocation path is built for contention. Alloc performs one atomic add
// (a compare-and-swap loop instead while a limit is set); Free performs two
// atomic adds; both on the record's first cache line. The peaks and the
// limit sit on a second line that is written only when a peak rises, so the
// peak checks are plain loads. Cumulative allocation figures are derived, not
// counted: allocations = live + frees, allocated bytes = held + freed bytes.
//
// The record occupies whole cache lines of its own: records of different
// devices never share one.
type Record struct {
	_ [0]stdatomic.Int64 // 64-bit alignment on 32-bit platforms
	_ [cacheLineSize]byte

	// Hot line: written by every Alloc and Free.
	state atomic.Int64  // bytes<<liveBits | live
	freed atomic.Uint64 // frees | freedBytes<<freedCountBits, since the last fold
	_     [cacheLineSize - 16]byte

	// Read-mostly line: read by every Alloc, written when a peak rises.
	peakBytes atomic.Int64
	peakLive  atomic.Int64
	limit     atomic.Int64
	_         [cacheLineSize - 24]byte

	// Cold line: written on folds, failures and by readers.
	foldSeq          atomic.Int64 // odd while a fold moves figures
	foldedFrees      atomic.Int64
	foldedFreedBytes atomic.Int64
	failed           atomic.Int64
	// Readers publish the highest cumulative figures they have reported, so
	// that the figures never run backwards while a Free is between its two
	// adds; the bases are the figures at the last ResetAccumulated.
	seenAllocs, seenAllocBytes, seenFrees, seenFreedBytes             atomic.Int64
	baseAllocs, baseAllocBytes, baseFrees, baseFreedBytes, baseFailed atomic.Int64
	_                                                                 [cacheLineSize]byte
}

// Alloc records an allocation of n bytes: the bytes held and the live
// buffers go up, and their peaks follow. It fails, changing nothing but the
// failure count, with [ErrInvalidSize] if n <= 0 (not counted as a failure),
// with a [*LimitError] if a limit is set and would be passed, and with
// [ErrCapacity] past [MaxBytes] bytes or [MaxLive] buffers.
func (r *Record) Alloc(n int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if lim := r.limit.Load(); lim > 0 {
		return r.allocWithin(n, min(lim, MaxBytes))
	}
	if n > MaxBytes {
		r.failed.Inc()
		return fmt.Errorf("%w: %d bytes exceed %d", ErrCapacity, n, int64(MaxBytes))
	}
	// Fast path: one atomic add.
	d := n<<liveBits + 1
	if v := r.state.Add(d); v >= 0 && v&liveMask <= MaxLive {
		r.raisePeaks(v)
		return nil
	}
	// Past capacity, or a refused Free of another goroutine is being taken
	// back: undo and decide exactly.
	r.state.Sub(d)
	return r.allocWithin(n, MaxBytes)
}

// allocWithin is the exact path: a compare-and-swap loop that refuses what
// would pass lim or the record's capacity.
func (r *Record) allocWithin(n, lim int64) error {
	for {
		o := r.loadState()
		held := o >> liveBits
		if n > lim-held {
			r.failed.Inc()
			if lim == MaxBytes {
				return fmt.Errorf("%w: holding %d, adding %d, at most %d", ErrCapacity, held, n, int64(MaxBytes))
			}
			return &LimitError{Requested: n, Current: held, Limit: lim}
		}
		if o&liveMask >= MaxLive {
			r.failed.Inc()
			return fmt.Errorf("%w: a record holds at most %d buffers", ErrCapacity, MaxLive)
		}
		v := o + n<<liveBits + 1
		if r.state.CompareAndSwap(o, v) {
			r.raisePeaks(v)
			return nil
		}
	}
}

func (r *Record) raisePeaks(v int64) {
	if b := v >> liveBits; b > r.peakBytes.Load() {
		raise(&r.peakBytes, b)
	}
	if l := v & liveMask; l > r.peakLive.Load() {
		raise(&r.peakLive, l)
	}
}

// Free records the release of one buffer of n bytes. It fails with
// [ErrInvalidSize] if n <= 0 and with [ErrFreeExceedsHeld] if n is more than
// is held or no buffer is live; a failed Free changes nothing.
//
// The fast path is one atomic add for the state and one for the cumulative
// frees. A Free of more than is held is a caller's bug: the record takes its
// add back at once and decides again exactly, and readers wait out the
// instant in between.
func (r *Record) Free(n int64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if n <= MaxBytes {
		d := n<<liveBits + 1
		if v := r.state.Add(-d); v >= 0 && v&liveMask <= MaxLive {
			r.countFree(n)
			return nil
		}
		// An Alloc that ran in between saw a figure too low by d and may
		// have skipped raising a peak: raise from the restored figure.
		r.raisePeaks(r.state.Add(d))
	}
	return r.freeExact(n)
}

// freeExact is the exact path of Free: a compare-and-swap loop.
func (r *Record) freeExact(n int64) error {
	for {
		o := r.loadState()
		held := o >> liveBits
		if n > held || o&liveMask == 0 {
			return freeExceeds(n, held)
		}
		if r.state.CompareAndSwap(o, o-(n<<liveBits+1)) {
			r.countFree(n)
			return nil
		}
	}
}

// countFree adds one free of n bytes to the cumulative figures.
func (r *Record) countFree(n int64) {
	if f := r.freed.Add(uint64(n)<<freedCountBits + 1); f&freedCountMask >= flushCount || f>>freedCountBits >= flushFreedBytes {
		r.fold()
	}
}

// fold moves the packed freed word into the 64-bit totals. One goroutine
// folds at a time, and readers retry a read that a fold overlapped; a Free
// that finds a fold running leaves its figures in the packed word for the
// next one. Folds are rare: one per half a million frees or 4 TiB freed.
func (r *Record) fold() {
	seq := r.foldSeq.Load()
	if seq&1 != 0 || !r.foldSeq.CompareAndSwap(seq, seq+1) {
		return
	}
	f := r.freed.Swap(0)
	r.foldedFrees.Add(int64(f & freedCountMask))
	r.foldedFreedBytes.Add(int64(f >> freedCountBits))
	r.foldSeq.Store(seq + 2)
}

// loadFreed returns the cumulative frees and freed bytes, folded and packed
// together, as of one moment between folds.
func (r *Record) loadFreed() (frees, freedBytes int64) {
	for {
		seq := r.foldSeq.Load()
		if seq&1 == 0 {
			frees, freedBytes = r.foldedFrees.Load(), r.foldedFreedBytes.Load()
			f := r.freed.Load()
			if r.foldSeq.Load() == seq {
				return frees + int64(f&freedCountMask), freedBytes + int64(f>>freedCountBits)
			}
		}
		runtime.Gosched()
	}
}

// RecordFailure counts an allocation that failed outside the record (in the
// allocator behind it), without changing any other figure.
func (r *Record) RecordFailure() { r.failed.Inc() }

// Current returns the bytes held now.
func (r *Record) Current() int64 { return r.loadState() >> liveBits }

// Peak returns the high-water mark of the bytes held since the last
// [Record.ResetPeak]; it is never below the current figure read before it.
func (r *Record) Peak() int64 {
	p := r.peakBytes.Load()
	return max(p, r.Current())
}

// Active returns the number of live buffers.
func (r *Record) Active() int64 { return r.loadState() & liveMask }

// SetLimit sets a limit on the bytes held: from then on Alloc refuses what
// would pass it. Zero removes the limit; a negative limit is an error. The
// current figure may already be above a new limit; nothing is freed.
func (r *Record) SetLimit(limit int64) error {
	if limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", ErrInvalidSize, limit)
	}
	r.limit.Store(limit)
	return nil
}

// Limit returns the limit on the bytes held, or 0 if none is set.
func (r *Record) Limit() int64 { return r.limit.Load() }

// loadState returns the state word, waiting out a refused change that is
// being taken back (the only time the word is outside its valid range).
func (r *Record) loadState() int64 {
	for {
		v := r.state.Load()
		if v >= 0 && v&liveMask <= MaxLive {
			return v
		}
		runtime.Gosched()
	}
}

// Snapshot returns all the statistics. Current, Peak, Active and PeakActive
// are read from one word and are exact. The cumulative figures are exact
// whenever no Free is in progress; while some are, Allocs and AllocatedBytes
// can trail by those frees (so Allocs-Frees can exceed Active by them). No
// cumulative figure decreases between snapshots, except across
// ResetAccumulated.
func (r *Record) Snapshot() Stats {
	s := r.absolute()
	s.Allocs -= r.baseAllocs.Load()
	s.AllocatedBytes -= r.baseAllocBytes.Load()
	s.Frees -= r.baseFrees.Load()
	s.FreedBytes -= r.baseFreedBytes.Load()
	s.Failed -= r.baseFailed.Load()
	return s
}

// absolute returns the statistics with the cumulative figures counted from
// the record's creation.
func (r *Record) absolute() Stats {
	// The frees are read before the state: a Free changes the state first,
	// so the derived figures can trail a Free in progress, never run ahead.
	frees, freedBytes := r.loadFreed()
	v := r.loadState()
	cur, live := v>>liveBits, v&liveMask
	return Stats{
		Current:        cur,
		Peak:           max(r.peakBytes.Load(), cur),
		Active:         live,
		PeakActive:     max(r.peakLive.Load(), live),
		AllocatedBytes: monotonic(&r.seenAllocBytes, cur+freedBytes),
		FreedBytes:     monotonic(&r.seenFreedBytes, freedBytes),
		Allocs:         monotonic(&r.seenAllocs, live+frees),
		Frees:          monotonic(&r.seenFrees, frees),
		Failed:         r.failed.Load(),
		Limit:          r.limit.Load(),
	}
}

// monotonic publishes v as seen and returns the highest figure seen so far.
func monotonic(seen *atomic.Int64, v int64) int64 {
	raise(seen, v)
	return max(v, seen.Load())
}

// ResetPeak sets both peaks (bytes and live buffers) to their current
// figures; a new peak raised by a concurrent Alloc is kept.
func (r *Record) ResetPeak() {
	v := r.loadState()
	r.peakBytes.Store(v >> liveBits)
	r.peakLive.Store(v & liveMask)
	// See Counter.ResetPeak.
	r.raisePeaks(r.loadState())
}

// ResetAccumulated sets the cumulative figures (allocations, frees, their
// bytes and the failures) back to zero; the current figures and peaks stay.
func (r *Record) ResetAccumulated() {
	s := r.absolute()
	r.baseAllocs.Store(s.Allocs)
	r.baseAllocBytes.Store(s.AllocatedBytes)
	r.baseFrees.Store(s.Frees)
	r.baseFreedBytes.Store(s.FreedBytes)
	r.baseFailed.Store(s.Failed)
}
