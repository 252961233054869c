package memtrack

import (
	"fmt"
	"unsafe"

	"github.com/memtrack/memtrack/internal/addrindex"
	"github.com/memtrack/memtrack/internal/captures"
	"github.com/memtrack/memtrack/tracker"
)

// The allocation path. Every way memory is counted (Device.Alloc,
// Category.Alloc, Device.AllocAsync, Category.AllocAsync, Device.Track,
// Category.Track, Device.TrackAddr, Device.TrackAddrSkip) runs
// Device.take, which takes these steps in this order:
//
//  1. bad input is refused, changing nothing: the size, the device, the
//     category (the exported functions refuse the zero Category), the
//     stream of a stream-ordered allocation, an address tracked already;
//  2. the limits of the ledger (the category's, then the device's) are
//     read, before any memory is asked for, so that a request over one
//     costs no device memory;
//  3. the memory is acquired, from one of four sources: the backend
//     allocates it now (fromBackend), or in stream order (fromPool), or
//     maps it at an address of a reservation (fromMapping), or the caller
//     allocated it, and its address is claimed in the device's index
//     (fromAddress); a stream-ordered allocation on a stream that
//     captures a CUDA graph is the graph's (fromGraph), which each launch
//     of the graph makes: its capture counts it (Device.captured), and
//     the steps below do not, since the host holds nothing of it between
//     launches;
//  4. the ledger counts it: the device's record, and, as one operation
//     with it, the category's (ledger.count);
//  5. the device-side figure counts it (a backend's capability,
//     deviceTable.held), a stream-ordered allocation less the bytes of
//     frees pending on its stream that it takes over, of those counted
//     before step 3 asked the backend (heldOrder);
//  6. the hooks of the features that are on run (hooks.allocated), one
//     atomic load while every feature is off.
//
// Steps 2 to 6 are the tail that every source runs; a refusal at steps 2
// to 4 goes through Device.refuse. The release takes one path back,
// deviceTable.release.

// Alloc allocates size bytes on the device and counts them. It fails with
// [ErrInvalidSize] for size <= 0 (counting nothing) and with an
// [*OutOfMemoryError] when the memory limit or the device refuses it (adding
// one to FailedAllocs and nothing else). Free the buffer with [Buffer.Free].
func (d Device) Alloc(size int64) (*Buffer, error) {
	b, _, err := d.take(&request{size: size})
	return b, err
}

// take is the allocation path (see above). It returns the Buffer of an
// allocation from the backend, and the handle of a Track, or neither for
// a TrackAddr. The exported functions call it directly, so that the site
// of every allocation is as many frames above hooks.allocated.
func (d Device) take(r *request) (*Buffer, *Tracked, error) {
	if r.size <= 0 {
		return nil, nil, d.badSize(r)
	}
	var x sourceState
	var s *deviceTable
	var rec *tracker.Record
	var err error
	if r.from == fromBackend {
		s, rec, err = d.lookup(use)
	} else {
		s, rec, err = x.prepare(d, r)
	}
	if err != nil {
		return nil, nil, err
	}
	l := ledger{rec: rec}
	if r.cats != nil {
		l.inCategory(r.cats, r.cat)
	}
	if l.limited() {
		if e := l.limitRefusal(r.size); e != nil {
			x.unlock()
			if r.from == fromPool {
				// The stream is bad input, refused before a failure is
				// counted; and no limit is on a graph's allocation, which
				// is not tracked: on a capturing stream it goes on.
				if b, err := d.takeInCapture(s, r); b != nil || err != nil {
					return b, nil, err
				}
			}
			return nil, nil, d.refuse(s, &l, r, refusal{oom: e})
		}
	}
	// The acquisition. a is the allocation the path fills: a Buffer's or
	// a Tracked handle's; a count at an address only has none unless a
	// hook needs one.
	var b *Buffer
	var t *Tracked
	var a *allocation
	var at uint64 // fromPool: the device-side figure's order, before the allocation
	if r.from == fromAddress {
		if r.handle {
			t = newTracked(d, r, rec)
			a = &t.allocation
		}
	} else {
		// The backend writes straight into the buffer (see backend). A
		// mapping is never inline: it takes whole pages at least.
		if s.inline && r.size <= inlineMax {
			b = newInlineBuffer(r.size)
		} else {
			b = new(Buffer)
		}
		if r.from == fromBackend {
			err = s.b.alloc(d.ordinal, r.size, &b.mem)
		} else if r.from == fromMapping {
			err = s.vmm.mapAt(d.ordinal, r.ptr, r.size, &b.mem)
		} else {
			var capture uint64
			if s.held != nil {
				at = s.held.heldOrder(d.ordinal) // the frees counted before the allocation
			}
			capture, err = s.stream.allocAsync(d.ordinal, r.size, r.stream, &b.mem)
			if u, ok := err.(uncounted); ok {
				return nil, nil, d.invalidatedBy(s, r, u.err) // bad input, or nothing asked of the device: nothing counted
			}
			if capture != 0 {
				return d.captured(s, r, b.mem, capture), nil, nil // a graph's allocation (graphs.go)
			}
		}
		if err != nil {
			return nil, nil, d.refuse(s, &l, r, refusal{err: err, byBackend: true})
		}
		b.self = b
		a = &b.allocation
		a.fill(d, r)
	}
	// The count: the device's record alone where there is no category.
	var byCat bool
	if l.crec == nil {
		err = rec.Alloc(r.size)
	} else {
		byCat, err = l.count(r.size)
	}
	if err != nil {
		x.unlock()
		// The memory goes back before the report reads the device and the
		// observers run, so that neither sees it (cuMemFree takes the
		// memory of a pool back at once).
		f := refusal{err: err, byCategory: byCat}
		if b != nil {
			f.mem = &b.mem
		}
		return nil, nil, d.refuse(s, &l, r, f)
	}
	if s.held != nil {
		s.held.heldAdd(d.ordinal, r.size, r.stream, at, r.from == fromPool)
	}
	if h := s.hooksOf(d.ordinal); h != nil {
		if a == nil {
			// A count at an address only: an allocation for the hooks,
			// on the heap while a hook is on only.
			a = new(allocation)
			a.fillAddress(d, r)
		}
		h.allocated(a, l, r.stream, r.skip, r.handle)
	}
	if x.sh != nil {
		// The count is indexed at the address that prepare claimed, with
		// its handle (nil for TrackAddr) and a hook's mark (nil where no
		// hook ran), and the shard unlocked.
		e := addrEntry{h: t, rec: rec, size: r.size, ordinal: int32(d.ordinal)}
		if a != nil {
			e.mark = a.mark
		}
		x.sh.InsertAt(x.slot, r.ptr, e)
		x.sh.Unlock()
	}
	return b, t, nil
}

