//go:build cuda

package memtrack

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync) on each
// device's current memory pool, and the device-side figure: the bytes the
// device holds for this package's buffers, in which a buffer freed with
// FreeAsync stays until its stream has executed the free. Each call is one
// cgo call of internal/cudadrv, which makes the stream's context current,
// operates and restores the thread's context, so that the goroutine need
// not be locked to its thread.

// FreeAsync learns that its stream has executed the free by an event
// recorded after it (cuEventRecord); the figures are read after querying the
// pending events (cuEventQuery), as PyTorch's and CuPy's allocators learn of
// their frees. A query that fails (a context error: nothing will run on the
// device again) retires the free too. A host function enqueued after the
// free (cuLaunchHostFunc) would cost more, as the driver's reference says: it
// blocks the work enqueued after it on its stream, host functions of
// different streams may be serialized, and none is called after a context
// error, so that a free behind a kernel fault would stay in the device-side
// figure.
//
// An event captures all the work enqueued on its stream before it
// (cuEventRecord), so where a stream has reached the event after one free,
// it has executed every free enqueued on it before: a reading queries each
// stream's newest pending event first, and one answer retires all the
// stream's frees; where the stream has not reached it, bisection finds the
// first free not executed. Each free still needs an event of its own: the
// program enqueues its own work between two frees, which memtrack cannot
// see, so that only an event right after a free says when that free ran.

// deviceSide is the device-side figure of one CUDA device: what the device
// holds for this package's buffers, with its peak. It counts every buffer
// from the allocation's return; Free uncounts at its return, FreeAsync once
// the stream has executed the free.
type deviceSide struct {
	held   tracker.Counter
	pooled atomic.Int64 // the part of held that stream-ordered buffers take

	// pending holds the frees awaiting their events that no reap has taken
	// yet: pushed by FreeAsync, taken whole by reap (so no node is ever
	// popped alone, and a stack needs no lock).
	pending  atomic.Pointer[retireNode]
	npending atomic.Int64 // the frees awaiting their events: in pending, or in waiting
	reapAt   atomic.Int64 // FreeAsync reaps at this many pending (at least pendingBound), set by reap

	// reapMu lets one reap run at a time, and guards what the reaps keep:
	// waiting, the frees taken from pending whose streams had not reached
	// their events, by stream and in each stream's order, and the events
	// of the queries.
	reapMu  sync.Mutex
	waiting []*retireNode
	queries cudadrv.StreamEvents

	spareMu sync.Mutex
	spare   []*retireNode // frees retired, with their events, reached, for reuse

	// pools holds the driver's answer to whether the device has memory
	// pools, once it gave one: nil where it has, the error that says so
	// where it has not.
	pools atomic.Pointer[error]
}

// retireNode is one free awaiting its event.
type retireNode struct {
	next    *retireNode
	event   cudadrv.Event
	stream  streamKey
	seq     uint64 // the event's number, which rises along its stream's order
	size    int64
	foreign bool // the event is of another context than the device's primary one
}

// streamKey names the stream of a free: its handle, in the stream's
// context (a default stream's handle names one stream per context), the
// legacy default stream by 0 whichever of its two handles named it. A
// handle names one stream at a time for the frees pending on it: a
// destroyed stream's resources are released once the device has completed
// its work (cuStreamDestroy), so that a stream created later with the same
// handle finds every event of the old one reached.
type streamKey struct {
	ctx    cuContext
	handle uintptr
}

// ordered reports whether the events of the stream k names are reached in
// the order of their numbers: not those of the per-thread default stream,
// whose handle names another stream on each thread.
func (k streamKey) ordered() bool { return k.handle != cudadrv.StreamPerThread }

func keyOf(ctx cuContext, stream Stream) streamKey {
	h := uintptr(stream)
	if h == cudadrv.StreamLegacy {
		h = 0
	}
	return streamKey{ctx, h}
}

