package tracker

import (
	"fmt"
	"runtime"
	stdatomic "sync/atomic"
)

// The bytes word holds the bytes held in its low 58 bits and, in bits 58-62,
// a limit generation: 0 while no limit is set, bumped (1 to 31) by every
// SetLimit that sets one. A fast-path add lands on the generation it finds,
// so an Alloc that started before SetLimit and adds after it sees a non-zero
// generation and takes the exact path, and a compare-and-swap prepared
// under one limit fails once another is set.
//
// The counts word holds the live buffers in its low 32 bits and the frees
// (modulo 2^32, folded into a 64-bit total every 2^31) in its high 32 bits,
// so that one add moves both on a Free and the cumulative allocations
// (live + frees) never trail or lead.
const (
	genShift  = 58
	fieldMask = 1<<genShift - 1
	genMask   = 31 << genShift
	liveMask  = 1<<32 - 1
	freeDelta = 1<<32 - 1              // frees+1, live-1
	unfree    = ^uint64(freeDelta - 1) // -freeDelta
	foldAt    = 1 << 63                // frees field at 2^31
	notAdded  = -1 << 63               // no fast-path add was made
)

const (
	// MaxBytes is the most bytes a [Record] holds at once (64 TiB).
	MaxBytes = 1 << 46
	// MaxLive is the most live buffers a [Record] holds at once (2^31).
	MaxLive = 1 << 31
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
// The allocation path is built for contention. Without a limit, Alloc of up
// to 16 MiB performs two atomic adds (bytes, live buffers) and Free three
// (bytes, live buffers with frees, freed bytes), all on the record's first
// cache line; their fast paths are small enough for the compiler to inline.
// Larger sizes, and every Alloc while a limit is set, take a
// compare-and-swap loop instead of the bytes add. The peaks and the limit
// sit on a second line that is written only when a peak rises, so the peak
// checks are plain loads. Cumulative allocation figures are derived, not
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
	peakBytes int64 // atomic
	peakLive  int64 // atomic
	limit     int64 // atomic
	_         [cacheLineSize - 24]byte

	// Cold line: written on folds, failures, resets and by readers.
	foldSeq     stdatomic.Int64 // odd while a fold moves frees
	foldedFrees stdatomic.Int64
	failed      stdatomic.Int64
	limitMu     stdatomic.Int64 // 1 while a SetLimit runs
	// Readers publish the highest allocated bytes they have reported, so
	// that the figure never runs backwards while a Free is between its
	// adds. The bases are the figures at the last ResetAccumulated, written
	// under baseSeq (odd while they change).
	seenAllocBytes                                                    int64 // atomic
	baseSeq                                                           stdatomic.Int64
	baseAllocs, baseAllocBytes, baseFrees, baseFreedBytes, baseFailed stdatomic.Int64
	_                                                                 [cacheLineSize]byte
}

// Alloc records an allocation of n bytes: the bytes held and the live
// buffers go up, and their peaks follow. It fails, changing nothing but the
// failure count, with [ErrInvalidSize] if n <= 0 (not counted as a failure),
// with a [*LimitError] if a limit is set and would be passed, and with
// [ErrCapacity] past [MaxBytes] bytes or [MaxLive] buffers.
func (r *Record) Alloc(n int64) error {
	v, l := int64(notAdded), int64(0)
	if uint64(n-1) < fastMax && stdatomic.LoadInt64(&r.limit) == 0 {
		v = stdatomic.AddInt64(&r.bytes, n)
		if uint64(v) <= MaxBytes {
			l = int64(stdatomic.AddUint64(&r.counts, 1) & liveMask)
			if l <= MaxLive && v <= stdatomic.LoadInt64(&r.peakBytes) && l <= stdatomic.LoadInt64(&r.peakLive) {
				return nil
			}
		}
	}
	return r.allocSlow(n, v, l)
}

// allocSlow finishes an Alloc whose fast path did not. If v != notAdded,
// the fast path added n to the bytes (v the result) and, if v is within
// [0, MaxBytes], one buffer to the counts (l the live buffers after it).
func (r *Record) allocSlow(n, v, l int64) error {
	if v != notAdded {
		if uint64(v) <= MaxBytes {
			if l <= MaxLive {
				r.raisePeaks(v, l)
				return nil
			}
			stdatomic.AddUint64(&r.counts, ^uint64(0))
		}
		// Past a capacity, a limit set meanwhile, or a refused Free of
		// another goroutine being taken back: undo and decide exactly.
		stdatomic.AddInt64(&r.bytes, -n)
	}
	if n <= 0 {
		return invalidSize(n)
	}
	return r.allocExact(n)
}

