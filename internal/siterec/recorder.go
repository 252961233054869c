package siterec

import (
	"cmp"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"go.uber.org/atomic"
)

// MaxDepth is the deepest call stack a Recorder records.
const MaxDepth = 128

// CallerSkip is what runtime.Callers skips in Recorder.allocSampled:
// Callers itself, allocSampled, Recorder.Alloc and the function to
// attribute the allocation to the caller of (memtrack's exported
// function), so that the first frame kept is that caller. The frames
// between that function and Recorder.Alloc's caller are Alloc's skip.
// Callers counts inlined frames as frames.
const CallerSkip = 4

// Stats describes a recorder: its settings and the scaled figures of its
// live samples.
type Stats struct {
	Depth     int   // the most frames recorded per stack
	Rate      int64 // the sampling rate: one sample per Rate bytes on average; 1 records all
	Sites     int   // distinct stacks held, besides the one of the allocations folded past the cap
	Folded    int64 // sampled allocations folded past the cap since the recorder was made
	Buffers   int64 // live samples, scaled
	Bytes     int64 // their bytes, scaled
	PeakBytes int64 // high-water mark of Bytes since New or the last ResetPeak
}

// Entry is one stack's figures, now or at the peak, in a Snapshot.
type Entry struct {
	Stack    []uintptr // nil for the allocations folded past the cap
	Buffers  int64     // scaled
	Bytes    int64     // scaled
	Category string    // the category given to Alloc or Record
}

// Recorder holds one device's allocation sites: per call stack, the
// live sampled buffers allocated from it and their scaled figures, and the
// same figures as they stood at the latest peak of the recorded bytes.
//
// The figures at the peak are kept lazily, at a constant cost per
// allocation and free: a new peak (or a reset) starts a new generation, at
// which moment every stack's figures at the peak are its current figures;
// a stack saves its figures the first time it changes in a generation. So
// a stack's figure at the peak is the saved one if it was saved in the
// current generation, and its current one if not.
//
// The scaled figures are float64: sums of whole weights (rate 1) are exact
// up to 2^53, and a stack or recorder with no live sample is set to zero
// exactly, so that rounding never leaves a residue behind.
type Recorder struct {
	depth    atomic.Int32
	rate     atomic.Int64
	maxSites int

	mu      sync.Mutex
	sites   map[uint64]*stack // by stack hash; collisions chain through stack.next
	n       int               // stacks in the map
	other   *stack            // allocations past maxSites
	folded  int64
	live    int64   // live samples
	objects float64 // their scaled count
	bytes   float64 // their scaled bytes
	peak    float64
	gen     uint64
	pending []*stack // emptied stacks kept for their figures at the peak
}

// stack is one call stack and the sampled buffers allocated from it.
type stack struct {
	rec  *Recorder
	hash uint64
	next *stack
	pcs  []uintptr // nil for the allocations folded past the cap; never modified
	cat  string    // the category's name; "" for none

	// Guarded by rec.mu.
	live                   int64 // live samples
	objects, bytes         float64
	peakObjects, peakBytes float64 // the figures at the peak, if savedGen == rec.gen
	savedGen               uint64  // generation of peakObjects and peakBytes
	pending                bool    // in rec.pending
}

// Site is what a recorded allocation keeps: its stack and the scaled figures
// it added there, which its free takes away again whatever the rate is by
// then.
type Site struct {
	st             *stack
	objects, bytes float64
}

// New returns a recorder of stacks of at most depth frames, sampled at
// rate, holding at most maxSites distinct stacks.
func New(depth int, rate int64, maxSites int) *Recorder {
	r := &Recorder{maxSites: maxSites, sites: make(map[uint64]*stack), gen: 1}
	r.depth.Store(int32(depth))
	r.rate.Store(rate)
	r.other = &stack{rec: r}
	return r
}

// Alloc samples an allocation of size bytes in category cat ("" for
// none); if it is sampled, it records the stack of the caller of the
// function to attribute it to (see CallerSkip) and returns the buffer's site, and nil
// if not. Not sampled, it costs one random number. skip is the frames
// between the exported function and alloc's caller, which the stack
// leaves out (see CallerSkip).
func (r *Recorder) Alloc(size int64, skip int, cat string) *Site {
	w, ok := Sample(size, r.rate.Load(), rand.Uint64())
	if !ok {
		return nil
	}
	return r.allocSampled(size, w, skip, cat)
}

// allocSampled records a sampled allocation of weight w, leaving out skip
// frames more than CallerSkip. Kept out of alloc so that the path of an
// allocation not sampled stays short.
//
//go:noinline
func (r *Recorder) allocSampled(size int64, w float64, skip int, cat string) *Site {
	var buf [MaxDepth]uintptr
	return r.Record(buf[:runtime.Callers(CallerSkip+skip, buf[:r.depth.Load()])], size, w, cat)
}

// Sample decides, with rnd a uniform random number, whether an allocation of
// size bytes is recorded at the rate, and returns its weight: the number of
// allocations the sample stands for. At rate 1 every allocation is, with
// weight 1. Otherwise, as in Go's heap profiler, the allocated bytes are
// sampled by a Poisson process of one point per rate bytes on average: an
// allocation is recorded if a point falls in it, with probability
// p = 1 - exp(-size/rate), and weighs 1/p, so that the scaled figures are
// unbiased. As p <= size/rate, most allocations not sampled are refused
// with one multiplication.
func Sample(size, rate int64, rnd uint64) (w float64, ok bool) {
	if rate <= 1 {
		return 1, true
	}
	u := float64(rnd>>11) * 0x1p-53 // uniform in [0, 1)
	if u*float64(rate) >= float64(size) {
		return 0, false
	}
	p := -math.Expm1(-float64(size) / float64(rate))
	if u >= p {
		return 0, false
	}
	return 1 / p, true
}

