package memtrack

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"go.uber.org/atomic"
)

const (
	// MaxSiteDepth is the deepest call stack [SiteRecorder.Enable]
	// records.
	MaxSiteDepth = 128

	// MaxAllocationSites is the most distinct call stacks a device records at
	// once. Allocations from further stacks are folded into one site,
	// "memtrack.other", and counted in [SiteStats].Folded.
	MaxAllocationSites = 4096

	// OtherSite names the site that holds the allocations past
	// [MaxAllocationSites] distinct stacks: a [Site] with a nil Stack.
	OtherSite = "memtrack.other"

	// DefaultSiteRate is the sampling rate of allocation sites unless
	// [SiteRecorder.SetRate] sets another: on average one sample
	// per 512 KiB allocated, the default of Go's heap profiler
	// ([runtime.MemProfileRate]). Device buffers are mostly far larger, so
	// they are nearly all recorded; a small buffer costs one random number.
	DefaultSiteRate = 512 << 10
)

// callerSkip is what runtime.Callers skips in siteRecorder.allocSampled:
// Callers itself, allocSampled, siteRecorder.alloc and the exported
// function that allocates, so that the first frame kept is the caller of
// that function. The frames between the exported function and
// siteRecorder.alloc (Device.allocate and hooks.alloc, for one) are told
// to it as skip (hookSkip). Callers counts inlined frames as frames.
const callerSkip = 4

// SiteStats describes the recording of allocation sites on one device.
// The figures cover the buffers allocated while recording was on; Buffers,
// Bytes and PeakBytes are scaled by the sampling, as [Site]'s figures
// are (exact at rate 1).
type SiteStats struct {
	Enabled   bool  // sites are being recorded
	Depth     int   // the most frames recorded per stack
	Rate      int64 // the sampling rate: on average one sample per Rate bytes; 1 records every allocation
	Sites     int   // distinct stacks held, besides "memtrack.other"
	Folded    int64 // sampled allocations folded into "memtrack.other" since recording began
	Buffers   int64 // recorded live buffers
	Bytes     int64 // their bytes
	PeakBytes int64 // high-water mark of Bytes since enabling or the last ResetPeakMemoryStats
}

// SiteRecorder is the recording of one device's allocation sites: its
// controls and what it recorded. Obtain it with [Device.Sites]; it is a
// small comparable value, as [Device] is.
type SiteRecorder struct{ dev Device }

// Sites returns the recorder of the device's allocation sites.
func (d Device) Sites() SiteRecorder { return SiteRecorder{dev: d} }

// Device returns the device whose sites it records.
func (r SiteRecorder) Device() Device { return r.dev }

// Enable starts recording, for later [Device.Alloc] calls on
// the device, the call stack that asked for the memory (at most depth
// frames above memtrack, 1 <= depth <= [MaxSiteDepth]; 32 is usual), so
// that [SiteRecorder.Snapshot] and [SiteRecorder.PeakSnapshot] attribute
// the live buffers, and those live at the latest peak, to their callers
// (package [github.com/memtrack/memtrack/pprof] writes them for go tool
// pprof). Buffers allocated before are not recorded.
//
// Allocations are sampled at the device's rate, [DefaultSiteRate] unless
// [SiteRecorder.SetRate] sets another, so that recording can stay
// on in production. On a device already recording, it changes the depth
// for later allocations and keeps what is recorded.
func (r SiteRecorder) Enable(depth int) error {
	d := r.dev
	if depth < 1 || depth > MaxSiteDepth {
		return fmt.Errorf("%w: stack depth %d on %v: want 1 to %d", ErrInvalidArgument, depth, d, MaxSiteDepth)
	}
	s, _, err := d.resolve()
	if err != nil {
		return err
	}
	if !sitesBuilt {
		return fmt.Errorf("%w on %v: this binary was built with -tags memtrack_nosites; rebuild without it", ErrSitesNotRecorded, d)
	}
	s.enableSites(d.ordinal, depth)
	return nil
}

// Disable stops recording allocation sites on the device and
// drops what was recorded. Buffers recorded before may still be freed; they
// are not counted again if recording is enabled anew. Recording that is off
// stays off.
func (r SiteRecorder) Disable() {
	d := r.dev
	if s, _, err := d.resolve(); err == nil {
		s.disableSites(d.ordinal)
	}
}

