package memtrack

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/memtrack/memtrack/internal/siterec"
)

// The recorder of one device's sites is a siterec.Recorder, in the
// device's hook set; a recorded Buffer or Tracked handle keeps its
// siterec.Site.
type site = siterec.Site

// The deepest stack is the recorder's (siterec.MaxDepth).
const _ = uint(MaxSiteDepth-siterec.MaxDepth) + uint(siterec.MaxDepth-MaxSiteDepth)

// siteStats returns the SiteStats of a recorder's figures.
func siteStats(st siterec.Stats) SiteStats {
	return SiteStats{Enabled: true, Depth: st.Depth, Rate: st.Rate, Sites: st.Sites, Folded: st.Folded, Buffers: st.Buffers, Bytes: st.Bytes, PeakBytes: st.PeakBytes}
}

// sitesOf returns the Sites of a recorder's entries.
func sitesOf(es []siterec.Entry) []Site {
	out := make([]Site, len(es))
	for i, e := range es {
		out[i] = Site{Stack: e.Stack, Buffers: e.Buffers, Bytes: e.Bytes, Category: e.Category}
	}
	return out
}

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
	s, _, err := d.lookup(use)
	if err != nil {
		return err
	}
	siteSettingsOf(s, d.ordinal).enable(s, d.ordinal, depth)
	return nil
}