// byStream orders frees by stream, then in each stream's order.
func byStream(a, b *retireNode) int {
	if c := cmp.Compare(a.stream.ctx, b.stream.ctx); c != 0 {
		return c
	}
	if c := cmp.Compare(a.stream.handle, b.stream.handle); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// side returns the device-side figure of device ordinal, or nil if there
// is no such device.
func (b *cudaBackend) side(ordinal int) *deviceSide {
	if b.init() != nil || ordinal < 0 || ordinal >= len(b.sides) {
		return nil
	}
	return &b.sides[ordinal]
}

// newSides makes the device-side figures of n devices, as the backend
// initialises.
func newSides(n int) []deviceSide { return make([]deviceSide, n) }

// add adds size bytes, allocated on device ordinal, to the device-side
// figure. Uncounting the frees known to have executed (reap) can only lower
// the figure, so it must come first only where the addition raises the
// peak: an addition that stays within the peak is made without it, in one
// compare-and-swap against the peak, and only where that fails (or the
// figures show it would) are the frees reaped (one cgo call) before the
// addition that raises the peak.
func (sd *deviceSide) add(b *cudaBackend, ordinal int, size int64) {
	// With peak scopes open (PeakScope), every addition may raise one of
	// theirs, so the frees are reaped first.
	if cur, peak := sd.held.Load(); size <= peak-cur && !sd.held.HasOpenScopes() && sd.held.AllocWithin(size, peak) == nil {
		return
	}
	sd.reap(b, ordinal)
	_ = sd.held.Alloc(size) // cannot fail: the record already holds size
}

// drop takes size bytes from the device-side figure, and from its part
// that stream-ordered buffers take where pooled: a Free's, at once, and a
// FreeAsync's, once its stream has executed it.
func (sd *deviceSide) drop(size int64, pooled bool) {
	_ = sd.held.Free(size) // cannot fail: the figure holds the buffer's bytes
	if pooled {
		sd.pooled.Add(-size)
	}
}

// The device-side figure is the CUDA backend's capability (heldFigure),
// which deviceTable.held holds.

func (b *cudaBackend) heldAdd(ordinal int, size int64, pooled bool) {
	if sd := b.side(ordinal); sd != nil {
		sd.add(b, ordinal, size) // the peak leaves out what is known freed
		if pooled {
			sd.pooled.Add(size)
		}
	}
}

func (b *cudaBackend) heldDrop(ordinal int, size int64, pooled bool) {
	if sd := b.side(ordinal); sd != nil {
		sd.drop(size, pooled)
	}
}

func (b *cudaBackend) held(ordinal int) (cur, peak int64) {
	sd := b.side(ordinal)
	if sd == nil {
		return 0, 0
	}
	sd.reap(b, ordinal)
	return sd.held.Load()
}

// resetHeldPeak sets the device-side peak of device ordinal to its current
// figure, and the high-water marks of its memory pool and of its graph
// memory, where it has them, as the driver resets them.
func (b *cudaBackend) resetHeldPeak(ordinal int) {
	if sd := b.side(ordinal); sd != nil {
		sd.reap(b, ordinal)
		sd.held.ResetPeak()
		if pool, err := b.pool(ordinal); err == nil {
			cudadrv.PoolResetHighs(pool)
		}
		b.resetGraphHighs(ordinal)
	}
}

// openHeldScope opens a peak scope on the device-side figure, after
// uncounting the stream-ordered frees known to have executed, so that it
// starts from the figure the device holds.
func (b *cudaBackend) openHeldScope(ordinal int) *tracker.Scope {
	sd := b.side(ordinal)
	if sd == nil {
		return nil
	}
	sd.reap(b, ordinal)
	return sd.held.OpenScope()
}

// heldScopePeak reads the peak of a scope of openHeldScope after learning
// which stream-ordered frees have executed, as held does.
func (b *cudaBackend) heldScopePeak(ordinal int, sc *tracker.Scope) int64 {
	if sc == nil {
		return 0
	}
	if !sc.Closed() {
		if sd := b.side(ordinal); sd != nil {
			sd.reap(b, ordinal)
		}
	}
	return sc.Peak()
}

// closeHeldScope closes a scope of openHeldScope.
func (b *cudaBackend) closeHeldScope(ordinal int, sc *tracker.Scope) error {
	if sc == nil {
		return nil
	}
	if !sc.Closed() {
		if sd := b.side(ordinal); sd != nil {
			sd.reap(b, ordinal)
		}
	}
	_, err := sc.Close()
	return err
}

// reap uncounts the pending frees whose streams have executed them, and
// keeps the others pending. It asks each stream with frees pending, in one
// cgo call (cudadrv.StreamEvents.Query): the newest event first, which
// retires all of them where the stream has reached it, and otherwise the
// first one not reached, by bisection. A query that fails (the event or its
// context is gone) retires the free too: nothing would ever reach it.
func (sd *deviceSide) reap(b *cudaBackend, ordinal int) {
	if sd.npending.Load() == 0 {
		if sd.reapAt.Load() != 0 {
			sd.reapAt.Store(0)
		}
		return
	}
	sd.reapMu.Lock()
	sd.reapLocked(b, ordinal)
	sd.reapMu.Unlock()
}

// reapLocked is reap, with reapMu held.
func (sd *deviceSide) reapLocked(b *cudaBackend, ordinal int) {
	// FreeAsync reaps next at twice what this reap leaves, so that a
	// stream far behind is not queried at every free, and a reap that
	// leaves little brings the bound back down.
	defer func() { sd.reapAt.Store(2 * sd.npending.Load()) }()
	w := sd.waiting
	k := len(w)
	for n := sd.pending.Swap(nil); n != nil; n = n.next {
		w = append(w, n)
	}
	if len(w) == 0 {
		return
	}
	// The stack gives the newest first: reversed, the frees of one stream
	// that one thread pushed come in their stream's order, after those
	// that waited already, and the frees need no sort.
	slices.Reverse(w[k:])
	if !slices.IsSortedFunc(w, byStream) {
		slices.SortFunc(w, byStream)
	}
	q := &sd.queries
	q.Reset()
	for i, n := range w {
		q.Add(n.event)
		if i+1 == len(w) || w[i+1].stream != n.stream || !n.stream.ordered() {
			q.EndStream()
		}
	}
	_, ctx, err := b.device(ordinal, "event query")
	if err == nil {
		q.Query(ctx)
	}
	kept, start, retired, bytes := w[:0], 0, int64(0), int64(0)
	for i := range q.Streams() {
		end := start + q.Len(i)
		reached, r := end-start, cudadrv.Success // a lost device: nothing would ever reach them, retired
		if err == nil {
			reached, r = q.Reached(i)
		}
		for _, n := range w[start : start+reached] {
			retired++
			bytes += n.size
			sd.retire(n, r)
		}
		kept = append(kept, w[start+reached:end]...)
		start = end
	}
	clear(w[len(kept):]) // the retired, held by the slice no more
	sd.waiting = kept
	sd.npending.Add(-retired)
	sd.drop(bytes, true)
}

// retire ends the wait of free n, whose stream has reached its event (r
// Success) or whose query failed (r the error): an event of the device's
// primary context is kept, with n, for the next FreeAsync; one of another
// context is destroyed; one whose query failed is left alone.
func (sd *deviceSide) retire(n *retireNode, r cudadrv.Result) {
	switch {
	case n.foreign:
		cudadrv.EventDestroy(n.event)
	case r == cudadrv.Success:
		*n = retireNode{event: n.event}
		sd.putSpare(n)
	}
}

// pendingBound is how many frees may wait for their events before
// FreeAsync reaps them itself.
const pendingBound = 64

func (sd *deviceSide) push(n *retireNode) {
	for {
		n.next = sd.pending.Load()
		if sd.pending.CompareAndSwap(n.next, n) {
			return
		}
	}
}

// putSpare keeps n, with its event of the device's primary context, for
// reuse.
func (sd *deviceSide) putSpare(n *retireNode) {
	sd.spareMu.Lock()
	sd.spare = append(sd.spare, n)
	sd.spareMu.Unlock()
}

// takeSpare returns a node with an event reached before, or nil.
func (sd *deviceSide) takeSpare() *retireNode {
	sd.spareMu.Lock()
	defer sd.spareMu.Unlock()
	k := len(sd.spare)
	if k == 0 {
		return nil
	}
	n := sd.spare[k-1]
	sd.spare[k-1] = nil
	sd.spare = sd.spare[:k-1]
	return n
}

// Stream-ordered allocation and the memory pools are the CUDA backend's
// capability (streamBackend), which deviceTable.stream holds: Device.take
// uses it for AllocAsync, deviceTable.release for Buffer.FreeAsync, and
// Pool's calls for theirs.

// poolsSupported fails where device ordinal has no memory pools; it asks
// the driver until the driver answers, and keeps the answer. Where the
// driver does not answer (a lost device), nothing is known of the pools,
// and the call goes on to the driver, which refuses it: AllocAsync then
// fails, counted, as Alloc does.
func (b *cudaBackend) poolsSupported(ordinal int) error {
	sd := b.side(ordinal)
	if sd == nil {
		return fmt.Errorf("%w: cuda:%d has no CUDA memory pool", ErrNotSupported, ordinal)
	}
	if p := sd.pools.Load(); p != nil {
		return *p
	}
	answered, err := poolsSupported(Device{kind: KindCUDA, ordinal: ordinal})
	if !answered {
		return nil
	}
	sd.pools.CompareAndSwap(nil, &err)
	return *sd.pools.Load()
}

// allocInCapture is allocAsync where stream captures a graph, and
// allocates nothing where it does not. Where the device cannot be reached,
// nothing is known of the stream, and nothing is refused: the limit's
// refusal stands.
func (b *cudaBackend) allocInCapture(ordinal int, size int64, stream Stream, m *memory) (uint64, error) {
	_, ctx, err := b.device(ordinal, "alloc")
	if err != nil {
		return 0, nil
	}
	if b.captureMode == cudadrv.RefuseCapture {
		// No graph memory nodes: the stream is checked, nothing allocated.
		if cs := cudadrv.CheckStream(ctx, uintptr(stream)); cs.Enter == cudadrv.Success && (cs.OtherDevice || cs.Capturing) {
			return 0, uncounted{refusedStream("AllocAsync", Device{kind: KindCUDA, ordinal: ordinal}, stream, cs)}
		}
		return 0, nil
	}
	return b.allocIn(ordinal, size, stream, m, cudadrv.OnlyCapture)
}

// allocAsync allocates size bytes on device ordinal from its current pool
// in stream order (cuMemAllocAsync); on a stream whose capture is active,
// in the capture's graph, where the driver has graph memory nodes.
func (b *cudaBackend) allocAsync(ordinal int, size int64, stream Stream, m *memory) (uint64, error) {
	return b.allocIn(ordinal, size, stream, m, b.captureMode)
}

// allocIn is allocAsync with what it does on a capturing stream (mode).
func (b *cudaBackend) allocIn(ordinal int, size int64, stream Stream, m *memory, mode cudadrv.CaptureAlloc) (uint64, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "alloc")
	if err != nil {
		return 0, err // a lost device, or its context not retained: counted, as Alloc's
	}
	a := cudadrv.AllocAsyncIn(ctx, size, uintptr(stream), mode)
	if (a.OtherDevice || a.Capturing) && a.Enter == cudadrv.Success {
		return b.inCapture(dev, ctx, d, size, stream, a, m)
	}
	if err := dev.settle("alloc", resultOf(a.Call)); err != nil {
		return 0, err
	}
	m.ptr = a.Ptr
	return 0, nil
}