// SetRate sets the rate at which the device's allocation sites
// are sampled, with the semantics of Go's heap profiler
// ([runtime.MemProfileRate]): on average one sample per rate bytes
// allocated, an allocation of n bytes being recorded with probability
// 1 - exp(-n/rate), and each recorded allocation counted as 1/p buffers and
// n/p bytes, so that the figures of [Site] and [SiteStats] are unbiased
// estimates of the true ones. Rate 1 records every allocation, exactly; 0
// restores [DefaultSiteRate]; a negative rate fails with [ErrInvalidArgument].
//
// The rate holds for the device's later allocations, whether or not it
// records now, and across [SiteRecorder.Disable]; buffers already
// recorded keep the weight they were recorded with. The sampled figures at
// the peak are those at the peak of the sampled (scaled) bytes, which is
// the device's peak only approximately where small allocations make it.
func (r SiteRecorder) SetRate(rate int64) error {
	d := r.dev
	if rate < 0 {
		return fmt.Errorf("%w: allocation site rate %d on %v: want 1 (every allocation), more (bytes per sample) or 0 (the default)", ErrInvalidArgument, rate, d)
	}
	s, _, err := d.resolve()
	if err != nil {
		return err
	}
	if !sitesBuilt {
		return fmt.Errorf("%w on %v: this binary was built with -tags memtrack_nosites; rebuild without it", ErrSitesNotRecorded, d)
	}
	if rate == 0 {
		rate = DefaultSiteRate
	}
	s.setSiteRate(d.ordinal, rate)
	return nil
}

// Stats returns the state of the recording of allocation
// sites on the device; the zero SiteStats if recording is off.
func (r SiteRecorder) Stats() SiteStats {
	d := r.dev
	if d.peek() == nil {
		return SiteStats{}
	}
	if r := tables[d.kind].p.Load().siteRecorderOf(d.ordinal); r != nil {
		return r.stats()
	}
	return SiteStats{}
}

// Site is one call stack that allocated recorded buffers, with the figures
// of its live buffers, now or at the latest peak. The figures are scaled by
// the sampling ([SiteRecorder.SetRate]): each sampled buffer counts
// as the buffers and bytes it stands for, so they estimate the stack's true
// figures without bias, and equal them at rate 1.
type Site struct {
	// Stack holds the stack's return addresses, innermost first, as
	// [runtime.Callers] writes them (read them with [runtime.CallersFrames]);
	// nil for the site [OtherSite].
	Stack   []uintptr
	Buffers int64 // live buffers allocated from the stack (scaled)
	Bytes   int64 // their bytes (scaled)
	// Category is the category the buffers were allocated through
	// ([Category.Alloc]), or "" for none: one stack that allocates in two
	// categories is two sites.
	Category string
}

// SiteSnapshot is the allocation sites of one device at one moment, the
// largest first, with the state of the recording.
type SiteSnapshot struct {
	Device Device
	Stats  SiteStats
	// AtPeak is true for the figures at the latest peak of the recorded bytes
	// ([SiteRecorder.PeakSnapshot]), false for the live buffers now.
	AtPeak bool
	Sites  []Site
}

// Snapshot returns the device's recorded live buffers by allocation
// site, the largest first. It fails with an error matching
// [ErrSitesNotRecorded] unless [SiteRecorder.Enable] was called.
func (r SiteRecorder) Snapshot() (SiteSnapshot, error) {
	d := r.dev
	return d.siteSnapshot(false)
}

// PeakSnapshot returns the recorded buffers that were live at the
// latest peak of the recorded bytes (since recording began or the last
// [Device.ResetPeakMemoryStats]), by allocation site, the largest first. It
// fails as [SiteRecorder.Snapshot] does.
func (r SiteRecorder) PeakSnapshot() (SiteSnapshot, error) {
	d := r.dev
	return d.siteSnapshot(true)
}

func (d Device) siteSnapshot(atPeak bool) (SiteSnapshot, error) {
	r, err := d.recorder()
	if err != nil {
		return SiteSnapshot{Device: d, AtPeak: atPeak}, err
	}
	sites, st := r.snapshot(atPeak)
	return SiteSnapshot{Device: d, Stats: st, AtPeak: atPeak, Sites: sites}, nil
}

// recorder returns the device's recorder of allocation sites, or an error
// matching ErrSitesNotRecorded.
func (d Device) recorder() (*siteRecorder, error) {
	s, _, err := d.resolve()
	if err != nil {
		return nil, err
	}
	if r := s.siteRecorderOf(d.ordinal); r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("%w on %v: call Device.Sites().Enable first", ErrSitesNotRecorded, d)
}

