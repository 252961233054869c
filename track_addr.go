package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/addrindex"
	"github.com/memtrack/memtrack/tracker"
)

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
	sh := s.addrs.Shard(ptr)
	sh.Lock()
	i, ok := sh.Lookup(ptr)
	if !ok {
		sh.Unlock()
		return false, nil
	}
	e := *sh.At(i)
	if e.h != nil {
		sh.Unlock()
		// A handle is indexed: release through it. If it is not live, a
		// concurrent release was first.
		live, err := e.h.release(free)
		if !live {
			return false, nil
		}
		return true, err
	}
	// The claim of a count without a handle: it leaves the index.
	sh.DeleteAt(i)
	sh.Unlock()
	how := releaseOnly
	if free != nil {
		how = freeWith
		if err := free(); err != nil {
			sh.Lock()
			if i, ok := sh.Lookup(ptr); !ok { // not tracked anew meanwhile
				sh.InsertAt(i, ptr, e)
			}
			sh.Unlock()
			return true, err
		}
	}
	a := allocation{size: e.size, site: e.site, ordinal: e.ordinal, kind: k, from: fromAddress}
	a.mem.ptr = ptr
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
			e.h = &Tracked{rec: e.rec}
			e.h.size, e.h.mem.ptr, e.h.site, e.h.ordinal, e.h.kind, e.h.from = e.size, ptr, e.site, e.ordinal, k, fromAddress
		}
		h = e.h
	}
	sh.Unlock()
	if h == nil || h.loadState() != stateLive {
		return nil
	}
	return h
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
