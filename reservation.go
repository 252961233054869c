package memtrack

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/memtrack/memtrack/internal/addrspace"
)

// Elastic memory: address space reserved on a device with no memory behind
// it, and physical memory mapped into it and unmapped from it in the
// device's granules, so that a cache grows and shrinks while the program
// runs (docs/elastic.md). On CUDA it is the driver's virtual memory
// management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess,
// cuMemUnmap, cuMemRelease, cuMemAddressFree), on the CPU the OS's
// reservation and commit of pages (mmap with PROT_NONE and mprotect on
// Unix, VirtualAlloc on Windows); Metal has none.
//
// A mapping is one more source of the allocation path (Device.take,
// fromMapping) and an unmap one more kind of its release
// (deviceTable.release, unmapNow): each mapping is counted in Tracked from
// its map to its unmap, in its category, under the limits, in the history,
// the allocation sites and the leak watch, and a mapping refused by a limit
// or by the driver is an [*OutOfMemoryError] with its report. The address
// space reserved is a figure of its own, AddressSpace ([Stats]).

// Reservation is address space reserved on a device by [Device.Reserve] or
// [Category.Reserve], with no memory behind it, into which physical memory
// is mapped ([Reservation.Map]) and from which it is unmapped
// ([Reservation.Unmap]) in multiples of its granularity. Each mapping is
// counted in the device's Tracked (and its category's) while it is mapped;
// the reservation itself is counted in AddressSpace until
// [Reservation.Release]. A reservation dropped without Release keeps its
// address space, and its mappings are leaks, which the leak watch reports
// ([LeakWatcher.Enable]). Its methods are safe for concurrent use.
type Reservation struct {
	dev   Device
	cats  *categorySet // the category's set where Category.Reserve made it, else nil
	cat   uint8
	space *addrspace.Reservation // its base, size, granularity and mappings

	mu   sync.Mutex
	maps map[int64]*Buffer // each mapping's allocation, by offset
}

// MapGranularity returns the granularity of the device's reservations and
// mappings: every size and offset given to [Device.Reserve],
// [Reservation.Map] and [Reservation.Unmap] is a multiple of it. On a CUDA
// GPU it is the driver's minimum granularity of the device's memory
// (cuMemGetAllocationGranularity, 2 MiB on current GPUs); on the CPU the
// OS's page (4 KiB on most machines; on Windows the 64 KiB of its
// reservations). It fails, wrapping [ErrNotSupported], on a device that
// has no such reservations: a Metal GPU, a CUDA driver before CUDA 10.2
// (which lacks the calls), a GPU whose
// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0. It is a
// query: it registers nothing ([UsedDevices]).
func (d Device) MapGranularity() (int64, error) {
	s, err := d.vmm()
	if err != nil {
		return 0, err
	}
	g, err := s.vmm.vmmGranularity(d.ordinal)
	if err != nil {
		return 0, fillError(err, d, 0, nil)
	}
	return g, nil
}

// vmm looks the device up for a reservation, and fails where its backend
// has none. It starts the backend and registers nothing: a device is
// used from its first reservation made (Device.reserve), and a query or a
// call refused leaves UsedDevices as it was.
func (d Device) vmm() (*deviceTable, error) {
	s, _, err := d.lookup(start)
	if err != nil {
		return nil, err
	}
	if s.vmm == nil {
		return nil, fmt.Errorf("%w: %v reserves no address space: elastic memory needs a CUDA GPU with virtual memory management or the CPU", ErrNotSupported, d)
	}
	return s, nil
}

// Reserve reserves size bytes of address space on the device, with no
// memory behind it, for [Reservation.Map] to map physical memory into. The
// size is a positive multiple of [Device.MapGranularity]. It counts size
// in the device's AddressSpace, and nothing in Tracked: a reservation
// holds no memory. It fails with [ErrInvalidSize] for size <= 0, with a
// [*MappingError] matching [ErrUnaligned] for a size off the granularity,
// as MapGranularity does on a device without reservations, and with the
// driver's error where it refuses. A reservation made registers the device
// ([UsedDevices]), as an allocation does; a reservation refused, for
// whatever reason, registers nothing.
func (d Device) Reserve(size int64) (*Reservation, error) {
	return d.reserve(size, nil, 0)
}

// Reserve reserves address space on the category's device, as
// [Device.Reserve] does, whose mappings are counted in the category
// besides, under its limit: the KV cache's category counts the blocks
// mapped into its reservation.
func (c Category) Reserve(size int64) (*Reservation, error) {
	if c.set == nil {
		return nil, zeroCategory("Reserve", size)
	}
	return c.dev.reserve(size, c.set, c.idx)
}