// siteTable holds the sampling rates set for one kind's devices, by
// ordinal; their recorders are in the devices' hook sets (kindState.hooks).
type siteTable struct {
	mu    sync.Mutex // serialises the changes of rates and recorders
	rates []int64    // by ordinal, the rates set; 0: DefaultSiteRate
}

// rate returns the sampling rate of ordinal i. t.mu must be held.
func (t *siteTable) rate(i int) int64 {
	if i < len(t.rates) && t.rates[i] > 0 {
		return t.rates[i]
	}
	return DefaultSiteRate
}

// setRate sets the rate of ordinal i (0: DefaultSiteRate). t.mu must be
// held.
func (t *siteTable) setRate(i int, rate int64) {
	if i >= len(t.rates) {
		t.rates = append(t.rates, make([]int64, i+1-len(t.rates))...)
	}
	t.rates[i] = rate
}

// siteRecorderOf returns the recorder of device ordinal, or nil if it
// records nothing (always nil under -tags memtrack_nosites).
func (s *kindState) siteRecorderOf(ordinal int) *siteRecorder {
	if h := s.hooksOf(ordinal); h != nil {
		return h.sites
	}
	return nil
}

// enableSites makes device ordinal record its allocation sites at depth,
// or changes the depth of the recorder it has.
func (s *kindState) enableSites(ordinal, depth int) {
	t := &s.sites
	t.mu.Lock()
	defer t.mu.Unlock()
	s.setHooks(ordinal, func(h *hooks) {
		if h.sites != nil {
			h.sites.depth.Store(int32(depth))
			return
		}
		h.sites = newSiteRecorder(depth, t.rate(ordinal), MaxAllocationSites)
	})
}

// disableSites stops the recording of device ordinal's sites.
func (s *kindState) disableSites(ordinal int) {
	t := &s.sites
	t.mu.Lock()
	defer t.mu.Unlock()
	s.setHooks(ordinal, func(h *hooks) { h.sites = nil })
}

// setSiteRate sets the sampling rate of device ordinal (0:
// DefaultSiteRate), for its recorder too if it has one.
func (s *kindState) setSiteRate(ordinal int, rate int64) {
	t := &s.sites
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setRate(ordinal, rate)
	if r := s.siteRecorderOf(ordinal); r != nil {
		r.rate.Store(t.rate(ordinal))
	}
}

// siteOverride is the recording of sites as it was before a [LeakCheck]
// made device ordinal record every allocation, to put back when it ends.
type siteOverride struct {
	ordinal int
	rate    int64 // the rate that was set (0: none)
	enabled bool  // the check enabled the recording
}

// recordEverySite makes device ordinal record the site of every
// allocation, enabling its recording at depth if it is off, and returns
// what restoreSites puts back.
func (s *kindState) recordEverySite(ordinal, depth int) siteOverride {
	t := &s.sites
	t.mu.Lock()
	defer t.mu.Unlock()
	o := siteOverride{ordinal: ordinal}
	if ordinal < len(t.rates) {
		o.rate = t.rates[ordinal]
	}
	t.setRate(ordinal, 1)
	if r := s.siteRecorderOf(ordinal); r != nil {
		r.rate.Store(1)
		return o
	}
	o.enabled = true
	s.setHooks(ordinal, func(h *hooks) { h.sites = newSiteRecorder(depth, 1, MaxAllocationSites) })
	return o
}

// restoreSites puts back the recording of sites that recordEverySite
// changed.
func (s *kindState) restoreSites(o siteOverride) {
	t := &s.sites
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setRate(o.ordinal, o.rate)
	if o.enabled {
		s.setHooks(o.ordinal, func(h *hooks) { h.sites = nil })
	} else if r := s.siteRecorderOf(o.ordinal); r != nil {
		r.rate.Store(t.rate(o.ordinal))
	}
}

// siteRecorder holds one device's allocation sites: per call stack, the
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
type siteRecorder struct {
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
	rec  *siteRecorder
	hash uint64
	next *stack
	pcs  []uintptr // nil for "memtrack.other"; never modified
	cat  string    // the category's name; "" for none

	// Guarded by rec.mu.
	live                   int64 // live samples
	objects, bytes         float64
	peakObjects, peakBytes float64 // the figures at the peak, if savedGen == rec.gen
	savedGen               uint64  // generation of peakObjects and peakBytes
	pending                bool    // in rec.pending
}

// site is what a recorded [Buffer] keeps: its stack and the scaled figures
// it added there, which its free takes away again whatever the rate is by
// then.
type site struct {
	st             *stack
	objects, bytes float64
}