// allocExact is the exact path: a compare-and-swap loop on the bytes that
// refuses what would pass the limit or the record's capacity.
func (r *Record) allocExact(n int64) error {
	for {
		o := r.loadBytes()
		held := o & fieldMask
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
			return &LimitError{Requested: n, Current: held, Limit: room}
		}
		if r.loadCounts()&liveMask >= MaxLive {
			r.failed.Add(1)
			return fmt.Errorf("%w: a record holds at most %d buffers", ErrCapacity, int64(MaxLive))
		}
		if stdatomic.CompareAndSwapInt64(&r.bytes, o, o+n) {
			l := int64(stdatomic.AddUint64(&r.counts, 1) & liveMask)
			if l > MaxLive {
				// Raced to the 2^31st buffer: take both back.
				stdatomic.AddUint64(&r.counts, ^uint64(0))
				stdatomic.AddInt64(&r.bytes, -n)
				r.failed.Add(1)
				return fmt.Errorf("%w: a record holds at most %d buffers", ErrCapacity, int64(MaxLive))
			}
			r.raisePeaks(held+n, l)
			return nil
		}
	}
}

func (r *Record) raisePeaks(bytes, live int64) {
	if bytes > stdatomic.LoadInt64(&r.peakBytes) {
		raise(&r.peakBytes, bytes)
	}
	if live > stdatomic.LoadInt64(&r.peakLive) {
		raise(&r.peakLive, live)
	}
}

// Free records the release of one buffer of n bytes. It fails with
// [ErrInvalidSize] if n <= 0 and with [ErrFreeExceedsHeld] if n is more than
// is held or no buffer is live; a failed Free changes nothing.
//
// A Free of more than is held is a caller's bug: the record takes its add
// back at once and decides again exactly, and readers wait out the instant
// in between.
func (r *Record) Free(n int64) error {
	var v int64 = -1
	var c uint64
	if uint64(n-1) < fastMax {
		v = stdatomic.AddInt64(&r.bytes, -n)
		if v&fieldMask <= MaxBytes {
			c = stdatomic.AddUint64(&r.counts, freeDelta)
			if c&liveMask < MaxLive && c < foldAt {
				stdatomic.AddInt64(&r.freedBytes, n)
				return nil
			}
		}
	}
	return r.freeSlow(n, v, c)
}