// inCapture settles an allocation that a met on a stream of another device
// or a capturing one: refused, as bad input, where nothing was allocated
// (cuMemAllocAsync would have allocated on the stream's device, or in a
// graph memtrack does not allocate in), and a graph's allocation, in the
// capture whose ID it returns, where the driver made one, with the bytes
// the driver maps for it (graphRounded) in m.reserved. A graph's
// allocation that the driver refuses is counted nowhere; where the refusal
// left the capture invalidated, the error says which (invalidatedIn).
func (b *cudaBackend) inCapture(dev *cudaDevice, ctx cuContext, d Device, size int64, stream Stream, a cudadrv.StreamCall, m *memory) (uint64, error) {
	if a.OtherDevice || (a.Ptr == 0 && a.Op == cudadrv.Success) {
		dev.settle("alloc", resultOf(a.Call)) // a failed restore is logged there
		return 0, uncounted{refusedStream("AllocAsync", d, stream, a)}
	}
	if err := dev.settle("alloc", resultOf(a.Call)); err != nil {
		err = fillError(err, d, size, nil)
		if a.Invalidated {
			err = &invalidatedIn{id: a.CaptureID, err: err}
		}
		return 0, uncounted{err}
	}
	rounded, err := graphRounded(dev, size)
	if err != nil {
		// Nothing could count the node at its size: a free node ends it
		// in the graph, so that no launch holds memory nothing counts.
		f := cudadrv.FreeGraph(ctx, a.Ptr, uintptr(stream))
		dev.settle("free", resultOf(f.Call)) // a failure is logged there; the capture's result says the rest
		return 0, uncounted{fillError(err, d, size, nil)}
	}
	*m = memory{ptr: a.Ptr, reserved: rounded}
	return a.CaptureID, nil
}

