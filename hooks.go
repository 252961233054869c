package memtrack

import "unsafe"

// How the features hook into the paths. The core (the device table, the
// ledger, the allocation and release paths) names no feature: it holds
// what the features give it as values of the interfaces below, by slot,
// and calls them at the one place every allocation, refusal and release
// passes.
//
//   - A feature that observes a device's allocations (the allocation
//     sites, the memory history, the leak watch) puts a hook in the
//     device's hook set while it is on (deviceTable.setHook). The
//     allocation path runs the set's hooks after the count
//     (Device.take) and on a refusal (Device.refuse), the release path
//     after the ledger's uncount (deviceTable.release). While every hook
//     of a device is off its set is nil, and the paths pay one atomic load
//     for all of them.
//   - A hook may keep a mark on an allocation it observes, which outlives
//     the hook: a pointer (allocation.mark: the allocation sites' site) or
//     the number of an entry (allocation.entry: the leak watch's). The
//     feature is then the device's marker of that word
//     (deviceTable.setMarker, deviceTable.setClaimer), and the release
//     path hands the mark back to it, whatever is on then. An entry is
//     claimed before anything is released (claimMarks), so that the
//     release and the feature's own release of the memory (the leak
//     watch's, for a leak) never both go on.
//   - A feature that adds to the report of a refused allocation, or acts
//     on it (the allocation sites, the out-of-memory observers), is one of
//     the device's reporters (deviceTable.setReporter), which the refusal
//     runs once its report is built.
//
// A feature's state per device is its own, kept in the device's state by
// the feature's slot (deviceTable.stateOf).

// What the hooks, markers and claimers are given is values, not pointers
// to the paths' own request and ledger, and the words of the allocation
// that they read rather than the allocation wherever they need not change
// it: what is given to an interface's method escapes to the heap, and the
// paths keep their request, their ledger and, for a count at an address,
// their allocation on the stack. Each signature fits the registers of Go's
// calling convention.

// hook is a feature that observes the allocations of a device while it
// is on: allocated observes a, just counted in l, on stream for one in
// stream order, and may put its mark on a. skip is the frames to leave out
// of its site above the exported function's caller; handle says that an
// allocation at an address (a.from is fromAddress) is a Tracked handle's
// (Track), not a count at an address only (TrackAddr), whose allocation is
// the hooks' own, and which no object holds. A hook that observes refusals or
// releases as well is a refusalHook or a releaseHook.
type hook interface {
	allocated(a *allocation, l ledger, stream Stream, skip int, handle bool)
}

// refusalHook is a hook that observes the refusals: of r with err, a
// limit's (tracker.ErrLimitExceeded, or nil for the path's own check of
// the limits), an *OutOfMemoryError or another failure.
type refusalHook interface {
	hook
	refused(r request, l ledger, err error)
}

// releaseHook is a hook that observes the releases: of size bytes of
// category cat with mark, just uncounted from l (the zero ledger where the
// ledger refused to uncount them: the memory is released all the same,
// and nothing that counts moves), on stream for one in stream order.
type releaseHook interface {
	hook
	released(size int64, mark unsafe.Pointer, cat uint8, l ledger, stream Stream)
}

// marker is the feature whose marks (allocation.mark) outlive its hook:
// the release path hands it back the mark of each allocation it releases
// (end), after the ledger's uncount, uncounted saying whether that uncount
// happened (where the ledger refused, the memory is released all the
// same, and nothing the feature counts should move).
type marker interface {
	end(mark unsafe.Pointer, uncounted bool)
}

// claimer is the feature whose entries (allocation.entry) outlive its
// hook, and which the release claims before anything is released, so that
// the release and the feature's own release of the memory (the leak
// watch's, for a leak) never both go on. owner is the address of the
// allocation, the feature's identity of it, or 0 for the feature's own
// copy of it.
type claimer interface {
	// claim claims the entry for the release of the allocation at owner,
	// and reports false where the feature claimed it first.
	claim(entry uint32, owner uintptr) bool
	// unclaim gives the entry back after a release that failed.
	unclaim(entry uint32, owner uintptr)
	// end ends the entry of the allocation at owner, released.
	end(entry uint32, owner uintptr)
}

// reporter is a feature with a part in the report of a refused allocation
// ([OutOfMemoryError]): it adds it to e, or acts on the report.
type reporter interface {
	report(e *OutOfMemoryError)
}

// The hooks and the reporters of a device run in the order of their
// features' slots (deviceTable.stateOf), so that a feature that reads
// another's mark or part of the report comes after it.

// hookSet is the hooks of one device that are on, in the order of their
// slots, and among them those that observe refusals and releases. A set
// is never changed once published: deviceTable.setHook makes a new one.
type hookSet struct {
	slots    [numSlots]hook
	first    hook   // the first hook on, called without a loop: one feature on costs one call
	rest     []hook // the others
	refusals []refusalHook
	releases []releaseHook
}

// allocated, refused and released run the hooks (see hook).
func (h *hookSet) allocated(a *allocation, l ledger, stream Stream, skip int, handle bool) {
	h.first.allocated(a, l, stream, skip, handle)
	for _, k := range h.rest {
		k.allocated(a, l, stream, skip, handle)
	}
}

