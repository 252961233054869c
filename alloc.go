package memtrack

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack/tracker"
)

// The allocation path. Every way memory is counted (Device.Alloc,
// Category.Alloc, Device.AllocAsync, Category.AllocAsync, Device.Track,
// Category.Track, Device.TrackAddr) takes the same steps, in this order:
//
//  1. admit: bad input first (the size, the device, the category), then
//     the category's limit and the device's, read before the backend is
//     asked, so that a request over one costs no device memory;
//  2. the backend allocates (Device.Track and TrackAddr claim the address
//     instead);
//  3. commit counts the bytes, in the category's record first, so that its
//     limit refuses exactly, then in the device's;
//  4. the features: the device-side figure (a backend's capability,
//     kindState.held), then the hook set of the device (hooks), one atomic
//     load while every feature is off.
//
// A refusal at any step goes through one builder, Device.refuse. The
// category and the stream are fields of the request, not reasons for
// another copy of the path. Every free takes one path back too:
// kindState.uncount.

// request is what flows through the allocation path.
type request struct {
	size   int64
	cat    Category // the zero Category for none
	stream Stream   // the stream of a stream-ordered allocation, else 0
	async  bool     // stream-ordered (AllocAsync)
	skip   int      // frames to leave out of the site above the exported function's caller
}

// admitted is a request that admit let through: the device's table and
// record, and the category's record (nil for none).
type admitted struct {
	s    *kindState
	rec  *tracker.Record
	crec *tracker.Record
}

// admit checks r's input: its size, the device and its category. what
// names the request in the error of a bad size ("requested", "tracked").
// For a request of a size > 0 without a category it is Device.resolve,
// which the allocation paths call themselves then.
func (d Device) admit(r *request, what string) (admitted, error) {
	if r.size <= 0 {
		return admitted{}, fmt.Errorf("%w: %d bytes %s on %v", ErrInvalidSize, r.size, what, d)
	}
	s, rec, err := d.resolve()
	if err != nil {
		return admitted{}, err
	}
	a := admitted{s: s, rec: rec}
	if r.cat.set != nil {
		// The exported functions have refused the zero Category already.
		a.crec = r.cat.recordOf()
	}
	return a, nil
}

// limited reports whether a limit may refuse: the category's record or
// the device's has one, a load or two, inlined (TestIntendedInlining). The
// paths call limitRefusal only then.
func (a *admitted) limited() bool {
	return a.crec != nil && a.crec.Limit() > 0 || a.rec.Limit() > 0
}

// limitRefusal is the one check of the memory limits, made by every
// allocation path before it asks the backend (and after it has refused its
// bad input), so that a request over a limit costs no device memory: it
// returns the refusal of size bytes that the limit of the category (crec;
// nil for none) or else the device's (rec) does not leave room for, and
// nil where both do. It counts nothing: the caller gives the refusal to
// Device.refuse. The records check again, exactly, when they count.
func limitRefusal(rec, crec *tracker.Record, size int64) *OutOfMemoryError {
	if crec != nil {
		if lim, cur := crec.Limit(), crec.Tracked(); lim > 0 && size > lim-cur {
			return &OutOfMemoryError{Requested: size, Tracked: rec.Tracked(), CategoryTracked: cur, Limit: lim, Reason: categoryLimitReason}
		}
	}
	if lim := rec.Limit(); lim > 0 {
		if cur := rec.Tracked(); size > lim-cur {
			e := &OutOfMemoryError{Requested: size, Tracked: cur, Limit: lim, Reason: "memory limit"}
			if crec != nil {
				e.CategoryTracked = crec.Tracked()
			}
			return e
		}
	}
	return nil
}

// commit counts size bytes in the category's record, then in the
// device's, as one operation for the resets of the cumulative figures
// (Category.count); the path calls the device's record itself where there
// is no category.
func (a *admitted) commit(r *request) (byCategory bool, err error) {
	if a.crec == nil {
		return false, a.rec.Alloc(r.size)
	}
	return r.cat.count(a.rec, a.crec, r.size)
}

// Alloc allocates size bytes on the device and counts them. It fails with
// [ErrInvalidSize] for size <= 0 (counting nothing) and with an
// [*OutOfMemoryError] when the memory limit or the device refuses it (adding
// one to FailedAllocs and nothing else). Free the buffer with [Buffer.Free].
func (d Device) Alloc(size int64) (*Buffer, error) {
	return d.allocate(request{size: size})
}

