package addrspace

import (
	"sort"
	"sync"
)

// state is where a mapping stands.
type state uint8

const (
	mapped    state = iota // the driver mapped it
	mapping                // BeginMap claimed it; EndMap has not settled it
	unmapping              // BeginUnmap marked it; EndUnmap has not settled it
)

type entry struct {
	Range
	state state
}

// Reservation is one reservation of address space and the ranges mapped
// into it. Make it with [New]; it is safe for concurrent use.
type Reservation struct {
	base        uintptr
	size, gran  int64
	mu          sync.Mutex
	entries     []entry // sorted by offset, none overlapping
	mappedBytes int64   // the bytes of the entries mapped or being unmapped
	released    bool
}

// New returns the reservation of size bytes at base whose mappings are
// made in multiples of granularity. The size and the granularity must be
// positive, the size and the base multiples of the granularity.
func New(base uintptr, size, granularity int64) (*Reservation, error) {
	e := &RangeError{Op: "new", Range: Range{Offset: int64(base), Size: size}, ReservationSize: size, Granularity: granularity}
	switch {
	case size <= 0 || granularity <= 0:
		e.Err = ErrOutOfRange
	case size%granularity != 0 || uint64(base)%uint64(granularity) != 0:
		e.Err = ErrUnaligned
	default:
		return &Reservation{base: base, size: size, gran: granularity}, nil
	}
	return nil, e
}

// Base returns the reservation's first address.
func (r *Reservation) Base() uintptr { return r.base }

// Size returns the reservation's size in bytes.
func (r *Reservation) Size() int64 { return r.size }

// Granularity returns the granularity of its mappings' offsets and sizes.
func (r *Reservation) Granularity() int64 { return r.gran }

// Addr returns the address of offset in the reservation.
func (r *Reservation) Addr(offset int64) uintptr { return r.base + uintptr(offset) }

// refuse returns the refusal of op on rg for err.
func (r *Reservation) refuse(op string, rg Range, err error) *RangeError {
	return &RangeError{Op: op, Range: rg, ReservationSize: r.size, Granularity: r.gran, Err: err}
}

// check returns why rg is no range of the reservation for op, or nil;
// r.mu is held.
func (r *Reservation) check(op string, rg Range) *RangeError {
	switch {
	case r.released:
		return r.refuse(op, rg, ErrReleased)
	case rg.Size <= 0 || rg.Offset < 0:
		return r.refuse(op, rg, ErrOutOfRange)
	case rg.Offset%r.gran != 0 || rg.Size%r.gran != 0:
		return r.refuse(op, rg, ErrUnaligned)
	case rg.Offset > r.size-rg.Size:
		return r.refuse(op, rg, ErrOutOfRange)
	}
	return nil
}

// after returns the index of the first entry that ends after offset;
// r.mu is held.
func (r *Reservation) after(offset int64) int {
	return sort.Search(len(r.entries), func(i int) bool { return r.entries[i].End() > offset })
}

// at returns the index of the entry that begins at offset, or -1; r.mu is
// held.
func (r *Reservation) at(offset int64) int {
	i := r.after(offset)
	if i < len(r.entries) && r.entries[i].Offset == offset {
		return i
	}
	return -1
}

// BeginMap checks that [offset, offset+size) can be mapped, and claims it
// for a map under way, until EndMap: its offset and size are multiples of
// the granularity, the size above 0, the range inside the reservation and
// overlapping no mapping or map under way. A refusal changes nothing.
func (r *Reservation) BeginMap(offset, size int64) error {
	rg := Range{offset, size}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.check("map", rg); e != nil {
		return e
	}
	i := r.after(offset)
	if i < len(r.entries) && r.entries[i].Offset < rg.End() {
		e := r.refuse("map", rg, ErrOverlap)
		e.Mapping = r.entries[i].Range
		return e
	}
	r.entries = append(r.entries, entry{})
	copy(r.entries[i+1:], r.entries[i:])
	r.entries[i] = entry{rg, mapping}
	return nil
}

