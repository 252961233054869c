package memtrack

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/memtrack/memtrack/internal/addrindex"
	"github.com/memtrack/memtrack/tracker"
)

// Track counts size bytes that other code allocated on the device, with the
// accounting of [Device.Alloc]: the bytes held, live buffers, their peaks,
// the cumulative figures, the memory limit and, when enabled, the
// allocation site (the caller of Track) and the memory history. It allocates and frees nothing;
// release the count with [Tracked.Release] once the memory is freed, or
// free it through [Tracked.FreeWith].
//
// ptr is the memory's address on the device (a CUdeviceptr for CUDA, a
// host address for the CPU), which [Tracked.DevicePtr] returns and
// [Kind.TrackedAt] finds; 0 if unknown. An address is tracked at most once at a
// time per kind of device, since a process's device addresses are unique
// (CUDA's unified addressing): Track of an address already tracked and live
// fails with [ErrAlreadyTracked]. Do not track memory from [Device.Alloc]:
// it is counted already.
//
// Track fails with [ErrInvalidSize] for size <= 0 and with
// [ErrAlreadyTracked], changing no figure, and with an [*OutOfMemoryError]
// when the memory limit refuses it, adding one to FailedAllocs and nothing
// else. Bad input is refused first: an address tracked already fails with
// ErrAlreadyTracked whatever the limit. The limit can refuse Track, and so hold what a program allocates
// through other bindings too; it cannot stop memory that is allocated
// without being tracked.
func (d Device) Track(size int64, ptr uintptr) (*Tracked, error) {
	_, t, err := d.take(&request{size: size, from: fromAddress, handle: true, ptr: ptr})
	return t, err
}

// TrackAddr counts size bytes that other code allocated at address ptr on
// the device, as [Device.Track] does, without making a handle: the count
// lives in the address index only, until [Kind.UntrackAddr] of ptr ends it
// ([Kind.TrackedAt] makes a handle for it when asked). It is the path of a
// drop-in binding, which is given only an address to free (see package
// github.com/memtrack/memtrack/cu), and allocates nothing on the heap while
// allocation sites and the memory history are off. It fails as Track
// does, and with [ErrInvalidAddress] for ptr == 0.
func (d Device) TrackAddr(size int64, ptr uintptr) error {
	if size > 0 && ptr == 0 {
		return errAddressZero(d, size)
	}
	_, _, err := d.take(&request{size: size, from: fromAddress, ptr: ptr})
	return err
}

// TrackAddrSkip is [Device.TrackAddr] for a binding that wraps it: the
// allocation site it records leaves out skip frames above its caller, as
// [runtime.Caller] counts them, so that the site is the code that called
// the binding, not the binding. Skip 0 records the caller of TrackAddrSkip,
// as TrackAddr does; a wrapper called by the code to attribute passes 1,
// and 1 more for each frame of its own in between. A negative skip is an
// [ErrInvalidArgument] error.
func (d Device) TrackAddrSkip(skip int, size int64, ptr uintptr) error {
	if skip < 0 {
		return fmt.Errorf("%w: TrackAddrSkip of %d frames on %v", ErrInvalidArgument, skip, d)
	}
	if size > 0 && ptr == 0 {
		return errAddressZero(d, size)
	}
	_, _, err := d.take(&request{size: size, from: fromAddress, ptr: ptr, skip: skip})
	return err
}

// errAddressZero is the error of a TrackAddr of size bytes at address 0.
func errAddressZero(d Device, size int64) error {
	return fmt.Errorf("%w: TrackAddr of %d bytes on %v: address 0", ErrInvalidAddress, size, d)
}

// Tracked is memory that code other than this package allocated (another
// CUDA binding, a C library's workspace, host memory from cgo), counted on a
// device by [Device.Track] until [Tracked.Release] or [Tracked.FreeWith].
// Its methods are safe for concurrent use.
//
// Tracked is a type of its own, not a [Buffer], so that memory this package
// does not own can never be given to a backend's free: a Buffer's Free
// releases the memory, a Tracked handle only counts it, and the caller
// frees it with the binding that allocated it.
type Tracked struct {
	allocation                 // its address is mem.ptr, 0 for none
	rec        *tracker.Record // its device's record
}

// Release uncounts the tracked memory; it frees nothing. Call it when the
// memory has been, or is about to be, freed by the binding that allocated
// it. It fails with [ErrAlreadyReleased] on a handle already released (or being
// freed by FreeWith) and with [ErrNilTracked] on a nil handle, changing no
// figure.
func (t *Tracked) Release() error {
	if t == nil {
		return fmt.Errorf("%w: Release called on a nil *Tracked", ErrNilTracked)
	}
	_, err := t.release(nil)
	return err
}