// freeSlow finishes a Free whose fast path did not. If n <= fastMax, the
// fast path took n from the bytes (v the result) and, if v's bytes are
// within [0, MaxBytes], counted the free (c the counts after it).
func (r *Record) freeSlow(n, v int64, c uint64) error {
	if n <= 0 {
		return invalidSize(n)
	}
	if uint64(n-1) < fastMax {
		counted := v&fieldMask <= MaxBytes
		if counted && c&liveMask < MaxLive {
			stdatomic.AddInt64(&r.freedBytes, n)
			r.foldIfDue(c)
			return nil
		}
		if counted {
			stdatomic.AddUint64(&r.counts, unfree)
		}
		// An Alloc that ran in between saw a figure too low by n and may
		// have skipped raising the peak: raise from the restored figure.
		if w := stdatomic.AddInt64(&r.bytes, n); w&fieldMask <= MaxBytes {
			if b := w & fieldMask; b > stdatomic.LoadInt64(&r.peakBytes) {
				raise(&r.peakBytes, b)
			}
		}
	}
	for {
		o := r.loadBytes()
		held := o & fieldMask
		if n > held {
			return freeExceeds(n, held)
		}
		cs := r.loadCounts()
		if cs&liveMask == 0 {
			return freeExceeds(n, held)
		}
		if stdatomic.CompareAndSwapInt64(&r.bytes, o, o-n) {
			c := stdatomic.AddUint64(&r.counts, freeDelta)
			if c&liveMask >= MaxLive {
				// The last live buffer went meanwhile: take it back.
				stdatomic.AddUint64(&r.counts, unfree)
				stdatomic.AddInt64(&r.bytes, n)
				return freeExceeds(n, held)
			}
			stdatomic.AddInt64(&r.freedBytes, n)
			r.foldIfDue(c)
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

// Current returns the bytes held now.
func (r *Record) Current() int64 { return r.loadBytes() & fieldMask }

// Peak returns the high-water mark of the bytes held since the last
// [Record.ResetPeak]; it is never below the current figure read before it.
func (r *Record) Peak() int64 {
	p := stdatomic.LoadInt64(&r.peakBytes)
	return max(p, r.Current())
}

// Active returns the number of live buffers.
func (r *Record) Active() int64 { return int64(r.loadCounts() & liveMask) }

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
	for {
		o := r.loadBytes()
		g := int64(0)
		if limit > 0 {
			g = (o>>genShift)%31 + 1
		}
		if stdatomic.CompareAndSwapInt64(&r.bytes, o, g<<genShift|o&fieldMask) {
			return nil
		}
	}
}

// Limit returns the limit on the bytes held, or 0 if none is set.
func (r *Record) Limit() int64 { return stdatomic.LoadInt64(&r.limit) }

// loadBytes returns the bytes word, waiting out a refused change that is
// being taken back (the only time its bytes are outside [0, MaxBytes]).
func (r *Record) loadBytes() int64 {
	for {
		if v := stdatomic.LoadInt64(&r.bytes); v >= 0 && v&fieldMask <= MaxBytes {
			return v
		}
		runtime.Gosched()
	}
}

// loadCounts returns the counts word, waiting out a refused change that is
// being taken back.
func (r *Record) loadCounts() uint64 {
	for {
		if c := stdatomic.LoadUint64(&r.counts); c&liveMask <= MaxLive {
			return c
		}
		runtime.Gosched()
	}
}

// Snapshot returns all the statistics as one consistent state: no figure is
// negative, and Allocs-Frees == Active and AllocatedBytes-FreedBytes ==
// Current whenever no Alloc or Free is in progress. Allocs and Frees are
// read from one word; the byte figures can trail a Free in progress by its
// size, never run ahead, and no cumulative figure decreases between
// snapshots, except across ResetAccumulated.
func (r *Record) Snapshot() Stats {
	for {
		seq := r.baseSeq.Load()
		if seq&1 == 0 {
			ba, bab, bf, bfb, bfl := r.baseAllocs.Load(), r.baseAllocBytes.Load(), r.baseFrees.Load(), r.baseFreedBytes.Load(), r.baseFailed.Load()
			s := r.absolute()
			if r.baseSeq.Load() == seq {
				s.Allocs -= ba
				s.AllocatedBytes -= bab
				s.Frees -= bf
				s.FreedBytes -= bfb
				s.Failed -= bfl
				return s
			}
		}
		runtime.Gosched()
	}
}

// absolute returns the statistics with the cumulative figures counted from
// the record's creation.
func (r *Record) absolute() Stats {
	var frees int64
	var c uint64
	var freed int64
	for {
		seq := r.foldSeq.Load()
		if seq&1 == 0 {
			// The freed bytes are read before the bytes held: a Free
			// changes the bytes held first, so the derived allocated bytes
			// can trail a Free in progress, never run ahead.
			freed = stdatomic.LoadInt64(&r.freedBytes)
			frees = r.foldedFrees.Load()
			c = r.loadCounts()
			if r.foldSeq.Load() == seq {
				break
			}
		}
		runtime.Gosched()
	}
	frees += int64(c >> 32)
	live := int64(c & liveMask)
	cur := r.loadBytes() & fieldMask
	allocBytes := cur + freed
	raise(&r.seenAllocBytes, allocBytes)
	return Stats{
		Current:        cur,
		Peak:           max(stdatomic.LoadInt64(&r.peakBytes), cur),
		Active:         live,
		PeakActive:     max(stdatomic.LoadInt64(&r.peakLive), live),
		AllocatedBytes: max(allocBytes, stdatomic.LoadInt64(&r.seenAllocBytes)),
		FreedBytes:     freed,
		Allocs:         live + frees,
		Frees:          frees,
		Failed:         r.failed.Load(),
		Limit:          stdatomic.LoadInt64(&r.limit),
	}
}

// ResetPeak sets both peaks (bytes and live buffers) to their current
// figures; a new peak raised by a concurrent Alloc is kept.
func (r *Record) ResetPeak() {
	stdatomic.StoreInt64(&r.peakBytes, r.Current())
	stdatomic.StoreInt64(&r.peakLive, r.Active())
	// See Counter.ResetPeak.
	r.raisePeaks(r.Current(), r.Active())
}

// ResetAccumulated sets the cumulative figures (allocations, frees, their
// bytes and the failures) back to zero; the current figures and peaks stay.
// The bases are written as one: a concurrent Snapshot sees all of them or
// none.
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
	r.baseAllocBytes.Store(s.AllocatedBytes)
	r.baseFrees.Store(s.Frees)
	r.baseFreedBytes.Store(s.FreedBytes)
	r.baseFailed.Store(s.Failed)
	r.baseSeq.Store(seq + 2)
}
