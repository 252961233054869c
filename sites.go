package memtrack

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"go.uber.org/atomic"
)

const (
	// MaxSiteDepth is the deepest call stack [Device.EnableAllocationSites]
	// records.
	MaxSiteDepth = 128

	// MaxAllocationSites is the most distinct call stacks a device records at
	// once. Allocations from further stacks are folded into one site,
	// "memtrack.other", and counted in [SiteStats].Folded.
	MaxAllocationSites = 4096

	// OtherSite names the site that holds the allocations past
	// [MaxAllocationSites] distinct stacks: a [Site] with a nil Stack.
	OtherSite = "memtrack.other"
)

// callerSkip is what runtime.Callers skips in siteRecorder.alloc: Callers
// itself, siteRecorder.alloc and Device.Alloc, so that the first frame kept
// is the caller of Device.Alloc.
const callerSkip = 3

// SiteStats describes the recording of allocation sites on one device.
// The figures cover the buffers allocated while recording was on.
type SiteStats struct {
	Enabled   bool  // sites are being recorded
	Depth     int   // the most frames recorded per stack
	Sites     int   // distinct stacks held, besides "memtrack.other"
	Folded    int64 // allocations folded into "memtrack.other" since recording began
	Live      int64 // recorded live buffers
	LiveBytes int64 // their bytes
	PeakBytes int64 // high-water mark of LiveBytes since enabling or the last ResetPeakMemoryStats
}

// EnableAllocationSites starts recording, for every later [Device.Alloc] on
// the device, the call stack that asked for it (at most depth frames above
// memtrack, 1 <= depth <= [MaxSiteDepth]; 32 is usual), so that
// [Device.AllocationSites] and [Device.PeakAllocationSites] attribute the
// live buffers, and those live at the latest peak, to their callers
// (package [github.com/memtrack/memtrack/pprof] writes them for go tool
// pprof). Buffers allocated before are not recorded.
// On a device already recording, it changes the depth for later
// allocations and keeps what is recorded.
func (d Device) EnableAllocationSites(depth int) error {
	if depth < 1 || depth > MaxSiteDepth {
		return fmt.Errorf("%w: stack depth %d on %v: want 1 to %d", ErrInvalidSize, depth, d, MaxSiteDepth)
	}
	s, _, err := d.resolve()
	if err != nil {
		return err
	}
	if !sitesBuilt {
		return fmt.Errorf("%w on %v: this binary was built with -tags memtrack_nosites; rebuild without it", ErrSitesNotRecorded, d)
	}
	s.sites.enable(d.ordinal, depth)
	return nil
}

// DisableAllocationSites stops recording allocation sites on the device and
// drops what was recorded. Buffers recorded before may still be freed; they
// are not counted again if recording is enabled anew. Recording that is off
// stays off.
func (d Device) DisableAllocationSites() {
	if s, _, err := d.resolve(); err == nil {
		s.sites.disable(d.ordinal)
	}
}

// AllocationSiteStats returns the state of the recording of allocation
// sites on the device; the zero SiteStats if recording is off.
func (d Device) AllocationSiteStats() SiteStats {
	s, _, err := d.resolve()
	if err != nil {
		return SiteStats{}
	}
	if r := s.sites.lookup(d.ordinal); r != nil {
		return r.stats()
	}
	return SiteStats{}
}

// Site is one call stack that allocated recorded buffers, with the figures
// of its live buffers, now or at the latest peak.
type Site struct {
	// Stack holds the stack's return addresses, innermost first, as
	// [runtime.Callers] writes them (read them with [runtime.CallersFrames]);
	// nil for the site [OtherSite].
	Stack   []uintptr
	Buffers int64 // live buffers allocated from the stack
	Bytes   int64 // their bytes
}

// SiteSnapshot is the allocation sites of one device at one moment, the
// largest first, with the state of the recording.
type SiteSnapshot struct {
	Device Device
	Stats  SiteStats
	// Peak is true for the figures at the latest peak of the recorded bytes
	// ([Device.PeakAllocationSites]), false for the live buffers now.
	Peak  bool
	Sites []Site
}

// AllocationSites returns the device's recorded live buffers by allocation
// site, the largest first. It fails with an error matching
// [ErrSitesNotRecorded] unless [Device.EnableAllocationSites] was called.
func (d Device) AllocationSites() (SiteSnapshot, error) { return d.siteSnapshot(false) }

// PeakAllocationSites returns the recorded buffers that were live at the
// latest peak of the recorded bytes (since recording began or the last
// [Device.ResetPeakMemoryStats]), by allocation site, the largest first. It
// fails as [Device.AllocationSites] does.
func (d Device) PeakAllocationSites() (SiteSnapshot, error) { return d.siteSnapshot(true) }

func (d Device) siteSnapshot(atPeak bool) (SiteSnapshot, error) {
	r, err := d.recorder()
	if err != nil {
		return SiteSnapshot{Device: d, Peak: atPeak}, err
	}
	sites, st := r.snapshot(atPeak)
	return SiteSnapshot{Device: d, Stats: st, Peak: atPeak, Sites: sites}, nil
}

// recorder returns the device's recorder of allocation sites, or an error
// matching ErrSitesNotRecorded.
func (d Device) recorder() (*siteRecorder, error) {
	s, _, err := d.resolve()
	if err != nil {
		return nil, err
	}
	if r := s.sites.lookup(d.ordinal); r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("%w on %v: call Device.EnableAllocationSites first", ErrSitesNotRecorded, d)
}

// siteTable publishes the recorders of one kind's devices, by ordinal. While
// no device of the kind records, the published slice is nil, so that the
// allocation path pays one atomic load.
type siteTable struct {
	mu   sync.Mutex // serialises enable and disable
	recs atomic.Pointer[[]*siteRecorder]
}