// FreeWith frees the tracked memory with free, the caller's own release
// through the binding that allocated it, and then uncounts it, as
// [Buffer.Free] does with memory this package owns. If free fails, the
// memory stays counted and tracked, and its error is returned; FreeWith may
// be called again. While free runs, the handle is no longer live: a
// concurrent Release or FreeWith fails with [ErrAlreadyReleased], [Kind.TrackedAt]
// does not find it, and [Device.Track] may track its address anew (a
// driver may hand it out again the moment it is freed). It fails as Release
// does on a nil or released handle, without calling free.
func (t *Tracked) FreeWith(free func() error) error {
	if t == nil {
		return fmt.Errorf("%w: FreeWith called on a nil *Tracked", ErrNilTracked)
	}
	if free == nil {
		return fmt.Errorf("%w: FreeWith of %d tracked bytes on %v: nil function", ErrInvalidArgument, t.size, t.device())
	}
	_, err := t.release(free)
	return err
}

// release is the release path of a handle: FreeWith (freeWith), and
// Release where free is nil (releaseOnly). The claim moves the handle
// from live, to freeing while free runs (and back if it fails); then the
// handle leaves the address index, and the tail uncounts it. live reports
// whether the handle was live (if not, err is the ErrAlreadyReleased).
func (t *Tracked) release(free func() error) (live bool, err error) {
	how, claim := releaseOnly, stateFreed
	if free != nil {
		how, claim = freeWith, stateFreeing
	}
	if !t.claimState(claim) {
		return false, t.refuseRelease()
	}
	// A new Track of the address may have replaced the handle.
	s := tableOf(t.kind)
	if free == nil {
		if t.mem.ptr != 0 {
			s.unindex(t.mem.ptr, t, nil)
		}
	} else if err := t.freeWith(s, free); err != nil {
		return true, err
	}
	// Cannot fail: the handle's bytes are part of what the record holds.
	_, _ = s.release(&t.allocation, t.rec, how, DefaultStream, uintptr(unsafe.Pointer(&t.allocation)))
	runtime.KeepAlive(t) // reachable until its leak cleanup is cancelled
	return true, nil
}

// freeWith runs free, the caller's free of t's memory, with t out of the
// address index, and puts t back in it, and back to live, if free fails.
func (t *Tracked) freeWith(s *deviceTable, free func() error) error {
	var e addrEntry
	indexed := false
	if t.mem.ptr != 0 {
		_, indexed = s.unindex(t.mem.ptr, t, &e)
	}
	if err := free(); err != nil {
		if indexed {
			s.reindex(t.mem.ptr, e)
		}
		t.storeState(stateLive)
		return err
	}
	t.storeState(stateFreed)
	return nil
}

// refuseRelease says why a release refused t: it is released already.
func (t *Tracked) refuseRelease() error {
	return fmt.Errorf("%w: %d tracked bytes at %#x on %v were released already", ErrAlreadyReleased, t.size, t.mem.ptr, t.device())
}

// Size returns the bytes tracked (0 for a nil handle).
func (t *Tracked) Size() int64 {
	if t == nil {
		return 0
	}
	return t.size
}

// Device returns the device the memory is counted on (the zero Device for
// a nil handle).
func (t *Tracked) Device() Device {
	if t == nil {
		return Device{}
	}
	return t.device()
}

// DevicePtr returns the address given to [Device.Track], or 0 if none was
// given, for a nil handle and once the handle is released.
func (t *Tracked) DevicePtr() uintptr {
	if t == nil || t.loadState() == stateFreed {
		return 0
	}
	return t.mem.ptr
}

// Released reports whether the handle is released: true from the moment a
// [Tracked.Release] or [Tracked.FreeWith] begins, unless FreeWith's free
// then fails.
func (t *Tracked) Released() bool { return t != nil && t.loadState() != stateLive }

// newTracked returns the handle of the count at an address that r asks of
// device d, whose record is rec.
func newTracked(d Device, r *request, rec *tracker.Record) *Tracked {
	t := &Tracked{rec: rec}
	t.fillAddress(d, r)
	return t
}

// addrEntry is the count at one address: the handle, if one was made
// ([Device.Track], or [Kind.TrackedAt] of a count of [Device.TrackAddr]), and
// what uncounting it needs, a hook's mark included. An entry is made by
// Device.take alone, turned back into an allocation by
// addrEntry.allocation alone, and taken out of the index by
// deviceTable.unindex alone.
type addrEntry struct {
	h       *Tracked
	rec     *tracker.Record
	mark    unsafe.Pointer
	size    int64
	ordinal int32
}

