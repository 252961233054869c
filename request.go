package memtrack

import (
	// sync/atomic, not go.uber.org/atomic, for allocation.state alone: an
	// atomic.Uint32 of go.uber.org/atomic is aligned as a pointer, and
	// would make the allocation, and so every Buffer, 8 bytes larger
	// (TestBufferSize).
	"sync/atomic"
	"unsafe"
)

// What flows through the allocation and release paths: the request, and
// the allocation it makes, which a Buffer or a Tracked handle holds.

// source is where an allocation's memory comes from.
type source uint8

const (
	fromBackend source = iota // the backend allocates it now: Alloc
	fromPool                  // the backend allocates it in stream order from the device's memory pool: AllocAsync
	fromAddress               // the caller allocated it, at an address it gives: Track, TrackAddr
	fromGraph                 // a graph allocates it at each launch: AllocAsync on a stream that captures a CUDA graph
	fromMapping               // the backend maps physical memory at an address of a reservation: Reservation.Map
)

// allocation is one counted allocation as the paths know it: its size and
// memory, its device, where it came from, its category, and the marks the
// features put on it, which the core carries and never reads (hooks.go).
// A [Buffer] and a [Tracked] handle each hold theirs; a marker may keep a
// copy. It takes 56 bytes, so that a Buffer takes 64.
type allocation struct {
	size    int64
	mem     memory         // a Tracked handle's address is its mem.ptr
	mark    unsafe.Pointer // a hook's mark, or nil
	state   uint32         // atomic: the Buffer's or the Tracked handle's states
	ordinal int32          // the device, which locates the table and the record
	entry   uint32         // the device's marker's entry, or 0
	kind    Kind
	from    source
	cat     uint8 // its category in the ledger, 1-based; 0 for none
}

// marked reports whether a feature marked a.
func (a *allocation) marked() bool { return a.mark != nil || a.entry != 0 }

// fill describes the allocation that r asks of device d; fillAddress
// describes one at the address r gives (fromAddress).
func (a *allocation) fill(d Device, r *request) {
	a.size, a.ordinal, a.kind, a.from, a.cat = r.size, int32(d.ordinal), d.kind, r.from, r.cat
}

func (a *allocation) fillAddress(d Device, r *request) {
	a.fill(d, r)
	a.mem.ptr = r.ptr
}

// device returns the device of the allocation.
func (a *allocation) device() Device { return Device{kind: a.kind, ordinal: int(a.ordinal)} }

// request is what flows through the allocation path.
type request struct {
	size   int64
	cats   *categorySet // the categories of the device where the request is a category's; nil for none
	cat    uint8        // then the category in cats, 1-based
	from   source
	handle bool    // fromAddress: make a Tracked handle (Track), or count at the address only (TrackAddr)
	ptr    uintptr // fromAddress: the address, 0 for none; fromMapping: the address to map at
	stream Stream  // fromPool: the stream
	skip   int     // frames to leave out of the site above the exported function's caller
}

// The states of a Buffer and of a Tracked handle (allocation.state). A
// Buffer's Free moves it to stateFreed before it asks the backend, so that
// one compare-and-swap settles concurrent Frees, and moves it back if the
// backend fails. A handle's FreeWith moves it to stateFreeing while the
// caller's free runs, so that its address may be tracked again as soon as
// the memory is gone, and back to stateLive if the free fails.
//
// A graph's buffer (fromGraph) is in stateGraph from its capture, where no
// claim of the release path takes it (Buffer.releaseGraph frees it), until
// a free node of its own capture frees it (stateFreed).
const (
	stateLive uint32 = iota
	stateFreed
	stateFreeing
	stateGraph
)

// claimState moves a from live to next, and reports whether it was live.
func (a *allocation) claimState(next uint32) bool { return a.moveState(stateLive, next) }

// moveState moves a from state from to next, and reports whether it was in
// from.
func (a *allocation) moveState(from, next uint32) bool {
	return atomic.CompareAndSwapUint32(&a.state, from, next)
}

// loadState returns a's state.
func (a *allocation) loadState() uint32 { return atomic.LoadUint32(&a.state) }

// storeState sets a's state.
func (a *allocation) storeState(v uint32) { atomic.StoreUint32(&a.state, v) }