// freeAsync frees m in stream order (cuMemFreeAsync) and learns when the
// stream executes the free, by an event recorded after it.
func (b *cudaBackend) freeAsync(ordinal int, size int64, m *memory, stream Stream) error {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	sd := &b.sides[ordinal] // the buffer's allocAsync found the device
	dev, ctx, err := b.device(ordinal, "free")
	if err != nil {
		return fillError(err, d, size, nil)
	}
	n := sd.takeSpare() // a node, and its event, to reuse
	var event cudadrv.Event
	if n != nil {
		event = n.event
	}
	f := cudadrv.FreeAsync(ctx, m.ptr, uintptr(stream), event)
	if n != nil && f.SpareUnused {
		sd.putSpare(n) // the stream's context needs an event of its own
		n = nil
	}
	if (f.OtherDevice || f.Capturing) && f.Enter == cudadrv.Success {
		dev.settle("free", resultOf(f.Call)) // a failed restore is logged there
		if n != nil {
			sd.putSpare(n)
		}
		return refusedStream("FreeAsync", d, stream, f)
	}
	// The free's own result decides (see settle): a failure to restore the
	// thread's context is logged and counted there, and the free stands.
	if err := dev.settle("free", resultOf(f.Call)); err != nil {
		if n != nil {
			sd.putSpare(n)
		}
		return fillError(err, d, size, nil)
	}
	if n == nil {
		n = new(retireNode)
	}
	*n = retireNode{event: f.Event, stream: keyOf(f.StreamCtx, stream), seq: f.Seq, size: size, foreign: f.Foreign}
	// The free is enqueued: count it, then learn when it executes.
	if f.Retired {
		// The event could not be recorded; the stream was synchronized.
		sd.drop(size, true)
		if !f.Event.IsZero() {
			sd.retire(n, cudadrv.Success) // never recorded: reached
		}
		return nil
	}
	sd.push(n)
	if sd.npending.Add(1) >= max(sd.reapAt.Load(), pendingBound) && sd.reapMu.TryLock() {
		// Nothing else may read the figures for a while: keep the frees
		// waiting, and their events, bounded (reap sets the next bound).
		// Where another reap runs, it does that.
		sd.reapLocked(b, ordinal)
		sd.reapMu.Unlock()
	}
	return nil
}