// allocate is the allocation path of a [Buffer]: Alloc, AllocAsync and
// their categories'.
func (d Device) allocate(r request) (*Buffer, error) {
	var a admitted
	var err error
	var sb streamBackend
	switch {
	case r.size > 0 && !r.async:
		// admit, inlined by hand: the exported functions have refused the
		// zero Category already.
		if a.s, a.rec, err = d.resolve(); err == nil && r.cat.set != nil {
			a.crec = r.cat.recordOf()
		}
	case r.async && r.size > 0:
		if err = d.streamsSupported(); err != nil {
			return nil, err
		}
		fallthrough
	default:
		a, err = d.admit(&r, "requested")
		if err == nil && r.async {
			sb, err = a.s.streams(d)
		}
	}
	if err != nil {
		return nil, err
	}
	if a.limited() {
		if e := limitRefusal(a.rec, a.crec, r.size); e != nil {
			if sb != nil {
				// The stream is bad input, refused before a failure is counted.
				if err := sb.checkStream(d.ordinal, r.stream); err != nil {
					return nil, err
				}
			}
			return nil, d.refuse(a, &r, refusal{oom: e})
		}
	}
	// The backend writes straight into the buffer (see backend).
	var b *Buffer
	if a.s.inline && r.size <= cpuInlineMax {
		b = newSmallCPUBuffer(r.size)
	} else {
		b = new(Buffer)
	}
	b.size, b.ordinal, b.kind = r.size, int32(d.ordinal), d.kind
	if sb == nil {
		err = a.s.b.alloc(d.ordinal, r.size, &b.mem)
	} else {
		b.pooled = true
		err = sb.allocAsync(d.ordinal, r.size, r.stream, &b.mem)
		if u, ok := err.(uncounted); ok {
			return nil, u.err // bad input, or nothing asked of the device: nothing counted
		}
	}
	if err != nil {
		return nil, d.refuse(a, &r, refusal{err: err, byBackend: true})
	}
	var byCat bool
	if a.crec == nil {
		err = a.rec.Alloc(r.size)
	} else {
		byCat, err = a.commit(&r)
	}
	if err != nil {
		// The memory goes back before the report reads the device and the
		// observers run, so that neither sees it (cuMemFree takes the
		// memory of a pool back at once).
		return nil, d.refuse(a, &r, refusal{err: err, byCategory: byCat, mem: &b.mem})
	}
	if a.s.held != nil {
		a.s.held.heldAlloc(d.ordinal, r.size, b.pooled)
	}
	b.self, b.cat = b, r.cat.idx
	if h := a.s.hooksOf(d.ordinal); h != nil {
		b.site = h.alloc(&r, a.rec, a.crec)
		if h.leaks != nil {
			watchNewBuffer(h.leaks, a.s, b)
		}
	}
	return b, nil
}

// refusal says what refused a request after admit: the backend
// (byBackend), else the device's record or, byCategory, the category's;
// err is the refusal. mem is the memory the backend allocated, which goes
// back, or nil.
type refusal struct {
	oom        *OutOfMemoryError // a limit's refusal, built by limitRefusal
	err        error
	byBackend  bool
	byCategory bool
	mem        *memory
}

// refuse is the one builder of the refusals of the allocation path: it
// counts what refusal f says is not counted yet (on the device and in the
// category, as one operation for the resets: Category.countFailure),
// records it in the history,
// gives back memory the backend allocated, builds the error and runs the
// report and the observers (Device.outOfMemory).
func (d Device) refuse(a admitted, r *request, f refusal) error {
	if h := a.s.hooksOf(d.ordinal); h != nil {
		h.refused(r, a.rec, a.crec, f.err)
	}
	var oom *OutOfMemoryError
	switch {
	case f.oom != nil:
		r.cat.countFailure(a.rec)
		oom = f.oom
	case f.byBackend:
		r.cat.countFailure(a.rec)
		err := fillError(f.err, d, r.size, a.rec)
		var ok bool
		if oom, ok = err.(*OutOfMemoryError); !ok {
			return err
		}
	default:
		oom = recordRefusal(f.err, d, r.size, a.rec.Tracked())
		if f.byCategory && oom.Limit > 0 {
			// The category's limit: its LimitError holds the category's figure.
			oom.CategoryTracked, oom.Tracked, oom.Reason = oom.Tracked, a.rec.Tracked(), categoryLimitReason
		}
	}
	var ferr error
	if f.mem != nil {
		ferr = a.s.b.free(d.ordinal, r.size, f.mem)
	}
	d.outOfMemory(a.s, a.rec, oom, r.cat)
	if ferr != nil {
		return fmt.Errorf("%w; releasing the memory also failed: %w", oom, ferr)
	}
	return oom
}

