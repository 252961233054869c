package memtrack

import (
	"fmt"
	"runtime"

	"github.com/memtrack/memtrack/internal/addrindex"
	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// The states of a Tracked handle. FreeWith moves a handle to trackFreeing
// while the caller's free runs, so that its address may be tracked again as
// soon as the memory is gone, and back to trackLive if the free fails.
const (
	trackLive uint32 = iota
	trackFreeing
	trackReleased
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
	dev   Device
	size  int64
	ptr   uintptr
	rec   *tracker.Record
	addrs *addrindex.Index[addrEntry] // where ptr is indexed; nil for ptr == 0
	state atomic.Uint32
	wslot uint32          // its entry while its device is watched for leaks (deviceLeaks), or 0; in the padding
	site  *site           // where it was tracked, if recorded (siteRecorder)
	crec  *tracker.Record // its Category's record; nil for none
	cset  *categorySet    // the categories crec is one of; nil for none
	cat   uint8           // its category, 1-based; 0 for none
}

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
	return d.track(request{size: size}, ptr)
}

// track is Track and Category.Track: the allocation path of a [Tracked]
// handle.
func (d Device) track(r request, ptr uintptr) (*Tracked, error) {
	var a admitted
	var err error
	if r.size > 0 {
		// admit, inlined by hand, as Device.allocate does.
		if a.s, a.rec, err = d.resolve(); err == nil && r.cat.set != nil {
			a.crec = r.cat.recordOf()
		}
	} else {
		a, err = d.admit(&r, "tracked")
	}
	if err != nil {
		return nil, err
	}
	t := &Tracked{dev: d, size: r.size, ptr: ptr, rec: a.rec, crec: a.crec, cset: r.cat.set, cat: r.cat.idx}
	if ptr != 0 {
		t.addrs = &a.s.tracked
	}
	if err := d.count(a, &r, ptr, t); err != nil {
		return nil, err
	}
	return t, nil
}

// count is the rest of the allocation path of tracked memory, after admit:
// in place of the backend's allocation, it claims the address ptr (unless
// it is 0) in the device's index, then counts, runs the features and
// indexes the count at ptr, with handle t (nil for TrackAddr, which makes
// none). The address's shard stays locked from the claim until the count
// is indexed, so that a concurrent Track of the address sees it; a refusal
// is built once the shard is unlocked.
func (d Device) count(a admitted, r *request, ptr uintptr, t *Tracked) error {
	r.skip++ // count's own frame, which Device.allocate's path has not
	var sh *addrindex.Shard[addrEntry]
	var slot int
	if ptr != 0 {
		sh = a.s.tracked.Shard(ptr)
		sh.Lock()
		var err error
		if slot, err = claim(sh, d, ptr); err != nil {
			sh.Unlock()
			return err // bad input: nothing counted
		}
	}
	// The limits, after the bad input; the refusal is answered (and the
	// observers run) once the shard is unlocked.
	if a.limited() {
		if e := limitRefusal(a.rec, a.crec, r.size); e != nil {
			if sh != nil {
				sh.Unlock()
			}
			return d.refuse(a, r, refusal{oom: e})
		}
	}
	var byCat bool
	var err error
	if a.crec == nil {
		err = a.rec.Alloc(r.size)
	} else {
		byCat, err = a.commit(r)
	}
	if err != nil {
		if sh != nil {
			sh.Unlock()
		}
		return d.refuse(a, r, refusal{err: err, byCategory: byCat})
	}
	if a.s.held != nil {
		a.s.held.heldAlloc(d.ordinal, r.size, false)
	}
	var st *site
	if h := a.s.hooksOf(d.ordinal); h != nil {
		st = h.alloc(r, a.rec, a.crec)
		if t != nil {
			t.site = st
			if h.leaks != nil {
				watchTracked(h.leaks, a.s, t)
			}
		}
	}
	if sh != nil {
		sh.InsertAt(slot, ptr, addrEntry{h: t, rec: a.rec, site: st, size: r.size, ordinal: d.ordinal})
		sh.Unlock()
	}
	return nil
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
	return d.trackAddr(size, ptr, 0)
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
	return d.trackAddr(size, ptr, skip)
}

// trackAddr is TrackAddr and TrackAddrSkip, whose site leaves out skip
// frames above the exported function's caller.
func (d Device) trackAddr(size int64, ptr uintptr, skip int) error {
	if size <= 0 {
		return fmt.Errorf("%w: %d bytes tracked on %v", ErrInvalidSize, size, d)
	}
	if ptr == 0 {
		return fmt.Errorf("%w: TrackAddr of %d bytes on %v: address 0", ErrInvalidAddress, size, d)
	}
	r := request{size: size, skip: skip}
	var a admitted
	var err error
	a.s, a.rec, err = d.resolve() // admit, whose size check is done and which has no category to check
	if err != nil {
		return err
	}
	return d.count(a, &r, ptr, nil)
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
	if k >= numKinds || ptr == 0 {
		return false, nil
	}
	s := tables[k].p.Load()
	if s == nil {
		return false, nil
	}
	sh := s.tracked.Shard(ptr)
	sh.Lock()
	i, ok := sh.Lookup(ptr)
	if !ok {
		sh.Unlock()
		return false, nil
	}
	e := *sh.At(i)
	if e.h != nil {
		sh.Unlock()
		// A handle is indexed: free through it. If it is not live, a
		// concurrent release was first.
		live, err := e.h.freeWith(free)
		if !live {
			return false, nil
		}
		return true, err
	}
	sh.DeleteAt(i)
	sh.Unlock()
	if free != nil {
		if err := free(); err != nil {
			sh.Lock()
			if i, ok := sh.Lookup(ptr); !ok { // not tracked anew meanwhile
				sh.InsertAt(i, ptr, e)
			}
			sh.Unlock()
			return true, err
		}
	}
	e.uncount(k, 0, nil)
	return true, nil
}

