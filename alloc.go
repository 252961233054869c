package memtrack

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack/tracker"
)

// Alloc allocates size bytes on the device and counts them. It fails with
// [ErrInvalidSize] for size <= 0 (counting nothing) and with an
// [*OutOfMemoryError] when the memory limit or the device refuses it (adding
// one to FailedAllocs and nothing else). Free the buffer with [Buffer.Free].
func (d Device) Alloc(size int64) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes requested on %v", ErrInvalidSize, size, d)
	}
	s, rec, err := d.resolve()
	if err != nil {
		return nil, err
	}
	if e := limitRefusal(rec, nil, size); e != nil {
		return nil, d.refuse(s, rec, Category{}, e)
	}
	// The backend writes straight into the buffer (see backend).
	var b *Buffer
	if s.inline && size <= cpuInlineMax {
		b = newSmallCPUBuffer(size)
	} else {
		b = new(Buffer)
	}
	b.size, b.ordinal, b.kind = size, int32(d.ordinal), d.kind
	if err := s.b.alloc(d.ordinal, size, &b.mem); err != nil {
		return nil, d.backendRefused(s, rec, size, err)
	}
	if err := rec.Alloc(size); err != nil {
		return nil, d.recordRefused(s, rec, b, err)
	}
	sideAlloc(d, size) // the device-side figure (cuda_stream.go)
	b.self = b
	if sr := s.sites.lookup(d.ordinal); sr != nil {
		b.site = sr.alloc(size) // see sites.go
	}
	if h := tables[d.kind].history.lookup(d.ordinal); h != nil {
		h.alloc(size, b.site, rec, 0) // see history.go
	}
	if dl := s.leaks.on.lookup(d.ordinal); dl != nil {
		watchNewBuffer(dl, s, b) // see leak.go
	}
	return b, nil
}

// alloc is Alloc through category c (see category.go): the category is
// counted before the device, so that its limit refuses exactly, and a
// device that then refuses takes it back (Category.count). Alloc
// keeps its own path, without the category's steps, so that an allocation
// outside categories costs what it would without them; the two share their
// checks (limitRefusal) and refusals, and must otherwise stay alike
// (category_test.go checks that both count the same).
func (d Device) alloc(size int64, c Category) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes requested on %v", ErrInvalidSize, size, d)
	}
	s, rec, err := d.resolve()
	if err != nil {
		return nil, err
	}
	crec, err := c.record(s)
	if err != nil {
		return nil, err
	}
	if e := limitRefusal(rec, crec, size); e != nil {
		return nil, d.refuse(s, rec, c, e)
	}
	var b *Buffer // as Alloc makes it: the backend writes straight into it
	if s.inline && size <= cpuInlineMax {
		b = newSmallCPUBuffer(size)
	} else {
		b = new(Buffer)
	}
	b.size, b.ordinal, b.kind = size, int32(d.ordinal), d.kind
	if err := s.b.alloc(d.ordinal, size, &b.mem); err != nil {
		return nil, d.backendRefusedIn(s, rec, size, err, c)
	}
	if byCategory, err := c.count(rec, crec, size); err != nil { // category_count.go
		return nil, d.recordRefusedIn(s, rec, b, err, c, byCategory)
	}
	sideAlloc(d, size) // the device-side figure (cuda_stream.go)
	b.self, b.cat = b, c.idx
	if sr := s.sites.lookup(d.ordinal); sr != nil {
		b.site = sr.allocIn(size, 1, c.Name()) // see sites.go
	}
	if h := tables[d.kind].history.lookup(d.ordinal); h != nil {
		h.allocIn(size, b.site, rec, 0, c.idx, crec) // see history.go
	}
	if dl := s.leaks.on.lookup(d.ordinal); dl != nil {
		watchNewBuffer(dl, s, b) // see leak.go
	}
	return b, nil
}

