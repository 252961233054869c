package addrspace

import (
	"errors"
	"fmt"
)

// The reasons a [Reservation] refuses a range; every error of the package
// wraps one of them in a [*RangeError].
var (
	// ErrUnaligned: the offset or the size is not a multiple of the
	// reservation's granularity (or, for New, the base or the size).
	ErrUnaligned = errors.New("not a multiple of the granularity")
	// ErrOutOfRange: the range is empty, negative or not inside the
	// reservation.
	ErrOutOfRange = errors.New("not inside the reservation")
	// ErrOverlap: the range overlaps a mapping, or a map of it under way.
	ErrOverlap = errors.New("overlaps a mapping")
	// ErrNotMapped: the range is not exactly one mapping.
	ErrNotMapped = errors.New("not exactly one mapping")
	// ErrBusy: a map or an unmap of the mapping is under way.
	ErrBusy = errors.New("a map or an unmap of it is under way")
	// ErrNotPending: EndMap or EndUnmap names no map or unmap under way.
	ErrNotPending = errors.New("no map or unmap of it is under way")
	// ErrMapped: the reservation cannot be released while mappings are
	// left in it.
	ErrMapped = errors.New("mappings are left in it")
	// ErrReleased: the reservation was released.
	ErrReleased = errors.New("the reservation was released")
)

// Range is a range of a reservation: Size bytes from Offset.
type Range struct {
	Offset, Size int64
}

// End returns the offset just past the range.
func (r Range) End() int64 { return r.Offset + r.Size }

// RangeError is a refusal, with what was asked and what stood in the way.
type RangeError struct {
	Op    string // "new", "map", "unmap", "end map", "end unmap" or "release"
	Range Range  // the range asked for (for "new": the reservation)
	// ReservationSize and Granularity are the reservation's size and
	// granularity.
	ReservationSize, Granularity int64
	// Mapping is the mapping in the way: the one overlapped (ErrOverlap),
	// the one the range falls in (ErrNotMapped; zero where none does), or
	// the one under way (ErrBusy).
	Mapping Range
	// Left is the number of mappings left in the reservation (ErrMapped).
	Left int
	Err  error // the reason: one of the package's sentinel errors
}

func (e *RangeError) Error() string {
	what := fmt.Sprintf("%s of %d bytes at offset %d", e.Op, e.Range.Size, e.Range.Offset)
	switch e.Err {
	case ErrUnaligned:
		if e.Op == "new" {
			return fmt.Sprintf("reservation of %d bytes at %#x: %v %d", e.Range.Size, e.Range.Offset, e.Err, e.Granularity)
		}
		return fmt.Sprintf("%s: %v %d", what, e.Err, e.Granularity)
	case ErrOutOfRange:
		if e.Op == "new" {
			return fmt.Sprintf("reservation of %d bytes with granularity %d: the size and granularity must be positive", e.Range.Size, e.Granularity)
		}
		return fmt.Sprintf("%s: %v of %d bytes", what, e.Err, e.ReservationSize)
	case ErrOverlap, ErrBusy:
		return fmt.Sprintf("%s: %v of %d bytes at offset %d", what, e.Err, e.Mapping.Size, e.Mapping.Offset)
	case ErrNotMapped:
		if e.Mapping.Size > 0 {
			return fmt.Sprintf("%s: %v (it falls in the mapping of %d bytes at offset %d)", what, e.Err, e.Mapping.Size, e.Mapping.Offset)
		}
		return fmt.Sprintf("%s: %v (nothing is mapped there)", what, e.Err)
	case ErrMapped:
		if e.Left == 1 {
			return fmt.Sprintf("release of a reservation of %d bytes: 1 mapping is left in it", e.ReservationSize)
		}
		return fmt.Sprintf("release of a reservation of %d bytes: %d %v", e.ReservationSize, e.Left, e.Err)
	case ErrReleased:
		if e.Op == "release" {
			return fmt.Sprintf("release of a reservation of %d bytes: it was released already", e.ReservationSize)
		}
	}
	return fmt.Sprintf("%s: %v", what, e.Err)
}

func (e *RangeError) Unwrap() error { return e.Err }