// refusedStream is the error of a stream-ordered call on d that c found
// with a stream of another device, which the driver would run on that
// device, or with a stream that is capturing a CUDA graph, where memtrack
// does not run it: a capture the driver invalidated, a driver without
// graph memory nodes, or a FreeAsync of a buffer that no graph allocated.
func refusedStream(op string, d Device, stream Stream, c cudadrv.StreamCall) error {
	if c.OtherDevice {
		return fmt.Errorf("%w: %s on %v with stream %#x, which belongs to cuda:%d: a stream-ordered call runs on its stream's device; use a stream of %v",
			ErrInvalidArgument, op, d, uintptr(stream), c.StreamDevice, d)
	}
	switch {
	case c.CaptureStatus == cudadrv.CaptureInvalidated:
		return fmt.Errorf("%w: %s on %v with stream %#x, whose CUDA graph capture the driver invalidated: it ends with no graph; end it (cuStreamEndCapture) and capture again",
			ErrNotSupported, op, d, uintptr(stream))
	case op == "FreeAsync":
		return fmt.Errorf("%w: FreeAsync on %v with stream %#x, which is capturing a CUDA graph, of a buffer that no graph allocated: a graph's free node takes only an allocation of a graph (cuGraphAddMemFreeNode), and the launch, when the free would run, is the program's; free the buffer before the capture begins or after it ends",
			ErrNotSupported, d, uintptr(stream))
	}
	why := "the driver gives no capture ID"
	if err := cudadrv.GraphMem(); err != nil {
		why = err.Error()
	}
	return fmt.Errorf("%w: %s on %v with stream %#x, which is capturing a CUDA graph: memtrack allocates in a capture only with the driver's graph memory nodes (CUDA 11.4), and %s; allocate before the capture begins, or after it ends",
		ErrNotSupported, op, d, uintptr(stream), why)
}

