package memtrack

import (
	"github.com/memtrack/memtrack/internal/siterec"
	"go.uber.org/atomic"
)

// The features of a device are its allocation sites (SiteRecorder), its
// memory history and marks (HistoryRecorder), its leak watch (LeakWatcher,
// LeakCheck), its categories (Category), its out-of-memory observers
// (Device.OnOutOfMemory), its CUDA graphs' captures (Graphs), its
// per-process figures (Usage) and its peak scopes (PeakScope). Each keeps
// its state in a type of its own, which its handle reaches through the
// device's features (Device.features), or, for
// the history, which has state only while it records (history), through
// the hook set; the per-process figures and peak scopes keep none of a
// device's (the backend gives the first, and the caller holds a scope). A
// feature reads no other's state: it asks the other through a method.
//
// The features that observe the allocations and releases put their hooks
// in the device's hook set, which the paths call at the one place every
// allocation and every release passes: Device.take, after the count, and
// deviceTable.release, after the ledger's.

// features is the state of one device's features, made on the first use
// of one and kept for the life of the process: buffers keep marks of
// them (a leak watch's entry, a category), and the settings of a feature
// that is off stay (a sampling rate).
type features struct {
	sites  siteSettings
	leaks  deviceLeaks
	oom    oomObservers
	cats   atomic.Pointer[categorySet] // nil until the device's first category
	graphs graphCaptures               // the CUDA graphs its streams captured (Graphs)
}

// featuresOf returns the features of device ordinal, or nil where none
// was ever used.
func (s *deviceTable) featuresOf(ordinal int) *features { return s.features.lookup(ordinal) }

// makeFeatures returns the features of device ordinal, making them.
func (s *deviceTable) makeFeatures(ordinal int) *features {
	if f := s.featuresOf(ordinal); f != nil {
		return f
	}
	var got *features
	s.features.update(ordinal, func(old *features) *features {
		if old == nil {
			old = &features{}
			old.leaks.init(s, ordinal)
		}
		got = old
		return old
	})
	return got
}

// features returns the device's table and its features, making them where
// a is use; for read and start, the features are nil where the device
// never used one. It fails as lookup does.
func (d Device) features(a access) (*deviceTable, *features, error) {
	s, _, err := d.lookup(a)
	if err != nil || s == nil {
		return nil, nil, err
	}
	if a == use {
		return s, s.makeFeatures(d.ordinal), nil
	}
	return s, s.featuresOf(d.ordinal), nil
}

// hooks is the hook set of one device: the hooks of the features that
// observe its allocations and releases, each nil while off. A device's set
// is published in deviceTable.hooks, and is nil while every one is off. A
// set is never changed once published: switching a feature makes a new
// one (deviceTable.setHooks).
type hooks struct {
	sites   *siterec.Recorder // SiteRecorder
	history *history          // HistoryRecorder
	leaks   *deviceLeaks      // LeakWatcher, LeakCheck
}

// hookSkip is the frames between the exported function that allocates and
// hooks.allocated's call of the site recorder: the exported function calls
// Device.take, which calls hooks.allocated.
const hookSkip = 2

// allocated runs the hooks on a, the allocation that r asked for, just
// counted in the ledger l: the site recorder marks a with its site, the
// history records the allocation, and the leak watch watches a, marking
// it with its entry, where a is a Buffer's or a Tracked handle's (a count
// at an address only, which nothing would collect, is not watched).
func (h *hooks) allocated(r *request, l *ledger, a *allocation) {
	if h.sites != nil {
		a.site = h.sites.Alloc(r.size, hookSkip+r.skip, r.cat.Name())
	}
	if h.history != nil {
		h.history.allocated(r, l, a.site)
	}
	if h.leaks != nil && (r.from != fromAddress || r.handle) {
		a.wslot = h.leaks.watch(a)
	}
}

// refused records a refused request in the history, if it is on.
func (h *hooks) refused(r *request, l *ledger, err error) {
	if h.history != nil {
		h.history.refused(r, l, err)
	}
}

// released takes back the marks of the features on a, just uncounted from
// the ledger l: its site's bytes, and its leak watch's entry (owner's; 0 for
// a leak's copy, whose entry the leak watch removes itself), whatever is
// on now; and the history, where it is on (h is nil while every hook is
// off), records the release, on stream for one in stream order. Where the
// ledger refused to uncount a (l is nil), the memory is released all the
// same: the leak watch's entry goes, and nothing that counts moves.
func (h *hooks) released(a *allocation, l *ledger, stream Stream, owner uintptr) {
	if l != nil {
		if a.site != nil {
			a.site.Free()
		}
		if h != nil && h.history != nil {
			h.history.released(a, l, stream)
		}
	}
	if a.wslot != 0 && owner != 0 {
		unwatch(a, owner)
	}
}

// claimMarks is the features' part of a release's claim, which runs
// before anything is released, whatever is on now: the leak watch's entry
// of a, if it has one, is claimed (claimEntry), so that the release and
// the collector's cleanup never both go on. owner is the address of a,
// the leak watch's identity of its object. It reports false where the
// release must not go on. Without an entry it is a branch, inlined into
// Buffer.release (TestIntendedInlining).
func claimMarks(a *allocation, owner uintptr) bool {
	return a.wslot == 0 || claimEntry(a, owner)
}

// unclaimMarks gives back what claimMarks claimed, after a release that
// failed.
func unclaimMarks(a *allocation, owner uintptr) {
	if a.wslot != 0 {
		unclaimEntry(a, owner)
	}
}

// setHooks replaces the hook set of device ordinal by f applied to a copy
// of it; the set published is nil when f leaves every hook off.
func (s *deviceTable) setHooks(ordinal int, f func(*hooks)) {
	s.hooks.update(ordinal, func(old *hooks) *hooks {
		var next hooks
		if old != nil {
			next = *old
		}
		f(&next)
		if next == (hooks{}) {
			return nil
		}
		if old != nil && next == *old {
			return old
		}
		return &next
	})
}

// hooksOf returns the hook set of device ordinal, or nil while every hook
// is off.
func (s *deviceTable) hooksOf(ordinal int) *hooks { return s.hooks.lookup(ordinal) }