// sourceState is what the path holds of an address it claims
// (fromAddress): the locked shard of the address index and the slot
// claimed in it.
type sourceState struct {
	sh   *addrindex.Shard[addrEntry]
	slot int
}

// prepare is the first step of the path for a source other than the
// backend's allocation now: it refuses the device where it has no memory
// pools (fromPool, whose allocator is then deviceTable.stream), looks the
// device up as Device.lookup does, and claims the address (fromAddress),
// refusing one tracked already. The address's shard stays locked from the
// claim until the count is indexed, so that a concurrent Track of the
// address sees it; a refusal is built once it is unlocked
// (sourceState.unlock).
func (x *sourceState) prepare(d Device, r *request) (*deviceTable, *tracker.Record, error) {
	if r.from == fromPool {
		if err := d.streamsSupported(); err != nil {
			return nil, nil, err
		}
	}
	s, rec, err := d.lookup(use)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case r.from == fromPool:
		if _, err = s.streams(d); err != nil {
			return nil, nil, err
		}
	case r.from == fromMapping:
		// The reservation checked the range (internal/addrspace); nothing
		// is claimed in the address index.
	case r.ptr != 0:
		sh := s.addrs.Shard(r.ptr)
		sh.Lock()
		if x.slot, err = claim(sh, d, r.ptr); err != nil {
			sh.Unlock()
			return nil, nil, err
		}
		x.sh = sh
	}
	return s, rec, nil
}

// unlock unlocks the address's shard, if prepare locked it, where the
// request is refused.
func (x *sourceState) unlock() {
	if x.sh != nil {
		x.sh.Unlock()
		x.sh = nil
	}
}

// badSize is the error of a request of a size <= 0.
func (d Device) badSize(r *request) error {
	what := "requested"
	if r.from == fromAddress {
		what = "tracked"
	}
	return fmt.Errorf("%w: %d bytes %s on %v", ErrInvalidSize, r.size, what, d)
}

// refusal says what refused a request: a limit (oom, which
// ledger.limitRefusal built), the backend (byBackend), else the ledger's
// records, the category's (byCategory) or the device's; err is the
// refusal. mem is the
// memory the backend allocated, which goes back, or nil.
type refusal struct {
	oom        *OutOfMemoryError
	err        error
	byBackend  bool
	byCategory bool
	mem        *memory
}