// EndMap settles the map under way at offset: mapped where ok, the range
// given back where not (the driver refused it).
func (r *Reservation) EndMap(offset int64, ok bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.at(offset)
	if i < 0 || r.entries[i].state != mapping {
		e := r.refuse("end map", Range{Offset: offset}, ErrNotPending)
		if i >= 0 {
			e.Range.Size = r.entries[i].Size
		}
		return e
	}
	if !ok {
		r.entries = append(r.entries[:i], r.entries[i+1:]...)
		return nil
	}
	r.entries[i].state = mapped
	r.mappedBytes += r.entries[i].Size
	return nil
}

// BeginUnmap checks that [offset, offset+size) is exactly one mapping, not
// being mapped or unmapped, and marks it as being unmapped, until
// EndUnmap. A refusal changes nothing.
func (r *Reservation) BeginUnmap(offset, size int64) error {
	rg := Range{offset, size}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.check("unmap", rg); e != nil {
		return e
	}
	i := r.after(offset)
	if i == len(r.entries) || r.entries[i].Range != rg {
		e := r.refuse("unmap", rg, ErrNotMapped)
		if i < len(r.entries) && r.entries[i].Offset <= offset {
			e.Mapping = r.entries[i].Range
		}
		return e
	}
	if r.entries[i].state != mapped {
		e := r.refuse("unmap", rg, ErrBusy)
		e.Mapping = rg
		return e
	}
	r.entries[i].state = unmapping
	return nil
}

// EndUnmap settles the unmap under way at offset: the mapping gone where
// ok, left as it was where not (the driver refused to unmap it).
func (r *Reservation) EndUnmap(offset int64, ok bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.at(offset)
	if i < 0 || r.entries[i].state != unmapping {
		e := r.refuse("end unmap", Range{Offset: offset}, ErrNotPending)
		if i >= 0 {
			e.Range.Size = r.entries[i].Size
		}
		return e
	}
	if !ok {
		r.entries[i].state = mapped
		return nil
	}
	r.mappedBytes -= r.entries[i].Size
	r.entries = append(r.entries[:i], r.entries[i+1:]...)
	return nil
}

// Map maps [offset, offset+size) at once: BeginMap and EndMap(true).
func (r *Reservation) Map(offset, size int64) error {
	if err := r.BeginMap(offset, size); err != nil {
		return err
	}
	return r.EndMap(offset, true)
}

// Unmap unmaps the mapping [offset, offset+size) at once: BeginUnmap and
// EndUnmap(true).
func (r *Reservation) Unmap(offset, size int64) error {
	if err := r.BeginUnmap(offset, size); err != nil {
		return err
	}
	return r.EndUnmap(offset, true)
}

// Release marks the reservation released, once nothing is mapped in it
// and no map is under way; from then on it refuses everything with
// ErrReleased. A refusal changes nothing.
func (r *Reservation) Release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return r.refuse("release", Range{Size: r.size}, ErrReleased)
	}
	if n := len(r.entries); n > 0 {
		e := r.refuse("release", Range{Size: r.size}, ErrMapped)
		e.Left = n
		return e
	}
	r.released = true
	return nil
}

// Released reports whether Release succeeded.
func (r *Reservation) Released() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released
}

// Mapped returns the bytes mapped: the mappings settled, those being
// unmapped included, and no map under way.
func (r *Reservation) Mapped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mappedBytes
}

// Mappings returns the mappings that Mapped counts, in the order of their
// offsets.
func (r *Reservation) Mappings() []Range {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Range, 0, len(r.entries))
	for _, e := range r.entries {
		if e.state != mapping {
			out = append(out, e.Range)
		}
	}
	return out
}

// MappingAt returns the mapping that Mapped counts in which offset falls,
// and true, or false where none is.
func (r *Reservation) MappingAt(offset int64) (Range, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.after(offset)
	if i < len(r.entries) && r.entries[i].Offset <= offset && r.entries[i].state != mapping {
		return r.entries[i].Range, true
	}
	return Range{}, false
}