// lookup returns the recorder of ordinal i, or nil if it records nothing.
func (t *siteTable) lookup(i int) *siteRecorder {
	if !sitesBuilt {
		return nil
	}
	p := t.recs.Load()
	if p == nil || i >= len(*p) {
		return nil
	}
	return (*p)[i]
}

func (t *siteTable) enable(i, depth int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var old []*siteRecorder
	if p := t.recs.Load(); p != nil {
		old = *p
	}
	if i < len(old) && old[i] != nil {
		old[i].depth.Store(int32(depth))
		return
	}
	recs := make([]*siteRecorder, max(len(old), i+1))
	copy(recs, old)
	recs[i] = newSiteRecorder(depth, MaxAllocationSites)
	t.recs.Store(&recs)
}

func (t *siteTable) disable(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.recs.Load()
	if p == nil || i >= len(*p) || (*p)[i] == nil {
		return
	}
	recs := make([]*siteRecorder, len(*p))
	copy(recs, *p)
	recs[i] = nil
	for _, r := range recs {
		if r != nil {
			t.recs.Store(&recs)
			return
		}
	}
	t.recs.Store(nil) // no device of the kind records: back to one nil load
}

// siteRecorder holds one device's allocation sites: per call stack, the
// live buffers and bytes allocated from it, and the same figures as they
// stood at the latest peak of the recorded bytes.
//
// The figures at the peak are kept lazily, at a constant cost per
// allocation and free: a new peak (or a reset) starts a new generation, at
// which moment every site's figures at the peak are its current figures;
// a site saves its figures the first time it changes in a generation. So
// a site's figure at the peak is the saved one if it was saved in the
// current generation, and its current one if not.
type siteRecorder struct {
	depth    atomic.Int32
	maxSites int

	mu      sync.Mutex
	sites   map[uint64]*site // by stack hash; collisions chain through site.next
	n       int              // sites in the map
	other   *site            // allocations past maxSites
	folded  int64
	live    int64
	bytes   int64
	peak    int64
	gen     uint64
	pending []*site // emptied sites kept for their figures at the peak
}

// site is one call stack and the recorded buffers allocated from it.
type site struct {
	rec  *siteRecorder
	hash uint64
	next *site
	pcs  []uintptr // nil for "memtrack.other"; never modified

	// Guarded by rec.mu.
	objects, bytes         int64
	peakObjects, peakBytes int64  // the figures at the peak, if savedGen == rec.gen
	savedGen               uint64 // generation of peakObjects and peakBytes
	pending                bool   // in rec.pending
}

func newSiteRecorder(depth, maxSites int) *siteRecorder {
	r := &siteRecorder{maxSites: maxSites, sites: make(map[uint64]*site), gen: 1}
	r.depth.Store(int32(depth))
	r.other = &site{rec: r}
	return r
}

// alloc records an allocation of size bytes from the stack of the caller of
// Device.Alloc and returns its site.
func (r *siteRecorder) alloc(size int64) *site {
	var buf [MaxSiteDepth]uintptr
	return r.record(buf[:runtime.Callers(callerSkip, buf[:r.depth.Load()])], size)
}

// record counts an allocation of size bytes from the stack pcs.
func (r *siteRecorder) record(pcs []uintptr, size int64) *site {
	h := hashStack(pcs)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sites[h]
	for s != nil && !slices.Equal(s.pcs, pcs) {
		s = s.next
	}
	switch {
	case s != nil:
	case r.n < r.maxSites:
		s = &site{rec: r, hash: h, next: r.sites[h], pcs: append([]uintptr(nil), pcs...)}
		r.sites[h] = s
		r.n++
	default:
		s = r.other
		r.folded++
	}
	s.save()
	s.objects++
	s.bytes += size
	r.live++
	r.bytes += size
	if r.bytes > r.peak {
		r.peak = r.bytes
		r.newGen()
	}
	return s
}

// free forgets a buffer of size bytes allocated from s. It may run after
// the recorder was disabled, on the recorder that counted the buffer.
func (s *site) free(size int64) {
	r := s.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	s.save()
	s.objects--
	s.bytes -= size
	r.live--
	r.bytes -= size
	if s.objects > 0 || s == r.other {
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

// save keeps the site's figures at the peak before its first change in the
// current generation.
func (s *site) save() {
	if g := s.rec.gen; s.savedGen != g {
		s.peakObjects, s.peakBytes, s.savedGen = s.objects, s.bytes, g
	}
}

// atPeak returns the site's figures at the latest peak.
func (s *site) atPeak() (objects, bytes int64) {
	if s.savedGen == s.rec.gen {
		return s.peakObjects, s.peakBytes
	}
	return s.objects, s.bytes
}

// newGen starts a generation: the figures at the peak become the current
// ones, and the empty sites kept for the old peak go.
func (r *siteRecorder) newGen() {
	r.gen++
	for _, s := range r.pending {
		s.pending = false
		if s.objects == 0 {
			r.remove(s)
		}
	}
	clear(r.pending)
	r.pending = r.pending[:0]
}

func (r *siteRecorder) remove(s *site) {
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
		Sites:     r.n,
		Folded:    r.folded,
		Live:      r.live,
		LiveBytes: r.bytes,
		PeakBytes: r.peak,
	}
}

// snapshot returns the sites with live buffers, now or at the peak, the
// largest first, and the recorder's state.
func (r *siteRecorder) snapshot(atPeak bool) ([]Site, SiteStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Site, 0, r.n+1)
	add := func(s *site) {
		o, b := s.objects, s.bytes
		if atPeak {
			o, b = s.atPeak()
		}
		if o != 0 || b != 0 {
			out = append(out, Site{Stack: slices.Clone(s.pcs), Buffers: o, Bytes: b})
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
