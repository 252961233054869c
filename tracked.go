package memtrack

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/memtrack/memtrack/internal/addrindex"
	"github.com/memtrack/memtrack/tracker"
)

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
	if free != nil {
		if err := free(); err != nil {
			t.storeState(stateLive)
			return true, err
		}
		t.storeState(stateFreed)
	}
	s := tableOf(t.kind)
	if t.mem.ptr != 0 {
		sh := s.addrs.Shard(t.mem.ptr)
		sh.Lock()
		// A new Track of the address may have replaced the handle.
		if i, ok := sh.Lookup(t.mem.ptr); ok && sh.At(i).h == t {
			sh.DeleteAt(i)
		}
		sh.Unlock()
	}
	// Cannot fail: the handle's bytes are part of what the record holds.
	_, _ = s.release(&t.allocation, t.rec, how, DefaultStream, uintptr(unsafe.Pointer(&t.allocation)))
	runtime.KeepAlive(t) // reachable until its leak cleanup is cancelled
	return true, nil
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
// what uncounting it needs.
type addrEntry struct {
	h       *Tracked
	rec     *tracker.Record
	site    *site
	size    int64
	ordinal int32
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
