package memtrack

import (
	"github.com/memtrack/memtrack/tracker"
)

// The release path. Every way memory stops being counted takes the same
// steps, in this order:
//
//  1. the claim: the Buffer's or Tracked handle's state moves from live,
//     in one compare-and-swap, so that of two releases one goes on, and,
//     for a Buffer, the device's marker claims its entry, if it has one
//     (claimMarks): the leak watch's, so that a free and the collector's
//     cleanup never both go on (a Tracked handle's release ends its entry
//     whatever the collector did, since its memory is not this package's
//     to free);
//  2. the release itself, of one of these kinds (releaseKind): the
//     backend frees the memory now (Buffer.Free, and a leaked buffer the
//     leak watch frees), or in stream order (Buffer.FreeAsync); the
//     caller's function frees it (Tracked.FreeWith, Kind.UntrackAddr); or
//     nothing is freed (Tracked.Release); or the backend unmaps a mapping of
//     a reservation and gives its physical memory back (Reservation.Unmap,
//     and the leak watch's unmap of a leaked mapping), which counts the
//     unmap in the device's figures of its mappings (space_figures.go),
//     for the return checks. Where it fails, the claim is given back, and
//     the memory stays live and counted;
//  3. the tail, in deviceTable.release: the ledger takes the bytes back (the
//     category's and the device's records), the device-side figure drops
//     (unless the stream has yet to execute the free), the hooks of the
//     features that are on observe it (hookSet.released: the site's bytes,
//     the history's event), and the marker ends its entry (the leak
//     watch's).

// releaseKind is how a release frees the memory.
type releaseKind uint8

const (
	freeNow      releaseKind = iota // the backend frees it now: Buffer.Free
	freeInStream                    // the backend frees it in stream order: Buffer.FreeAsync
	freeLeak                        // the backend frees a leaked buffer's memory now: LeakWatch.FreeLeaks
	freeWith                        // the caller's function frees it: Tracked.FreeWith, Kind.UntrackAddr
	releaseOnly                     // nothing is freed: Tracked.Release, and Kind.UntrackAddr without a function
	unmapNow                        // the backend unmaps it and gives its physical memory back now: Reservation.Unmap, LeakWatch.FreeLeaks
)

// heldNow reports whether the device-side figure drops with the tracked
// one: for every kind but a free in stream order, whose stream has yet to
// execute it.
func (k releaseKind) heldNow() bool { return k != freeInStream }

// release is the release of a's memory, of kind how, and then its tail:
// the backend frees the memory now (freeNow, freeLeak) or in stream order
// on stream (freeInStream), or unmaps it (unmapNow), or nothing is freed here (freeWith, whose
// caller has freed it, and releaseOnly). released reports whether the
// memory is released; if it is, err is the refusal of rec, the device's
// record, to uncount it, if any. owner is the address of the allocation
// that the leak watch knows, or 0 for a leak's copy, whose entry the leak
// watch removes itself.
//
// The tail takes a's bytes from the ledger (from rec, and from the
// category's record, if any), then from the device-side figure where how
// drops it now, runs the hooks and ends the marker's entry (hooks.go).
// With every feature off and no category it is rec.Free.
func (s *deviceTable) release(a *allocation, rec *tracker.Record, how releaseKind, stream Stream, owner uintptr) (released bool, err error) {
	switch how {
	case freeNow, freeLeak:
		err = s.b.free(int(a.ordinal), a.size, &a.mem)
	case freeInStream:
		err = s.stream.freeAsync(int(a.ordinal), a.size, &a.mem, stream)
	case unmapNow:
		if err = s.vmm.unmap(int(a.ordinal), a.size, &a.mem); err == nil {
			// Every unmap counts toward a return check, whichever path
			// makes it: Reservation.Unmap, the leak watch's FreeLeaks.
			spacesOf(s, int(a.ordinal), true).unmapped.Add(a.size)
		}
	}
	if err != nil {
		return false, err
	}
	if a.cat == 0 && !a.marked() && (!how.heldNow() || s.held == nil) && s.hooks.vals.Load() == nil {
		return true, rec.Free(a.size)
	}
	// A category, the device-side figure or a feature has a part in it.
	o := int(a.ordinal)
	l := ledger{rec: rec}
	if a.cat == 0 {
		err = rec.Free(a.size)
	} else {
		l.inCategoryOf(s, o, a.cat)
		err = l.uncount(a.size)
	}
	if err != nil {
		l = ledger{} // the memory is released all the same: the features let go of it, and nothing they count moves
	} else if how.heldNow() && s.held != nil {
		s.held.heldDrop(o, a.size, a.from == fromPool)
	}
	if h := s.hooksOf(o); h != nil {
		h.released(a.size, a.mark, a.cat, l, stream)
	}
	if a.mark != nil {
		s.markerOf(o).end(a.mark, err == nil)
	}
	if a.entry != 0 {
		s.claimerOf(o).end(a.entry, owner)
	}
	return true, err
}

// releaseGraph is the release path of a graph's buffer, which no claim
// takes: the backend frees it now (Free: cuMemFree) or in stream order
// (FreeAsync: cuMemFreeAsync). On a stream that captures its own graph the
// free is a free node of it: the capture's figures count it, and the buffer
// is freed. Elsewhere the free is of the allocation of the graph's last
// launch, which outlived it (or, on a stream that captures another graph,
// a free node of that graph, which frees it at that graph's launch): the
// buffer stays the graph's, to be freed again after the next launch, and no
// figure moves. The driver refuses a free of an allocation that is not
// live.
func (b *Buffer) releaseGraph(how releaseKind, stream Stream) error {
	t := tableOf(b.kind)
	o := int(b.ordinal)
	c := graphOf(b).capture
	if how != freeInStream {
		if err := t.b.free(o, b.size, &b.mem); err != nil {
			return notLive(err, b)
		}
		return nil
	}
	id, err := t.stream.freeGraph(o, b.size, &b.mem, stream)
	if err != nil {
		if e, ok := err.(*invalidatedIn); ok {
			capturesOf(t, o).Invalidated(e.id, uintptr(stream))
			return wrapf(fillError(e.err, b.Device(), b.size, nil),
				"free node of a %d-byte graph allocation at %#x in CUDA graph capture %d on %v, refused (a graph frees an allocation once, cuGraphAddMemFreeNode); the driver invalidated the capture, which ends with no graph",
				b.size, b.mem.ptr, e.id, b.Device())
		}
		if id != 0 {
			return wrapf(fillError(err, b.Device(), b.size, nil),
				"free node of a %d-byte graph allocation at %#x in CUDA graph capture %d on %v, refused (a graph frees an allocation once, cuGraphAddMemFreeNode); the capture goes on, without the node",
				b.size, b.mem.ptr, id, b.Device())
		}
		return notLive(err, b)
	}
	switch {
	case id == 0:
	case id == c.ID():
		if b.moveState(stateGraph, stateFreed) { // the driver takes one free node of an allocation in its graph
			capturesOf(t, o).FreeNode(id, uintptr(stream), b.size)
		}
	default:
		capturesOf(t, o).FreeNode(id, uintptr(stream), 0)
	}
	return nil
}

// notLive completes the error of a refused free of graph buffer b: where
// the driver refused it (a backend's *callError), why it may have.
func notLive(err error, b *Buffer) error {
	if _, ok := err.(*callError); ok {
		return wrapf(fillError(err, b.Device(), b.size, nil),
			"free of a %d-byte graph allocation at %#x (a graph's allocation is live from each launch of its graph until freed; its own capture frees it once)",
			b.size, b.mem.ptr)
	}
	return fillError(err, b.Device(), b.size, nil)
}