// limitRefusal is the one check of the memory limits, made by every
// allocation path (Alloc, AllocAsync and Track, through a category or not)
// before it asks the backend, so that a request over a limit costs no
// device memory: it returns the refusal of size bytes that the limit of
// the category (crec; nil for none) or else the device's (rec) does not
// leave room for, and nil where both do. It counts nothing: the caller
// gives the refusal to refuse, after it has refused its bad input, which
// is always checked first. The records check again, exactly, when they
// count.
func limitRefusal(rec, crec *tracker.Record, size int64) *OutOfMemoryError {
	if (crec == nil || crec.Limit() <= 0) && rec.Limit() <= 0 {
		return nil // no limit: a load or two, inlined
	}
	return limitsRefusal(rec, crec, size)
}

func limitsRefusal(rec, crec *tracker.Record, size int64) *OutOfMemoryError {
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

// The refusals of the allocation paths, kept out of their fast paths.

// refuse answers e, a request that limitRefusal refused, in category c
// (the zero Category for none): it counts the failure on the device and
// in the category, records it in the history, completes the report and
// runs the observers.
func (d Device) refuse(s *kindState, rec *tracker.Record, c Category, e *OutOfMemoryError) error {
	c.countFailure(rec)
	tables[d.kind].history.refusedIn(d.ordinal, e.Requested, rec, nil, c.idx, c.rec()) // see history.go
	return d.outOfMemory(s, rec, e, c)
}

// backendRefused counts and completes the error of a backend that could not
// allocate size bytes.
func (d Device) backendRefused(s *kindState, rec *tracker.Record, size int64, err error) error {
	return d.backendRefusedIn(s, rec, size, err, Category{})
}

// backendRefusedIn is backendRefused for a request in category c.
func (d Device) backendRefusedIn(s *kindState, rec *tracker.Record, size int64, err error, c Category) error {
	c.countFailure(rec)
	tables[d.kind].history.refusedIn(d.ordinal, size, rec, err, c.idx, c.rec())
	err = fillError(err, d, size, rec)
	if oom, ok := err.(*OutOfMemoryError); ok {
		return d.outOfMemory(s, rec, oom, c)
	}
	return err
}

// recordRefused gives back the memory of b, which the record refused to
// count (a concurrent allocation took the room under the limit, or the
// record is full); the record counted the failure.
func (d Device) recordRefused(s *kindState, rec *tracker.Record, b *Buffer, err error) error {
	return d.recordRefusedIn(s, rec, b, err, Category{}, false)
}

// recordRefusedIn is recordRefused for a request in category c; err is
// the refusal of c's record where byCategory is true.
func (d Device) recordRefusedIn(s *kindState, rec *tracker.Record, b *Buffer, err error, c Category, byCategory bool) error {
	oom := d.recordRefusalIn(b.size, rec, err, c, byCategory)
	// The memory goes back before the report reads the device and the
	// observers run, so that neither sees it.
	ferr := s.b.free(d.ordinal, b.size, &b.mem)
	d.outOfMemory(s, rec, oom, c)
	if ferr != nil {
		return fmt.Errorf("%w; releasing the memory also failed: %w", oom, ferr)
	}
	return oom
}

// recordRefusalIn records in the history, and describes, an allocation of
// size bytes in category c that a record refused with err (the record
// counted the failure): the device's record, or c's where byCategory is
// true, whose [*tracker.LimitError] holds the category's figure.
func (d Device) recordRefusalIn(size int64, rec *tracker.Record, err error, c Category, byCategory bool) *OutOfMemoryError {
	tables[d.kind].history.refusedIn(d.ordinal, size, rec, err, c.idx, c.rec()) // see history.go
	e := recordRefusal(err, d, size, rec.Tracked())
	if byCategory && e.Limit > 0 {
		e.CategoryTracked, e.Tracked, e.Reason = e.Tracked, rec.Tracked(), categoryLimitReason
	}
	return e
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