func newSiteRecorder(depth int, rate int64, maxSites int) *siteRecorder {
	r := &siteRecorder{maxSites: maxSites, sites: make(map[uint64]*stack), gen: 1}
	r.depth.Store(int32(depth))
	r.rate.Store(rate)
	r.other = &stack{rec: r}
	return r
}

// alloc samples an allocation of size bytes in category cat ("" for
// none); if it is sampled, it records the stack of the caller of the
// exported function that allocates and returns the buffer's site, and nil
// if not. Not sampled, it costs one random number. skip is the frames
// between the exported function and alloc's caller, which the stack
// leaves out (see callerSkip).
func (r *siteRecorder) alloc(size int64, skip int, cat string) *site {
	w, ok := sample(size, r.rate.Load(), rand.Uint64())
	if !ok {
		return nil
	}
	return r.allocSampled(size, w, skip, cat)
}

// allocSampled records a sampled allocation of weight w, leaving out skip
// frames more than callerSkip. Kept out of alloc so that the path of an
// allocation not sampled stays short.
//
//go:noinline
func (r *siteRecorder) allocSampled(size int64, w float64, skip int, cat string) *site {
	var buf [MaxSiteDepth]uintptr
	return r.recordIn(buf[:runtime.Callers(callerSkip+skip, buf[:r.depth.Load()])], size, w, cat)
}

// sample decides, with rnd a uniform random number, whether an allocation of
// size bytes is recorded at the rate, and returns its weight: the number of
// allocations the sample stands for. At rate 1 every allocation is, with
// weight 1. Otherwise, as in Go's heap profiler, the allocated bytes are
// sampled by a Poisson process of one point per rate bytes on average: an
// allocation is recorded if a point falls in it, with probability
// p = 1 - exp(-size/rate), and weighs 1/p, so that the scaled figures are
// unbiased. As p <= size/rate, most allocations not sampled are refused
// with one multiplication.
func sample(size, rate int64, rnd uint64) (w float64, ok bool) {
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

// recordIn counts an allocation of size bytes and weight w from the stack
// pcs, in category cat ("" for none).
func (r *siteRecorder) recordIn(pcs []uintptr, size int64, w float64, cat string) *site {
	h := hashStack(pcs)
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
	b := &site{st: s, objects: w, bytes: w * float64(size)}
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

// free forgets the buffer of the site. It may run after the recorder was
// disabled, on the recorder that counted the buffer. The size is the
// buffer's; the site knows what it added.
func (b *site) free(int64) {
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
func (r *siteRecorder) newGen() {
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

func (r *siteRecorder) remove(s *stack) {
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

// resetPeak sets the peak to the recorded bytes now, as
// Device.ResetPeakMemoryStats does for the device's own peak.
func (r *siteRecorder) resetPeak() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peak = r.bytes
	r.newGen()
}

func (r *siteRecorder) stats() SiteStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statsLocked()
}

func (r *siteRecorder) statsLocked() SiteStats {
	return SiteStats{
		Enabled:   true,
		Depth:     int(r.depth.Load()),
		Rate:      r.rate.Load(),
		Sites:     r.n,
		Folded:    r.folded,
		Buffers:   int64(math.Round(r.objects)),
		Bytes:     int64(math.Round(r.bytes)),
		PeakBytes: int64(math.Round(r.peak)),
	}
}

// snapshot returns the sites with live buffers, now or at the peak, the
// largest first, and the recorder's state.
func (r *siteRecorder) snapshot(atPeak bool) ([]Site, SiteStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Site, 0, r.n+1)
	add := func(s *stack) {
		o, b := s.objects, s.bytes
		if atPeak {
			o, b = s.atPeak()
		}
		if o != 0 || b != 0 {
			out = append(out, Site{Stack: slices.Clone(s.pcs), Buffers: int64(math.Round(o)), Bytes: int64(math.Round(b)), Category: s.cat})
		}
	}
	for _, s := range r.sites {
		for ; s != nil; s = s.next {
			add(s)
		}
	}
	add(r.other)
	slices.SortFunc(out, func(a, b Site) int { return cmp.Compare(b.Bytes, a.Bytes) })
	return out, r.statsLocked()
}

// hashStack hashes a stack (FNV-1a over the program counters).
func hashStack(pcs []uintptr) uint64 {
	h := uint64(14695981039346656037)
	for _, pc := range pcs {
		h ^= uint64(pc)
		h *= 1099511628211
	}
	return h
}
