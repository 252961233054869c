package memtrack

import (
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
	// A limit is checked before the backend is asked, so that a request over
	// it costs no device memory; the record checks again, exactly, after.
	if lim := rec.Limit(); lim > 0 {
		if cur := rec.Current(); size > lim-cur {
			rec.RecordFailure()
			tables[d.kind].history.refused(d.ordinal, size, rec, nil) // see history.go
			return nil, &OutOfMemoryError{Device: d, Requested: size, Current: cur, Limit: lim, Reason: "memory limit"}
		}
	}
	m, err := s.b.alloc(d.ordinal, size)
	if err != nil {
		rec.RecordFailure()
		tables[d.kind].history.refused(d.ordinal, size, rec, err)
		return nil, fillError(err, d, size, rec)
	}
	if err := rec.Alloc(size); err != nil {
		tables[d.kind].history.refused(d.ordinal, size, rec, err)
		// A concurrent allocation took the room under the limit, or the
		// record is full: give the memory back. The record counted the
		// failure.
		oom := &OutOfMemoryError{Device: d, Requested: size, Current: rec.Current(), Limit: rec.Limit(), Reason: err.Error()}
		if ferr := s.b.free(d.ordinal, m); ferr != nil {
			return nil, fmt.Errorf("%w; releasing the memory also failed: %w", oom, ferr)
		}
		return nil, oom
	}
	sideAlloc(d, size) // the device-side figure (cuda_stream.go)
	b := &Buffer{dev: d, size: size, mem: m, rec: rec, backend: s.b}
	if sr := s.sites.lookup(d.ordinal); sr != nil {
		b.site = sr.alloc(size) // see sites.go
	}
	if h := tables[d.kind].history.lookup(d.ordinal); h != nil {
		h.alloc(size, b.site, rec) // see history.go
	}
	return b, nil
}

// fillError completes an error from a backend with the device and figures.
func fillError(err error, d Device, size int64, rec *tracker.Record) error {
	switch e := err.(type) {
	case *OutOfMemoryError:
		e.Device, e.Requested = d, size
		if rec != nil {
			e.Current = rec.Current()
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
	if _, r, err := d.resolve(); err == nil {
		return r.Limit()
	}
	return 0
}
