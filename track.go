package memtrack

import (
	"fmt"
	"sync"

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
	addrs *addrIndex // where ptr is indexed; nil for ptr == 0
	state atomic.Uint32
	site  *site // where it was tracked, if recorded (sites.go)
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
// [TrackedAt] finds; 0 if unknown. An address is tracked at most once at a
// time per kind of device, since a process's device addresses are unique
// (CUDA's unified addressing): Track of an address already tracked and live
// fails with [ErrAlreadyTracked]. Do not track memory from [Device.Alloc]:
// it is counted already.
//
// Track fails with [ErrInvalidSize] for size <= 0 and with
// [ErrAlreadyTracked], changing no figure, and with an [*OutOfMemoryError]
// when the memory limit refuses it, adding one to FailedAllocs and nothing
// else. The limit can refuse Track, and so hold what a program allocates
// through other bindings too; it cannot stop memory that is allocated
// without being tracked.
func (d Device) Track(size int64, ptr uintptr) (*Tracked, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes tracked on %v", ErrInvalidSize, size, d)
	}
	s, rec, err := d.resolve()
	if err != nil {
		return nil, err
	}
	t := &Tracked{dev: d, size: size, ptr: ptr, rec: rec}
	var sh *addrShard
	if ptr != 0 {
		t.addrs = &s.tracked
		sh = t.addrs.shard(ptr)
		// The shard stays locked until the handle is counted and indexed,
		// so that a concurrent Track of the address sees it.
		sh.mu.Lock()
		if old := sh.m[ptr]; old != nil && old.state.Load() == trackLive {
			sh.mu.Unlock()
			return nil, fmt.Errorf("%w: %#x on %v (%d bytes, tracked on %v)", ErrAlreadyTracked, ptr, d, old.size, old.dev)
		}
	}
	if err := rec.Alloc(size); err != nil {
		if sh != nil {
			sh.mu.Unlock()
		}
		// The record counted the failure.
		tables[d.kind].history.refused(d.ordinal, size, rec, err) // see history.go
		return nil, &OutOfMemoryError{Device: d, Requested: size, Current: rec.Current(), Limit: rec.Limit(), Reason: err.Error()}
	}
	sideAlloc(d, size) // the device-side figure (cuda_stream.go)
	if sr := s.sites.lookup(d.ordinal); sr != nil {
		t.site = sr.alloc(size) // see sites.go: the first frame is Track's caller
	}
	if h := tables[d.kind].history.lookup(d.ordinal); h != nil {
		h.alloc(size, t.site, rec) // see history.go
	}
	if sh != nil {
		if sh.m == nil {
			sh.m = make(map[uintptr]*Tracked)
		}
		sh.m[ptr] = t
		sh.mu.Unlock()
	}
	return t, nil
}

// TrackedAt returns the live handle that [Device.Track] counts at address
// ptr on a device of kind k, or nil if there is none. It is the lookup of a
// drop-in binding that is given only an address to free (see package
// github.com/memtrack/memtrack/cu). It starts no backend.
func TrackedAt(k Kind, ptr uintptr) *Tracked {
	if k >= numKinds || ptr == 0 {
		return nil
	}
	s := tables[k].p.Load()
	if s == nil {
		return nil
	}
	sh := s.tracked.shard(ptr)
	sh.mu.Lock()
	t := sh.m[ptr]
	sh.mu.Unlock()
	if t == nil || t.state.Load() != trackLive {
		return nil
	}
	return t
}

// Release uncounts the tracked memory; it frees nothing. Call it when the
// memory has been, or is about to be, freed by the binding that allocated
// it. It fails with [ErrDoubleFree] on a handle already released (or being
// freed by FreeWith) and with [ErrNilBuffer] on a nil handle, changing no
// figure.
func (t *Tracked) Release() error {
	if t == nil {
		return fmt.Errorf("%w: Release called on a nil *Tracked", ErrNilBuffer)
	}
	if !t.state.CompareAndSwap(trackLive, trackReleased) {
		return t.released()
	}
	t.uncount()
	return nil
}

// FreeWith frees the tracked memory with free, the caller's own release
// through the binding that allocated it, and then uncounts it, as
// [Buffer.Free] does with memory this package owns. If free fails, the
// memory stays counted and tracked, and its error is returned; FreeWith may
// be called again. While free runs, the handle is no longer live: a
// concurrent Release or FreeWith fails with [ErrDoubleFree], [TrackedAt]
// does not find it, and [Device.Track] may track its address anew (a
// driver may hand it out again the moment it is freed). It fails as Release
// does on a nil or released handle, without calling free.
func (t *Tracked) FreeWith(free func() error) error {
	if t == nil {
		return fmt.Errorf("%w: FreeWith called on a nil *Tracked", ErrNilBuffer)
	}
	if free == nil {
		return fmt.Errorf("%w: FreeWith of %d tracked bytes on %v: nil function", ErrInvalidArgument, t.size, t.dev)
	}
	if !t.state.CompareAndSwap(trackLive, trackFreeing) {
		return t.released()
	}
	if err := free(); err != nil {
		t.state.Store(trackLive)
		return err
	}
	t.state.Store(trackReleased)
	t.uncount()
	return nil
}

func (t *Tracked) released() error {
	return fmt.Errorf("%w: %d tracked bytes at %#x on %v were released already", ErrDoubleFree, t.size, t.ptr, t.dev)
}

// uncount removes the handle from the address index and the figures.
func (t *Tracked) uncount() {
	if t.addrs != nil {
		sh := t.addrs.shard(t.ptr)
		sh.mu.Lock()
		if sh.m[t.ptr] == t { // a new Track of the address may have replaced it
			delete(sh.m, t.ptr)
		}
		sh.mu.Unlock()
	}
	// Cannot fail: the handle's bytes are part of what the record holds.
	_ = t.rec.Free(t.size)
	sideFree(t.dev, t.size) // the device-side figure (cuda_stream.go)
	if t.site != nil {
		t.site.free(t.size)
	}
	if h := tables[t.dev.kind].history.lookup(t.dev.ordinal); h != nil {
		h.free(t.size, t.site, t.rec) // see history.go
	}
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

// addrIndex maps the addresses of one kind's tracked handles to the
// handles, in shards chosen by address bits, so that tracking and freeing at
// different addresses rarely meet on a lock.
type addrIndex struct {
	shards [addrShards]addrShard
}

const addrShardBits = 6

const addrShards = 1 << addrShardBits

type addrShard struct {
	mu sync.Mutex
	m  map[uintptr]*Tracked
	_  [cacheLinePad]byte
}

// cacheLinePad pads a shard (a mutex and a map pointer) to 64 bytes.
const cacheLinePad = 64 - 16

func (x *addrIndex) shard(ptr uintptr) *addrShard {
	// Allocations are aligned (256 bytes and more for CUDA, 16 for malloc):
	// a Fibonacci hash of the address spreads them over the shards.
	h := uint64(ptr) * 0x9e3779b97f4a7c15
	return &x.shards[h>>(64-addrShardBits)]
}