// Disable stops recording allocation sites on the device and
// drops what was recorded. Buffers recorded before may still be freed; they
// are not counted again if recording is enabled anew. Recording that is off
// stays off.
func (r SiteRecorder) Disable() {
	d := r.dev
	if s, _, err := d.lookup(start); err == nil { // off stays off: nothing registered
		if t := slotOf[siteSettings](s, d.ordinal, sitesSlot, nil); t != nil {
			t.disable(s, d.ordinal)
		}
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
	s, _, err := d.lookup(use)
	if err != nil {
		return err
	}
	siteSettingsOf(s, d.ordinal).setRate(s, d.ordinal, rate)
	return nil
}

// Stats returns the state of the recording of allocation
// sites on the device; the zero SiteStats if recording is off.
func (r SiteRecorder) Stats() SiteStats {
	if sr := r.recorder(); sr != nil {
		return siteStats(sr.Stats())
	}
	return SiteStats{}
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
	return r.snapshot(false)
}

// PeakSnapshot returns the recorded buffers that were live at the
// latest peak of the recorded bytes (since recording began or the last
// [Device.ResetPeakMemoryStats]), by allocation site, the largest first. It
// fails as [SiteRecorder.Snapshot] does.
func (r SiteRecorder) PeakSnapshot() (SiteSnapshot, error) {
	return r.snapshot(true)
}

func (r SiteRecorder) snapshot(atPeak bool) (SiteSnapshot, error) {
	d := r.dev
	s, _, err := d.lookup(start) // a read: nothing registered
	if err != nil {
		return SiteSnapshot{Device: d, AtPeak: atPeak}, err
	}
	sr := s.siteRecorderOf(d.ordinal)
	if sr == nil {
		return SiteSnapshot{Device: d, AtPeak: atPeak}, fmt.Errorf("%w on %v: call Device.Sites().Enable first", ErrSitesNotRecorded, d)
	}
	es, st := sr.Snapshot(atPeak)
	return SiteSnapshot{Device: d, Stats: siteStats(st), AtPeak: atPeak, Sites: sitesOf(es)}, nil
}

// recorder returns the device's recorder of allocation sites, or nil
// where it records none or was never used. It starts no backend.
func (r SiteRecorder) recorder() *siterec.Recorder {
	if s, _, _ := r.dev.lookup(read); s != nil {
		return s.siteRecorderOf(r.dev.ordinal)
	}
	return nil
}

// resetPeak sets the recorded sites' peak to their figures, where the
// device records sites.
func (r SiteRecorder) resetPeak() {
	if sr := r.recorder(); sr != nil {
		sr.ResetPeak()
	}
}

// sitesSlot is the allocation sites' slot (hooks.go): first, so that the
// hooks after read the site it marks an allocation with.
const sitesSlot = 0

// siteHook is the hook of a device that records its allocation sites,
// around its recorder: it marks each sampled allocation with its site
// (allocation.mark), which the allocation's release frees, and puts the
// largest holders into the report of a refusal.
type siteHook struct{ rec *siterec.Recorder }

func (h *siteHook) allocated(a *allocation, l ledger, _ Stream, skip int, _ bool) {
	a.mark = unsafe.Pointer(h.rec.Alloc(a.size, hookSkip+skip, l.set.name(a.cat)))
}

// end is the device's settings as the marker of the allocations it
// marked with their sites (allocation.mark): a free takes the buffer's
// figures from the site's recorder, the current one or one dropped since,
// whose figures stay exact.
func (*siteSettings) end(mark unsafe.Pointer, uncounted bool) {
	if uncounted {
		(*site)(mark).Free()
	}
}

// report puts the largest holders among the recorded live buffers into
// the out-of-memory report e.
func (h *siteHook) report(e *OutOfMemoryError) {
	e.SitesRecorded = true
	es, _ := h.rec.Snapshot(false)
	sites := sitesOf(es)
	e.Sites = sites[:min(len(sites), maxReportSites)]
}

// siteOf returns the site that a was allocated at, where it was recorded.
func siteOf(a *allocation) *site { return (*site)(a.mark) }

// siteSettings is what a device keeps of its recording of sites, in its
// state: the sampling rate set, which holds whether it records or not, and
// its hook while it records.
type siteSettings struct {
	mu   sync.Mutex // serialises the changes of the rate and of the recorder
	rate int64      // the rate set; 0: DefaultSiteRate
}

// siteSettingsOf returns the settings of device ordinal of s, which is in
// use, making them on first use.
func siteSettingsOf(s *deviceTable, ordinal int) *siteSettings {
	return slotOf(s, ordinal, sitesSlot, func() *siteSettings { return new(siteSettings) })
}

// rateOrDefault returns the sampling rate. t.mu must be held.
func (t *siteSettings) rateOrDefault() int64 {
	if t.rate > 0 {
		return t.rate
	}
	return DefaultSiteRate
}

// siteRecorderOf returns the recorder of device ordinal, or nil if it
// records nothing.
func (s *deviceTable) siteRecorderOf(ordinal int) *siterec.Recorder {
	if h, ok := s.hookOf(ordinal, sitesSlot).(*siteHook); ok {
		return h.rec
	}
	return nil
}

// record makes device ordinal of s record its sites with rec, or stops it
// (rec nil). t.mu is held.
func (t *siteSettings) record(s *deviceTable, ordinal int, rec *siterec.Recorder) {
	if rec == nil {
		s.setHook(ordinal, sitesSlot, nil)
		s.setReporter(ordinal, sitesSlot, nil)
		return
	}
	h := &siteHook{rec: rec}
	s.setMarker(ordinal, t)
	s.setHook(ordinal, sitesSlot, h)
	s.setReporter(ordinal, sitesSlot, h)
}

// enable makes device ordinal of s record its allocation sites at depth,
// or changes the depth of the recorder it has.
func (t *siteSettings) enable(s *deviceTable, ordinal, depth int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := s.siteRecorderOf(ordinal); r != nil {
		r.SetDepth(depth)
		return
	}
	t.record(s, ordinal, siterec.New(depth, t.rateOrDefault(), MaxAllocationSites))
}

// disable stops the recording of device ordinal's sites.
func (t *siteSettings) disable(s *deviceTable, ordinal int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.record(s, ordinal, nil)
}

// setRate sets the sampling rate of device ordinal (0: DefaultSiteRate),
// for its recorder too if it has one.
func (t *siteSettings) setRate(s *deviceTable, ordinal int, rate int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rate = rate
	if r := s.siteRecorderOf(ordinal); r != nil {
		r.SetRate(t.rateOrDefault())
	}
}

// siteOverride is the recording of sites as it was before a [LeakCheck]
// made its device record every allocation, to put back when it ends.
type siteOverride struct {
	rate    int64 // the rate that was set (0: none)
	enabled bool  // the check enabled the recording
}

// recordEvery makes the device record the site of every allocation,
// enabling its recording at depth if it is off, and returns what restore
// puts back. The device is in use.
func (r SiteRecorder) recordEvery(depth int) siteOverride {
	d := r.dev
	s, _, _ := d.lookup(use)
	t := siteSettingsOf(s, d.ordinal)
	t.mu.Lock()
	defer t.mu.Unlock()
	o := siteOverride{rate: t.rate}
	t.rate = 1
	if sr := s.siteRecorderOf(d.ordinal); sr != nil {
		sr.SetRate(1)
		return o
	}
	o.enabled = true
	t.record(s, d.ordinal, siterec.New(depth, 1, MaxAllocationSites))
	return o
}

// restore puts back the recording of sites that recordEvery changed.
func (r SiteRecorder) restore(o siteOverride) {
	d := r.dev
	s, _, _ := d.lookup(use)
	t := siteSettingsOf(s, d.ordinal)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rate = o.rate
	if o.enabled {
		t.record(s, d.ordinal, nil)
	} else if sr := s.siteRecorderOf(d.ordinal); sr != nil {
		sr.SetRate(t.rateOrDefault())
	}
}