func (d Device) reserve(size int64, cats *categorySet, cat uint8) (*Reservation, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: a reservation of %d bytes on %v", ErrInvalidSize, size, d)
	}
	s, err := d.vmm()
	if err != nil {
		return nil, err
	}
	g, err := s.vmm.vmmGranularity(d.ordinal)
	if err != nil {
		return nil, fillError(err, d, 0, nil)
	}
	if size%g != 0 {
		return nil, &MappingError{Device: d, Op: "reserve", Size: size, ReservationSize: size, Granularity: g, Err: ErrUnaligned}
	}
	base, err := s.vmm.reserve(d.ordinal, size, g)
	if err != nil {
		return nil, fillError(err, d, size, nil)
	}
	space, err := addrspace.New(base, size, g)
	if err != nil {
		// The driver's base is not aligned to the granularity it gave.
		_ = s.vmm.freeSpace(d.ordinal, base, size)
		return nil, fmt.Errorf("%w: %v: the driver reserved %d bytes at %#x: %w", ErrNotSupported, d, size, base, err)
	}
	// The reservation is made: the device is used from now on.
	if _, _, err := d.lookup(use); err != nil {
		_ = s.vmm.freeSpace(d.ordinal, base, size)
		return nil, err
	}
	fig := spacesOf(s, d.ordinal, true)
	fig.space.Add(size)
	fig.reservations.Add(1)
	return &Reservation{dev: d, cats: cats, cat: cat, space: space, maps: make(map[int64]*Buffer)}, nil
}

// Device returns the reservation's device.
func (r *Reservation) Device() Device { return r.dev }

// Base returns the reservation's first address: on a CUDA GPU a device
// address (a CUdeviceptr), on the CPU a host address. A mapping at offset
// o is at Base()+o.
func (r *Reservation) Base() uintptr { return r.space.Base() }

// Size returns the bytes of address space reserved.
func (r *Reservation) Size() int64 { return r.space.Size() }

// Granularity returns the granularity of its mappings' sizes and offsets:
// the device's [Device.MapGranularity] when it was reserved.
func (r *Reservation) Granularity() int64 { return r.space.Granularity() }

// Mapped returns the bytes mapped in it: the mappings that Map made and
// Unmap has not undone, those being unmapped included.
func (r *Reservation) Mapped() int64 { return r.space.Mapped() }

// Map maps size bytes of new physical memory at offset into the
// reservation, readable and writable by the device (on a CUDA GPU:
// cuMemCreate, cuMemMap, cuMemSetAccess; on the CPU the pages are
// committed, and the OS gives each memory, zeroed, at its first write:
// until then they are in [Usage].NotResident, as a buffer's pages are),
// and counts them as [Device.Alloc] counts a buffer: in Tracked, in the
// category of a [Category.Reserve], under the limits, in the history, the
// allocation sites (the caller of Map) and the leak watch.
//
// The offset and the size are multiples of [Reservation.Granularity], the
// size above 0, the range inside the reservation and overlapping no
// mapping: anything else is a [*MappingError] (matching [ErrUnaligned],
// [ErrOutOfRange] or [ErrOverlap]) that changes no figure and reaches no
// driver. A mapping refused by a limit or by the driver is an
// [*OutOfMemoryError], as an allocation's is, adding one to FailedAllocs.
func (r *Reservation) Map(offset, size int64) error {
	if r == nil {
		return fmt.Errorf("%w: Map of %d bytes on a nil *Reservation", ErrInvalidArgument, size)
	}
	if err := r.space.BeginMap(offset, size); err != nil {
		return r.refused(err)
	}
	b, _, err := r.dev.take(&request{size: size, cats: r.cats, cat: r.cat, from: fromMapping, ptr: r.space.Addr(offset)})
	if err != nil {
		_ = r.space.EndMap(offset, false) // the range it claimed goes back
		return err
	}
	r.mu.Lock()
	r.maps[offset] = b
	r.mu.Unlock()
	_ = r.space.EndMap(offset, true) // BeginMap claimed it: cannot fail
	r.figures().mapped.Add(size)
	return nil
}

// Unmap unmaps the mapping of size bytes at offset, which [Reservation.Map]
// made with that offset and size, and gives its physical memory back to the
// driver or the OS (on a CUDA GPU: cuMemUnmap, cuMemRelease; on the CPU
// the pages go back to the OS at once, out of the process's resident set),
// and uncounts it as [Buffer.Free] uncounts a buffer. A range that is not
// exactly one mapping is a [*MappingError] matching [ErrNotMapped] (or
// [ErrBusy] while another goroutine maps or unmaps it) that changes no
// figure and reaches no driver. Where the driver refuses, the mapping
// stays mapped and counted. Whether the driver has the memory back, a
// [ReturnCheck] shows.
func (r *Reservation) Unmap(offset, size int64) error {
	if r == nil {
		return fmt.Errorf("%w: Unmap of %d bytes on a nil *Reservation", ErrInvalidArgument, size)
	}
	if err := r.space.BeginUnmap(offset, size); err != nil {
		return r.refused(err)
	}
	r.mu.Lock()
	b := r.maps[offset]
	r.mu.Unlock()
	// The claim: the reservation holds b, so that neither a free nor the
	// leak watch's collector can have claimed it, and BeginUnmap gave this
	// unmap the mapping alone.
	if !b.claimState(stateFreed) || !claimMarks(&b.allocation, b.owner()) {
		_ = r.space.EndUnmap(offset, false)
		return fmt.Errorf("%w: the %d-byte mapping at offset %d on %v is being released elsewhere", ErrBusy, size, offset, r.dev)
	}
	t := tableOf(r.dev.kind)
	released, err := t.release(&b.allocation, t.records.Lookup(r.dev.ordinal), unmapNow, DefaultStream, b.owner())
	runtime.KeepAlive(b) // reachable until its leak cleanup is cancelled
	if !released {
		b.unclaim()
		_ = r.space.EndUnmap(offset, false) // the mapping stays
		return fillError(err, r.dev, size, nil)
	}
	r.mu.Lock()
	delete(r.maps, offset)
	r.mu.Unlock()
	_ = r.space.EndUnmap(offset, true) // BeginUnmap marked it: cannot fail
	if err != nil {
		return b.uncountFailed(err)
	}
	return nil
}

