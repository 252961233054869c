package memtrack

import (
	"github.com/memtrack/memtrack/internal/siterec"
	"github.com/memtrack/memtrack/tracker"
)

// hooks is the set of features that observe one device's allocations and
// frees: its recorder of allocation sites, its memory history and its leak
// watch, each nil while off. A device's set is published in
// kindState.hooks, and is nil while every feature is off, so that with all
// of them off an allocation pays one atomic load for all of them. A set is
// never changed once published: switching a feature makes a new one
// (kindState.setHooks).
//
// Each feature owns its state: a hooks value holds only the features'
// values, and a feature reaches no other's state through it.
type hooks struct {
	sites   *siterec.Recorder // SiteRecorder
	history *history          // HistoryRecorder
	leaks   *deviceLeaks      // LeakWatcher
}

// hookSkip is the frames between the exported function that allocates and
// hooks.alloc's call of the site recorder: the exported function is the
// caller of Device.allocate (or Device.track), which calls hooks.alloc.
const hookSkip = 2

// alloc runs the site recorder and the history on an allocation that r
// asked for, just counted in rec (and in the category's record crec, if
// any), and returns its site, if recorded. The caller then gives the
// buffer or handle, which holds the site, to the leak watch (h.leaks), if
// it is on.
func (h *hooks) alloc(r *request, rec, crec *tracker.Record) (st *site) {
	if h.sites != nil {
		st = h.sites.Alloc(r.size, hookSkip+r.skip, r.cat.Name())
	}
	if h.history != nil {
		h.history.alloc(r.size, st, rec, r.stream, r.cat.idx, crec)
	}
	return st
}

// refused records a refused request in the history, if it is on.
func (h *hooks) refused(r *request, rec, crec *tracker.Record, err error) {
	if h.history != nil {
		h.history.refused(r.size, rec, err, r.cat.idx, crec)
	}
}

// setHooks replaces the hook set of device ordinal by f applied to a copy
// of it; the set published is nil when f leaves every feature off.
func (s *kindState) setHooks(ordinal int, f func(*hooks)) {
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

// hooksOf returns the hook set of device ordinal, or nil while every
// feature is off.
func (s *kindState) hooksOf(ordinal int) *hooks { return s.hooks.lookup(ordinal) }