// allocation returns the allocation that e counts at ptr on a device of
// kind k.
func (e *addrEntry) allocation(k Kind, ptr uintptr) allocation {
	return allocation{size: e.size, mem: memory{ptr: ptr}, mark: e.mark, ordinal: e.ordinal, kind: k, from: fromAddress}
}

// unindex takes the count at ptr out of the address index where it is
// h's (nil for a count without a handle), and, where e is not nil, copies
// its entry into *e; found reports whether a count is there, whose entry
// it copies where it is another's. A handle's release (Tracked.release)
// and Kind.UntrackAddr take it out before the memory is freed, so that the
// address may be tracked anew at once, and put it back (reindex) if the
// free fails.
func (s *deviceTable) unindex(ptr uintptr, h *Tracked, e *addrEntry) (found, removed bool) {
	sh := s.addrs.Shard(ptr)
	sh.Lock()
	if i, ok := sh.Lookup(ptr); ok {
		at := sh.At(i)
		if e != nil {
			*e = *at
		}
		found, removed = true, at.h == h
		if removed {
			sh.DeleteAt(i)
		}
	}
	sh.Unlock()
	return found, removed
}

// reindex puts e back at ptr after a free that failed, unless the address
// was tracked anew meanwhile.
func (s *deviceTable) reindex(ptr uintptr, e addrEntry) {
	sh := s.addrs.Shard(ptr)
	sh.Lock()
	if i, ok := sh.Lookup(ptr); !ok {
		sh.InsertAt(i, ptr, e)
	}
	sh.Unlock()
}

// claim returns the slot for a new count at ptr, as Lookup does, and fails
// with [ErrAlreadyTracked] if ptr is tracked and live. The shard is locked.
func claim(sh *addrindex.Shard[addrEntry], d Device, ptr uintptr) (int, error) {
	i, ok := sh.Lookup(ptr)
	if !ok {
		return i, nil
	}
	old := sh.At(i)
	if old.h != nil && old.h.loadState() != stateLive {
		return i, nil // being freed: the new count replaces it
	}
	return i, fmt.Errorf("%w: %#x on %v (%d bytes, tracked on %v)", ErrAlreadyTracked, ptr, d, old.size, Device{kind: d.kind, ordinal: int(old.ordinal)})
}

// UntrackAddr frees the memory tracked at address ptr on a device of kind
// k with free, the caller's own release through the binding that allocated
// it, and then uncounts it, as [Tracked.FreeWith] does for the handle that
// [Kind.TrackedAt] would return. It reports whether a live count was there: if
// not, it calls nothing and returns false and nil. If free fails, the
// memory stays counted and tracked, and free's error is returned. While
// free runs, the address is not tracked, as with FreeWith. free == nil
// uncounts without freeing, as [Tracked.Release] does. It starts no
// backend.
//
// UntrackAddr and [Kind.TrackedAt] are methods of the Kind, not of a
// Device, because an address is unique among the devices of a kind (CUDA's
// unified addressing) and a binding that frees by address is not told the
// device: cuMemFree takes only the pointer.
func (k Kind) UntrackAddr(ptr uintptr, free func() error) (tracked bool, err error) {
	s := tableOf(k)
	if s == nil || ptr == 0 {
		return false, nil
	}
	var e addrEntry
	found, removed := s.unindex(ptr, nil, &e)
	if !found {
		return false, nil
	}
	if !removed {
		// A handle is indexed: release through it. If it is not live, a
		// concurrent release was first.
		live, err := e.h.release(free)
		if !live {
			return false, nil
		}
		return true, err
	}
	how := releaseOnly
	if free != nil {
		how = freeWith
		if err := free(); err != nil {
			s.reindex(ptr, e)
			return true, err
		}
	}
	a := e.allocation(k, ptr)
	// Cannot fail: the count's bytes are part of what the record holds.
	_, _ = s.release(&a, e.rec, how, DefaultStream, 0)
	return true, nil
}

// TrackedAt returns the live handle that [Device.Track] counts at address
// ptr on a device of kind k, or nil if there is none. It is the lookup of a
// drop-in binding that is given only an address to free (see package
// github.com/memtrack/memtrack/cu). It starts no backend.
func (k Kind) TrackedAt(ptr uintptr) *Tracked {
	s := tableOf(k)
	if s == nil || ptr == 0 {
		return nil
	}
	sh := s.addrs.Shard(ptr)
	sh.Lock()
	var h *Tracked
	if i, ok := sh.Lookup(ptr); ok {
		e := sh.At(i)
		if e.h == nil {
			// Counted by TrackAddr: a handle takes the count over.
			e.h = &Tracked{allocation: e.allocation(k, ptr), rec: e.rec}
		}
		h = e.h
	}
	sh.Unlock()
	if h == nil || h.loadState() != stateLive {
		return nil
	}
	return h
}