// refuse is the builder of every refusal of the allocation path: it counts
// what refusal f says is not counted yet (ledger.countFailure), runs the
// hooks (which record it in the history), gives back memory the backend
// allocated, builds the error and runs the report and the observers
// (Device.outOfMemory).
func (d Device) refuse(s *deviceTable, l *ledger, r *request, f refusal) error {
	err := f.err
	if f.byBackend {
		err = fillError(err, d, r.size, l.rec)
	}
	if h := s.hooksOf(d.ordinal); h != nil {
		h.refused(*r, *l, err)
	}
	var oom *OutOfMemoryError
	switch {
	case f.oom != nil:
		l.countFailure()
		oom = f.oom
	case f.byBackend:
		l.countFailure()
		var ok bool
		if oom, ok = err.(*OutOfMemoryError); !ok {
			return err
		}
	default:
		oom = l.refusal(err, f.byCategory, d, r.size)
	}
	var ferr error
	if f.mem != nil {
		if r.from == fromMapping {
			ferr = s.vmm.unmap(d.ordinal, r.size, f.mem)
		} else {
			ferr = s.b.free(d.ordinal, r.size, f.mem)
		}
		ferr = fillError(ferr, d, r.size, nil)
	}
	d.outOfMemory(s, r, l, oom)
	if ferr != nil {
		return fmt.Errorf("%w; releasing the memory also failed: %w", oom, ferr)
	}
	return oom
}

// graphBuffer is a graph's buffer: the Buffer that AllocAsync returns on a
// capturing stream, with the capture it belongs to.
type graphBuffer struct {
	Buffer
	capture *captures.Record
}

// graphOf returns the graphBuffer of b, a buffer whose source is
// fromGraph: Device.captured made it as the first field of one.
func graphOf(b *Buffer) *graphBuffer { return (*graphBuffer)(unsafe.Pointer(b)) }

// captured is the tail of the allocation path for a graph's allocation:
// the stream-ordered allocation that r asked for, which the backend made in
// capture id at memory m. The capture counts its bytes, which the driver
// rounds as a graph's, not one by one (Capture.Need); the ledger, the
// device-side figure and the hooks do not, since the host holds nothing of
// it between the graph's launches.
func (d Device) captured(s *deviceTable, r *request, m memory, id uint64) *Buffer {
	c := capturesOf(s, d.ordinal).AllocNode(id, uintptr(r.stream), r.size)
	g := &graphBuffer{capture: c}
	g.fill(d, r)
	g.mem, g.from, g.cat, g.state = m, fromGraph, 0, stateGraph
	g.self = &g.Buffer
	return &g.Buffer
}

// takeInCapture is the allocation path of a stream-ordered request that a
// limit refused: where the stream captures a graph, the graph's allocation
// (no limit is on it: it is not tracked); where the stream is bad input,
// its error. It returns neither where the stream is not capturing, and the
// limit's refusal stands.
func (d Device) takeInCapture(s *deviceTable, r *request) (*Buffer, error) {
	var m memory
	id, err := s.stream.allocInCapture(d.ordinal, r.size, r.stream, &m)
	if err != nil {
		if u, ok := err.(uncounted); ok {
			return nil, d.invalidatedBy(s, r, u.err)
		}
		return nil, fillError(err, d, r.size, nil)
	}
	if id == 0 {
		return nil, nil
	}
	return d.captured(s, r, m, id), nil
}

// invalidatedBy returns err, the error of stream-ordered request r that
// counted nothing; where it is an allocation node that the driver refused
// in a capture it then invalidated, the capture's record says so, and the
// error names the capture.
func (d Device) invalidatedBy(s *deviceTable, r *request, err error) error {
	e, ok := err.(*invalidatedIn)
	if !ok {
		return fillError(err, d, r.size, nil)
	}
	capturesOf(s, d.ordinal).Invalidated(e.id, uintptr(r.stream))
	return wrapf(fillError(e.err, d, r.size, nil), "allocation node in CUDA graph capture %d on %v, refused; the driver invalidated the capture, which ends with no graph", e.id, d)
}

// capturesSlot is the slot of a device's CUDA graph captures in its
// state (deviceTable.stateOf), which the graph source counts in.
const capturesSlot = 5

// capturesOf returns the captures of device ordinal of s, which is in use,
// making them on first use.
func capturesOf(s *deviceTable, ordinal int) *captures.Set {
	return slotOf(s, ordinal, capturesSlot, func() *captures.Set { return captures.New(MaxCaptures) })
}

// graphOutliving returns the Outliving of every capture counted on device
// d, but those known invalidated (captures.Set.Outliving): what each
// capture's outliving allocations may pin, in whole chunks of the device's
// graph memory.
func (s *deviceTable) graphOutliving(d Device) (int64, error) {
	c := slotOf[captures.Set](s, d.ordinal, capturesSlot, nil)
	if c == nil {
		return 0, nil
	}
	chunk, err := s.graphChunk(d, c.Outliving(1))
	if err != nil {
		return 0, err
	}
	return c.Outliving(chunk), nil
}

// graphChunk returns the chunk in which the driver reserves device d's
// graph memory (streamBackend.graphChunk), where bytes of d's captures
// need rounding; 1, which rounds nothing, where bytes is 0, so that no
// probe runs for captures without an allocation.
func (s *deviceTable) graphChunk(d Device, bytes int64) (int64, error) {
	if bytes <= 0 {
		return 1, nil
	}
	chunk, _, err := s.stream.graphChunk(d.ordinal)
	return chunk, fillError(err, d, 0, nil)
}