// Record counts an allocation of size bytes and weight w from the stack
// pcs, in category cat ("" for none).
func (r *Recorder) Record(pcs []uintptr, size int64, w float64, cat string) *Site {
	h := HashStack(pcs)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sites[h]
	for s != nil && (s.cat != cat || !slices.Equal(s.pcs, pcs)) {
		s = s.next
	}
	switch {
	case s != nil:
	case r.n < r.maxSites:
		s = &stack{rec: r, hash: h, next: r.sites[h], pcs: append([]uintptr(nil), pcs...), cat: cat}
		r.sites[h] = s
		r.n++
	default:
		s = r.other
		r.folded++
	}
	b := &Site{st: s, objects: w, bytes: w * float64(size)}
	s.save()
	s.live++
	s.objects += b.objects
	s.bytes += b.bytes
	r.live++
	r.objects += b.objects
	r.bytes += b.bytes
	if r.bytes > r.peak {
		r.peak = r.bytes
		r.newGen()
	}
	return b
}

// Free forgets the allocation of the site. It may run after the recorder was
// disabled, on the recorder that counted the buffer. The size is the
// buffer's; the site knows what it added.
func (b *Site) Free() {
	s := b.st
	r := s.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	s.save()
	s.live--
	s.objects -= b.objects
	s.bytes -= b.bytes
	r.live--
	r.objects -= b.objects
	r.bytes -= b.bytes
	if r.live == 0 {
		r.objects, r.bytes = 0, 0
	}
	if s.live > 0 {
		return
	}
	s.objects, s.bytes = 0, 0
	if s == r.other {
		return
	}
	if s.peakObjects == 0 {
		r.remove(s)
	} else if !s.pending {
		// Empty, but live at the peak: kept until the next generation.
		s.pending = true
		r.pending = append(r.pending, s)
	}
}

// save keeps the stack's figures at the peak before its first change in the
// current generation.
func (s *stack) save() {
	if g := s.rec.gen; s.savedGen != g {
		s.peakObjects, s.peakBytes, s.savedGen = s.objects, s.bytes, g
	}
}

// atPeak returns the stack's figures at the latest peak.
func (s *stack) atPeak() (objects, bytes float64) {
	if s.savedGen == s.rec.gen {
		return s.peakObjects, s.peakBytes
	}
	return s.objects, s.bytes
}

// newGen starts a generation: the figures at the peak become the current
// ones, and the empty stacks kept for the old peak go.
func (r *Recorder) newGen() {
	r.gen++
	for _, s := range r.pending {
		s.pending = false
		if s.live == 0 {
			r.remove(s)
		}
	}
	clear(r.pending)
	r.pending = r.pending[:0]
}

func (r *Recorder) remove(s *stack) {
	p := r.sites[s.hash]
	if p == s {
		if s.next == nil {
			delete(r.sites, s.hash)
		} else {
			r.sites[s.hash] = s.next
		}
	} else {
		for p.next != s {
			p = p.next
		}
		p.next = s.next
	}
	s.next = nil
	r.n--
}

// ResetPeak sets the peak to the recorded bytes now, as
// memtrack.Device.ResetPeakMemoryStats does for the device's own peak.
func (r *Recorder) ResetPeak() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peak = r.bytes
	r.newGen()
}

// Stats returns the recorder's settings and figures.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statsLocked()
}

func (r *Recorder) statsLocked() Stats {
	return Stats{
		Depth:     int(r.depth.Load()),
		Rate:      r.rate.Load(),
		Sites:     r.n,
		Folded:    r.folded,
		Buffers:   int64(math.Round(r.objects)),
		Bytes:     int64(math.Round(r.bytes)),
		PeakBytes: int64(math.Round(r.peak)),
	}
}

// Snapshot returns the stacks with live buffers, now or at the peak, the
// largest first, and the recorder's state.
func (r *Recorder) Snapshot(atPeak bool) ([]Entry, Stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, 0, r.n+1)
	add := func(s *stack) {
		o, b := s.objects, s.bytes
		if atPeak {
			o, b = s.atPeak()
		}
		if o != 0 || b != 0 {
			out = append(out, Entry{Stack: slices.Clone(s.pcs), Buffers: int64(math.Round(o)), Bytes: int64(math.Round(b)), Category: s.cat})
		}
	}
	for _, s := range r.sites {
		for ; s != nil; s = s.next {
			add(s)
		}
	}
	add(r.other)
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(b.Bytes, a.Bytes) })
	return out, r.statsLocked()
}

// HashStack hashes a stack (FNV-1a over the program counters).
func HashStack(pcs []uintptr) uint64 {
	h := uint64(14695981039346656037)
	for _, pc := range pcs {
		h ^= uint64(pc)
		h *= 1099511628211
	}
	return h
}

// Depth returns the most frames recorded per stack.
func (r *Recorder) Depth() int { return int(r.depth.Load()) }

// SetDepth sets the most frames recorded per stack of later allocations.
func (r *Recorder) SetDepth(depth int) { r.depth.Store(int32(depth)) }

// SetRate sets the sampling rate of later allocations; the samples already
// recorded keep their weights.
func (r *Recorder) SetRate(rate int64) { r.rate.Store(rate) }

// Stack returns the call stack of the site, innermost first, or nil for
// the allocations folded past the cap. It must not be modified.
func (b *Site) Stack() []uintptr { return b.st.pcs }

// Recorder returns the recorder that counted the site.
func (b *Site) Recorder() *Recorder { return b.st.rec }

// Bytes returns the scaled bytes the allocation added to its stack.
func (b *Site) Bytes() float64 { return b.bytes }