// recordRefusal describes an allocation that the device's record refused,
// with the fields that explain it: the limit and the figure it was held
// against for a [*tracker.LimitError], the tracker's capacity (in Reason)
// for anything else. cur is the bytes tracked when it was refused.
func recordRefusal(err error, d Device, size, cur int64) *OutOfMemoryError {
	var le *tracker.LimitError
	if errors.As(err, &le) {
		return &OutOfMemoryError{Device: d, Requested: size, Tracked: le.Tracked, Limit: le.Limit, Reason: "memory limit"}
	}
	return &OutOfMemoryError{Device: d, Requested: size, Tracked: cur, Reason: "the tracker's capacity: " + reason(err)}
}

// fillError completes an error from a backend with the device and figures.
func fillError(err error, d Device, size int64, rec *tracker.Record) error {
	switch e := err.(type) {
	case *OutOfMemoryError:
		e.Device, e.Requested = d, size
		if rec != nil {
			e.Tracked = rec.Tracked()
		}
	case *BackendError:
		e.Device = d
	}
	return err
}

// releaseHow says how the device-side figure takes a release: releaseHeld,
// it drops now (not for Buffer.FreeAsync, whose stream has yet to execute
// the free); releasePooled, the bytes are a stream-ordered buffer's, whose
// share of that figure drops too.
type releaseHow uint8

const (
	releaseHeld releaseHow = 1 << iota
	releasePooled
)

// uncount is the one release path: it takes size bytes of device ordinal
// from its record rec and from category cat (1-based) of cs (nil for
// none), then from the device-side figure and the site
// st, if recorded, and records the free in the history (of stream, for a
// stream-ordered free). It fails, changing nothing, where rec refuses (it
// holds less than size). The arguments are separate, not a struct, so that
// they pass in registers; where there is nothing but the record to
// uncount, nothing needs them after its Free.
func (s *kindState) uncount(rec *tracker.Record, cs *categorySet, size int64, st *site, stream Stream, ordinal int, cat uint8, how releaseHow) error {
	if cs == nil && st == nil && (how&releaseHeld == 0 || s.held == nil) && s.hooks.recs.Load() == nil {
		return rec.Free(size)
	}
	return s.uncountObserved(rec, cs, size, st, stream, ordinal, cat, how)
}

// uncountObserved is uncount where a category, a site, the device-side
// figure or a hook set of the kind has a part in the release.
func (s *kindState) uncountObserved(rec *tracker.Record, cs *categorySet, size int64, st *site, stream Stream, ordinal int, cat uint8, how releaseHow) error {
	var crec *tracker.Record
	if cs != nil {
		var err error
		if crec, err = cs.uncount(cat, rec, size); err != nil { // with the device's, as one operation for the resets
			return err
		}
	} else if err := rec.Free(size); err != nil {
		return err
	}
	if how&releaseHeld != 0 && s.held != nil {
		s.held.heldFree(ordinal, size, how&releasePooled != 0)
	}
	if st != nil {
		st.Free()
	}
	if h := s.hooksOf(ordinal); h != nil && h.history != nil {
		h.history.free(size, st, rec, stream, cat, crec)
	}
	return nil
}

// SetMemoryLimit caps the bytes the device's live buffers may hold: an Alloc
// that would pass it fails with an [*OutOfMemoryError]. Zero removes the
// limit; a negative limit is an error. Buffers already allocated are kept
// even if they exceed a new limit.
func (d Device) SetMemoryLimit(limit int64) error {
	if limit < 0 {
		return fmt.Errorf("%w: memory limit %d on %v is negative (0 removes the limit)", ErrInvalidSize, limit, d)
	}
	_, r, err := d.resolve()
	if err != nil {
		return err
	}
	return r.SetLimit(limit)
}

// MemoryLimit returns the device's memory limit, or 0 if none is set.
func (d Device) MemoryLimit() int64 {
	if r := d.peek(); r != nil {
		return r.Limit()
	}
	return 0
}
