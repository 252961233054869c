package hostvm

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// The errors of a [Reservation].
var (
	// ErrNoReservations: this OS has no reservation of address space
	// without memory that memtrack uses (only Unix's mmap and Windows's
	// VirtualAlloc are).
	ErrNoReservations = errors.New("reserving address space without memory is not supported on " + runtime.GOOS)
	// ErrBadRange: a size or an offset that is not a multiple of the
	// granularity, or a range not inside the reservation.
	ErrBadRange = errors.New("not a range of whole pages inside the reservation")
	// ErrReleased: the reservation was released.
	ErrReleased = errors.New("the reservation was released")
)

// Reservation is a range of the process's address space reserved with no
// access and no memory behind it, in which ranges of pages are committed
// (made readable and writable, their memory given by the OS as they are
// first written) and decommitted (their memory given back to the OS, out
// of the process's resident set, and no longer accessible). Make it with
// [Reserve]. It is safe for concurrent use, but the caller keeps the
// ranges it commits and decommits apart (package addrspace does).
type Reservation struct {
	mu       sync.RWMutex // held for reading by Commit and Decommit, for writing by Release
	size     int64
	released bool
	os       osReservation // the OS's handle of it (reserve_*.go)
}

// Reserve reserves size bytes of address space with no access and no
// memory: a positive multiple of [ReserveGranularity]. On an OS without
// reservations it returns [ErrNoReservations].
func Reserve(size int64) (*Reservation, error) {
	if size <= 0 || size%ReserveGranularity() != 0 || size > math.MaxInt {
		return nil, fmt.Errorf("%w: a reservation of %d bytes (the granularity is %d)", ErrBadRange, size, ReserveGranularity())
	}
	r := &Reservation{size: size}
	if err := r.os.reserve(size); err != nil {
		return nil, err
	}
	return r, nil
}

// Supported reports whether this OS reserves address space without memory:
// where it does not, Reserve returns [ErrNoReservations].
func Supported() bool { return supported }

// Bytes returns the host's view of size bytes at offset: whole pages inside
// the reservation. They may be read and written only while committed.
func (r *Reservation) Bytes(offset, size int64) ([]byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.released {
		return nil, fmt.Errorf("view of %d bytes at offset %d: %w", size, offset, ErrReleased)
	}
	if page := PageSize(); size <= 0 || offset < 0 || offset%page != 0 || size%page != 0 || offset > r.size-size {
		return nil, fmt.Errorf("%w: view of %d bytes at offset %d of a reservation of %d bytes (the page size is %d)",
			ErrBadRange, size, offset, r.size, page)
	}
	return r.os.bytes(offset, size), nil
}

// Base returns the reservation's first address.
func (r *Reservation) Base() uintptr { return r.os.base() }

// Size returns the reservation's size in bytes.
func (r *Reservation) Size() int64 { return r.size }

// Commit makes size bytes at offset readable and writable: whole pages
// ([PageSize]) inside the reservation. The OS gives them memory, zeroed,
// as they are first written.
func (r *Reservation) Commit(offset, size int64) error {
	return r.change("commit", offset, size, r.os.commit)
}

// Decommit gives the memory of size bytes at offset back to the OS, which
// takes them out of the process's resident set, and makes them
// inaccessible again: whole pages inside the reservation. A later Commit
// finds them zeroed.
func (r *Reservation) Decommit(offset, size int64) error {
	return r.change("decommit", offset, size, r.os.decommit)
}

func (r *Reservation) change(op string, offset, size int64, f func(offset, size int64) error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.released {
		return fmt.Errorf("%s of %d bytes at offset %d: %w", op, size, offset, ErrReleased)
	}
	if page := PageSize(); size <= 0 || offset < 0 || offset%page != 0 || size%page != 0 || offset > r.size-size {
		return fmt.Errorf("%w: %s of %d bytes at offset %d of a reservation of %d bytes (the page size is %d)",
			ErrBadRange, op, size, offset, r.size, page)
	}
	return f(offset, size)
}

// Release gives the whole reservation back to the OS, the memory of what
// is committed in it included. Nothing of it may be used afterwards;
// later calls return [ErrReleased].
func (r *Reservation) Release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return fmt.Errorf("release of a reservation of %d bytes: %w", r.size, ErrReleased)
	}
	if err := r.os.release(r.size); err != nil {
		return err
	}
	r.released = true
	return nil
}