// Bytes returns the host's view of size bytes at offset, inside one
// mapping, where the host can address the device's memory (the CPU), or
// nil where it cannot (a CUDA GPU) or the range is not inside one mapping.
// The view is valid until the mapping is unmapped: a use after that
// faults.
func (r *Reservation) Bytes(offset, size int64) []byte {
	if r == nil || size <= 0 {
		return nil
	}
	m, ok := r.space.MappingAt(offset)
	if !ok || offset-m.Offset > m.Size-size {
		return nil
	}
	r.mu.Lock()
	b := r.maps[m.Offset]
	r.mu.Unlock()
	if b == nil {
		return nil // being mapped
	}
	host := b.mem.hostBytes(b.size)
	if host == nil {
		return nil
	}
	return host[offset-m.Offset : offset-m.Offset+size : offset-m.Offset+size]
}

// Release gives the reservation's address space back to the driver or the
// OS (cuMemAddressFree; munmap) and uncounts it from AddressSpace. Nothing
// may be mapped in it: a release with mappings left is a [*MappingError]
// matching [ErrMappingsLeft], and a second release one matching
// [ErrReservationReleased], each changing nothing. After a release every
// call of the reservation is refused with ErrReservationReleased.
func (r *Reservation) Release() error {
	if r == nil {
		return fmt.Errorf("%w: Release on a nil *Reservation", ErrInvalidArgument)
	}
	if err := r.space.Release(); err != nil {
		return r.refused(err)
	}
	t := tableOf(r.dev.kind)
	if err := t.vmm.freeSpace(r.dev.ordinal, r.space.Base(), r.space.Size()); err != nil {
		return wrapf(fillError(err, r.dev, 0, nil), "%v: the driver refused to free the reservation of %d bytes at %#x, which stays counted in AddressSpace and can no longer be mapped into", r.dev, r.space.Size(), r.space.Base())
	}
	f := r.figures()
	f.space.Sub(r.space.Size())
	f.reservations.Dec()
	return nil
}

// figures returns the device's figures of reservations.
func (r *Reservation) figures() *spaceFigures {
	return spacesOf(tableOf(r.dev.kind), r.dev.ordinal, true)
}

// refused is the error of a range that the reservation refused: its
// internal/addrspace refusal, as the package's [*MappingError].
func (r *Reservation) refused(err error) error {
	var e *addrspace.RangeError
	if !errors.As(err, &e) {
		return err
	}
	me := &MappingError{Device: r.dev, Op: e.Op, Offset: e.Range.Offset, Size: e.Range.Size,
		ReservationSize: e.ReservationSize, Granularity: e.Granularity,
		MappingOffset: e.Mapping.Offset, MappingSize: e.Mapping.Size, Left: e.Left}
	switch {
	case errors.Is(err, addrspace.ErrUnaligned):
		me.Err = ErrUnaligned
	case errors.Is(err, addrspace.ErrOutOfRange):
		me.Err = ErrOutOfRange
	case errors.Is(err, addrspace.ErrOverlap):
		me.Err = ErrOverlap
	case errors.Is(err, addrspace.ErrNotMapped):
		me.Err = ErrNotMapped
	case errors.Is(err, addrspace.ErrBusy):
		me.Err = ErrBusy
	case errors.Is(err, addrspace.ErrMapped):
		me.Err = ErrMappingsLeft
	case errors.Is(err, addrspace.ErrReleased):
		me.Err = ErrReservationReleased
	default:
		return err
	}
	if me.Op == "release" {
		me.Offset, me.Size = 0, e.ReservationSize
	}
	return me
}

// addressSpace returns the bytes of address space that d's reservations
// hold, and how many they are.
func (d Device) addressSpace() (bytes, reservations int64) {
	if f := spacesOf(tableOf(d.kind), d.ordinal, false); f != nil {
		return f.space.Load(), f.reservations.Load()
	}
	return 0, 0
}