// TrackedAt returns the live handle that [Device.Track] counts at address
// ptr on a device of kind k, or nil if there is none. It is the lookup of a
// drop-in binding that is given only an address to free (see package
// github.com/memtrack/memtrack/cu). It starts no backend.
func (k Kind) TrackedAt(ptr uintptr) *Tracked {
	if k >= numKinds || ptr == 0 {
		return nil
	}
	s := tables[k].p.Load()
	if s == nil {
		return nil
	}
	sh := s.tracked.Shard(ptr)
	sh.Lock()
	var h *Tracked
	if i, ok := sh.Lookup(ptr); ok {
		e := sh.At(i)
		if e.h == nil {
			// Counted by TrackAddr: a handle takes the count over.
			e.h = &Tracked{dev: Device{kind: k, ordinal: e.ordinal}, size: e.size, ptr: ptr, rec: e.rec, addrs: &s.tracked, site: e.site}
		}
		h = e.h
	}
	sh.Unlock()
	if h == nil || h.state.Load() != trackLive {
		return nil
	}
	return h
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
	_, err := t.freeWith(nil)
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
		return fmt.Errorf("%w: FreeWith of %d tracked bytes on %v: nil function", ErrInvalidArgument, t.size, t.dev)
	}
	_, err := t.freeWith(free)
	return err
}

// freeWith is FreeWith, and Release where free is nil; live reports
// whether the handle was live (if not, err is the ErrAlreadyReleased).
func (t *Tracked) freeWith(free func() error) (live bool, err error) {
	if free == nil {
		if !t.state.CompareAndSwap(trackLive, trackReleased) {
			return false, t.released()
		}
		t.uncount()
		unwatchTracked(t)
		runtime.KeepAlive(t) // reachable until its leak cleanup is cancelled
		return true, nil
	}
	if !t.state.CompareAndSwap(trackLive, trackFreeing) {
		return false, t.released()
	}
	if err := free(); err != nil {
		t.state.Store(trackLive)
		return true, err
	}
	t.state.Store(trackReleased)
	t.uncount()
	unwatchTracked(t)
	runtime.KeepAlive(t)
	return true, nil
}

func (t *Tracked) released() error {
	return fmt.Errorf("%w: %d tracked bytes at %#x on %v were released already", ErrAlreadyReleased, t.size, t.ptr, t.dev)
}

// uncount removes the handle from the address index and the figures.
func (t *Tracked) uncount() {
	if t.addrs != nil {
		sh := t.addrs.Shard(t.ptr)
		sh.Lock()
		// A new Track of the address may have replaced the handle.
		if i, ok := sh.Lookup(t.ptr); ok && sh.At(i).h == t {
			sh.DeleteAt(i)
		}
		sh.Unlock()
	}
	addrEntry{rec: t.rec, site: t.site, size: t.size, ordinal: t.dev.ordinal}.uncount(t.dev.kind, t.cat, t.cset)
}

// uncount takes the entry's bytes from the figures of its device, of kind
// k, and, where cs is not nil, of its handle's category cat among cs.
func (e addrEntry) uncount(k Kind, cat uint8, cs *categorySet) {
	// Cannot fail: the entry's bytes are part of what the record holds.
	_ = tables[k].p.Load().uncount(e.rec, cs, e.size, e.site, 0, e.ordinal, cat, releaseHeld)
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
	return t.dev
}

// DevicePtr returns the address given to [Device.Track], or 0 if none was
// given, for a nil handle and once the handle is released.
func (t *Tracked) DevicePtr() uintptr {
	if t == nil || t.state.Load() == trackReleased {
		return 0
	}
	return t.ptr
}

// Released reports whether the handle is released: true from the moment a
// [Tracked.Release] or [Tracked.FreeWith] begins, unless FreeWith's free
// then fails.
func (t *Tracked) Released() bool { return t != nil && t.state.Load() != trackLive }

// addrEntry is the count at one address: the handle, if one was made
// ([Device.Track], or [Kind.TrackedAt] of a count of [Device.TrackAddr]), and
// what uncounting it needs.
type addrEntry struct {
	h       *Tracked
	rec     *tracker.Record
	site    *site
	size    int64
	ordinal int
}

// claim returns the slot for a new count at ptr, as Lookup does, and fails
// with [ErrAlreadyTracked] if ptr is tracked and live. The shard is locked.
func claim(sh *addrindex.Shard[addrEntry], d Device, ptr uintptr) (int, error) {
	i, ok := sh.Lookup(ptr)
	if !ok {
		return i, nil
	}
	old := sh.At(i)
	if old.h != nil && old.h.state.Load() != trackLive {
		return i, nil // being freed: the new count replaces it
	}
	return i, fmt.Errorf("%w: %#x on %v (%d bytes, tracked on %v)", ErrAlreadyTracked, ptr, d, old.size, Device{kind: d.kind, ordinal: old.ordinal})
}
