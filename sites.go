package memtrack

import (
	"fmt"
	"sync"

	"github.com/memtrack/memtrack/internal/siterec"
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
	s, _, err := d.resolve()
	if err != nil {
		return err
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
	if s, err := d.state(); err == nil { // off stays off: nothing registered
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
		return siteStats(r.Stats())
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
	es, st := r.Snapshot(atPeak)
	return SiteSnapshot{Device: d, Stats: siteStats(st), AtPeak: atPeak, Sites: sitesOf(es)}, nil
}

// recorder returns the device's recorder of allocation sites, or an error
// matching ErrSitesNotRecorded.
func (d Device) recorder() (*siterec.Recorder, error) {
	s, err := d.state() // a read: nothing registered
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
// records nothing.
func (s *kindState) siteRecorderOf(ordinal int) *siterec.Recorder {
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
			h.sites.SetDepth(depth)
			return
		}
		h.sites = siterec.New(depth, t.rate(ordinal), MaxAllocationSites)
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
		r.SetRate(t.rate(ordinal))
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
		r.SetRate(1)
		return o
	}
	o.enabled = true
	s.setHooks(ordinal, func(h *hooks) { h.sites = siterec.New(depth, 1, MaxAllocationSites) })
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
		r.SetRate(t.rate(o.ordinal))
	}
}