// The figures and controls of each CUDA device's current memory pool, the
// one AllocAsync allocates from: cuMemAllocAsync takes
// memory from the pool current to the stream's device (cuDeviceGetMemPool),
// which is the default pool unless cuDeviceSetMemPool set another, so the
// pool is looked up at every reading.

// poolsSupported fails where CUDA device d has no memory pools, or its
// driver lacks the calls of stream-ordered allocation (CUDA 11.2);
// answered is false where the driver could not say.
func poolsSupported(d Device) (answered bool, err error) {
	if err := cudadrv.MemPools(); err != nil {
		return true, fmt.Errorf("%w: stream-ordered allocation on %v: %w; allocate with Device.Alloc instead", ErrNotSupported, d, err)
	}
	supported, r := cudadrv.PoolsSupported(d.ordinal)
	if r != cudadrv.Success {
		return false, nil
	}
	if !supported {
		return true, fmt.Errorf("%w: %v has no memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0): stream-ordered allocation needs CUDA 11.2 or later and a device that supports it; allocate with Device.Alloc instead",
			ErrNotSupported, d)
	}
	return true, nil
}

// currentPool returns the current memory pool of CUDA device d.
func currentPool(d Device) (cudadrv.Pool, error) {
	p, r := cudadrv.MemPool(d.ordinal)
	if r != cudadrv.Success {
		return p, fillError(resultError("memory pool", "", r), d, 0, nil)
	}
	return p, nil
}

// pool returns the current memory pool of device ordinal.
func (b *cudaBackend) pool(ordinal int) (cudadrv.Pool, error) {
	return currentPool(Device{kind: KindCUDA, ordinal: ordinal})
}

// poolStats reads the figures of the current pool of device ordinal.
func (b *cudaBackend) poolStats(ordinal int) (PoolStats, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	pool, err := b.pool(ordinal)
	if err != nil {
		return PoolStats{}, err
	}
	s, r := cudadrv.PoolGet(pool)
	if r != cudadrv.Success {
		return PoolStats{}, fillError(resultError("memory pool", "", r), d, 0, nil)
	}
	return PoolStats{
		PoolReserved:     s.PoolReserved,
		PeakPoolReserved: s.PeakPoolReserved,
		PoolUsed:         s.PoolUsed,
		PeakPoolUsed:     s.PeakPoolUsed,
		ReleaseThreshold: s.ReleaseThreshold,
	}, nil
}

// pooled returns the part of the device-side figure of device ordinal
// that stream-ordered buffers take.
func (b *cudaBackend) pooled(ordinal int) int64 {
	if sd := b.side(ordinal); sd != nil {
		return sd.pooled.Load()
	}
	return 0
}

// trimPool trims the current pool of device ordinal to keep bytes
// (cuMemPoolTrimTo).
func (b *cudaBackend) trimPool(ordinal int, keep int64) error {
	pool, err := b.pool(ordinal)
	if err != nil {
		return err
	}
	if r := cudadrv.PoolTrimTo(pool, keep); r != cudadrv.Success {
		return fillError(resultError("trim pool", "", r), Device{kind: KindCUDA, ordinal: ordinal}, 0, nil)
	}
	return nil
}

// setReleaseThreshold sets the release threshold of the current pool of
// device ordinal (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
func (b *cudaBackend) setReleaseThreshold(ordinal int, bytes int64) error {
	pool, err := b.pool(ordinal)
	if err != nil {
		return err
	}
	if r := cudadrv.PoolSetReleaseThreshold(pool, bytes); r != cudadrv.Success {
		return fillError(resultError("set release threshold", "", r), Device{kind: KindCUDA, ordinal: ordinal}, 0, nil)
	}
	return nil
}