func (h *hookSet) refused(r request, l ledger, err error) {
	for _, k := range h.refusals {
		k.refused(r, l, err)
	}
}

func (h *hookSet) released(size int64, mark unsafe.Pointer, cat uint8, l ledger, stream Stream) {
	for _, k := range h.releases {
		k.released(size, mark, cat, l, stream)
	}
}

// hookSkip is the frames between the exported function that allocates and
// a hook's allocated, for the allocation sites: the exported function
// calls Device.take, which calls hookSet.allocated (inlined or not: the
// stack counts an inlined frame as a frame), which calls the hook.
const hookSkip = 3

// setHook replaces the hook in slot i of device ordinal by k (nil
// removes it).
func (s *deviceTable) setHook(ordinal, i int, k hook) {
	s.updateHook(ordinal, i, func(hook) hook { return k })
}

// updateHook replaces the hook in slot i of device ordinal by what f
// returns for the one there (nil for none), as one change.
func (s *deviceTable) updateHook(ordinal, i int, f func(old hook) hook) {
	s.hooks.update(ordinal, func(old *hookSet) *hookSet {
		var slots [numSlots]hook
		if old != nil {
			slots = old.slots
		}
		k := f(slots[i])
		if slots[i] == k {
			return old
		}
		slots[i] = k
		next := &hookSet{slots: slots}
		for _, x := range slots {
			if x == nil {
				continue
			}
			if next.first == nil {
				next.first = x
			} else {
				next.rest = append(next.rest, x)
			}
			if r, ok := x.(refusalHook); ok {
				next.refusals = append(next.refusals, r)
			}
			if r, ok := x.(releaseHook); ok {
				next.releases = append(next.releases, r)
			}
		}
		if next.first == nil {
			return nil
		}
		return next
	})
}

// hooksOf returns the hook set of device ordinal, or nil while every hook
// is off.
func (s *deviceTable) hooksOf(ordinal int) *hookSet { return s.hooks.lookup(ordinal) }

// hookOf returns the hook in slot i of device ordinal, or nil.
func (s *deviceTable) hookOf(ordinal, i int) hook {
	if h := s.hooksOf(ordinal); h != nil {
		return h.slots[i]
	}
	return nil
}

// reportersSlot is the slot of a device's reporters in its state
// (deviceTable.stateOf): a *[numSlots]reporter, by the reporters' slots.
const reportersSlot = 6

// setMarker makes m the marker of allocation.mark of device ordinal,
// which is in use, and setClaimer c that of allocation.entry: once set,
// for good.
func (s *deviceTable) setMarker(ordinal int, m marker) {
	s.stateOf(ordinal, true).marker.Store(&markerBox{m})
}

func (s *deviceTable) setClaimer(ordinal int, c claimer) {
	s.stateOf(ordinal, true).claimer.Store(&claimerBox{c})
}

// markerBox and claimerBox hold a marker, for an atomic pointer.
type (
	markerBox  struct{ m marker }
	claimerBox struct{ c claimer }
)

// markerOf and claimerOf return the markers of device ordinal, which
// marked an allocation: it has a state. Both inline into the release path.
func (s *deviceTable) markerOf(ordinal int) marker {
	return s.states.lookup(ordinal).marker.Load().m
}

func (s *deviceTable) claimerOf(ordinal int) claimer {
	return s.states.lookup(ordinal).claimer.Load().c
}

// claimMarks is the release's claim of a's entry with its device's marker,
// which runs before anything is released: a is the allocation at owner.
// It reports false where the release must not go on. Without an entry it
// is a branch, inlined into Buffer.release (TestIntendedInlining).
func claimMarks(a *allocation, owner uintptr) bool {
	return a.entry == 0 || claimEntry(a, owner)
}

// claimEntry is claimMarks of an allocation with an entry.
func claimEntry(a *allocation, owner uintptr) bool {
	return tableOf(a.kind).claimerOf(int(a.ordinal)).claim(a.entry, owner)
}

// unclaimMarks gives back what claimMarks claimed, after a release that
// failed.
func unclaimMarks(a *allocation, owner uintptr) {
	if a.entry != 0 {
		tableOf(a.kind).claimerOf(int(a.ordinal)).unclaim(a.entry, owner)
	}
}

// setReporter replaces the reporter in slot i of device ordinal, which is
// in use, by r (nil removes it).
func (s *deviceTable) setReporter(ordinal, i int, r reporter) {
	s.states.mu.Lock() // serialises the changes of every device's reporters
	defer s.states.mu.Unlock()
	var next [numSlots]reporter
	if p := slotOf[[numSlots]reporter](s, ordinal, reportersSlot, nil); p != nil {
		next = *p
	}
	next[i] = r
	setSlot(s, ordinal, reportersSlot, &next)
}

// report runs the reporters of device ordinal on e, in the order of their
// slots.
func (s *deviceTable) report(ordinal int, e *OutOfMemoryError) {
	if p := slotOf[[numSlots]reporter](s, ordinal, reportersSlot, nil); p != nil {
		for _, r := range p {
			if r != nil {
				r.report(e)
			}
		}
	}
}
