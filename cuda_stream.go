//go:build cuda

package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/held"
	"github.com/memtrack/memtrack/tracker"
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

// The device-side figure of each CUDA device is a held.Figure (deviceSide,
// backend_cuda.go): this file gives it the frees of FreeAsync with their
// events, and the backend's heldFigure capability reads it.

// keyOf names the stream of a free for the device-side figure: its handle
// in the stream's context ctx (a default stream's handle names one stream
// per context), the legacy default stream by 0 whichever of its two handles
// named it; the per-thread default stream, whose handle names another
// stream on each thread, is not ordered.
func keyOf(ctx cuContext, stream Stream) held.Stream {
	h := uintptr(stream)
	if h == cudadrv.StreamLegacy {
		h = 0
	}
	return held.Stream{Context: uintptr(ctx), Handle: h, Ordered: h != cudadrv.StreamPerThread}
}

// side returns the device-side figure of device ordinal, or nil if there
// is no such device.
func (b *cudaBackend) side(ordinal int) *deviceSide {
	if b.init() != nil || ordinal < 0 || ordinal >= len(b.sides) {
		return nil
	}
	return &b.sides[ordinal]
}

// The device-side figure is the CUDA backend's capability (heldFigure),
// which deviceTable.held holds.

func (b *cudaBackend) heldAdd(ordinal int, size int64, pooled bool) {
	if sd := b.side(ordinal); sd != nil {
		sd.Add(size, pooled) // the peak leaves out what is known freed
	}
}

func (b *cudaBackend) heldDrop(ordinal int, size int64, pooled bool) {
	if sd := b.side(ordinal); sd != nil {
		sd.Drop(size, pooled)
	}
}

func (b *cudaBackend) held(ordinal int) (cur, peak int64) {
	sd := b.side(ordinal)
	if sd == nil {
		return 0, 0
	}
	return sd.Load()
}

// resetHeldPeak sets the device-side peak of device ordinal to its current
// figure, and the high-water marks of its memory pool and of its graph
// memory, where it has them, as the driver resets them.
func (b *cudaBackend) resetHeldPeak(ordinal int) {
	if sd := b.side(ordinal); sd != nil {
		sd.ResetPeak()
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
	return sd.OpenScope()
}

// heldScopePeak reads the peak of a scope of openHeldScope after learning
// which stream-ordered frees have executed, as held does.
func (b *cudaBackend) heldScopePeak(ordinal int, sc *tracker.Scope) int64 {
	if sc == nil {
		return 0
	}
	if sd := b.side(ordinal); sd != nil {
		return sd.ScopePeak(sc)
	}
	return sc.Peak()
}

// closeHeldScope closes a scope of openHeldScope.
func (b *cudaBackend) closeHeldScope(ordinal int, sc *tracker.Scope) error {
	if sc == nil {
		return nil
	}
	if sd := b.side(ordinal); sd != nil {
		return sd.CloseScope(sc)
	}
	_, err := sc.Close()
	return err
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
	if b.init() != nil || ordinal < 0 || ordinal >= len(b.devs) {
		return fmt.Errorf("%w: cuda:%d has no CUDA memory pool", ErrNotSupported, ordinal)
	}
	dev := b.dev(ordinal)
	if p := dev.pools.Load(); p != nil {
		return *p
	}
	answered, err := poolsSupported(Device{kind: KindCUDA, ordinal: ordinal})
	if !answered {
		return nil
	}
	dev.pools.CompareAndSwap(nil, &err)
	return *dev.pools.Load()
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
	n := sd.TakeSpare() // a free retired, and its event, to reuse
	var event cudadrv.Event
	if n != nil {
		event = n.Event
	}
	f := cudadrv.FreeAsync(ctx, m.ptr, uintptr(stream), event)
	if n != nil && f.SpareUnused {
		sd.PutSpare(n) // the stream's context needs an event of its own
		n = nil
	}
	if (f.OtherDevice || f.Capturing) && f.Enter == cudadrv.Success {
		dev.settle("free", resultOf(f.Call)) // a failed restore is logged there
		if n != nil {
			sd.PutSpare(n)
		}
		return refusedStream("FreeAsync", d, stream, f)
	}
	// The free's own result decides (see settle): a failure to restore the
	// thread's context is logged and counted there, and the free stands.
	if err := dev.settle("free", resultOf(f.Call)); err != nil {
		if n != nil {
			sd.PutSpare(n)
		}
		return fillError(err, d, size, nil)
	}
	if n == nil {
		n = new(held.Free[cudadrv.Event])
	}
	*n = held.Free[cudadrv.Event]{Event: f.Event, Stream: keyOf(f.StreamCtx, stream), Seq: f.Seq, Size: size, Foreign: f.Foreign}
	// The free is enqueued: count it, then learn when it executes.
	if f.Retired {
		// The event could not be recorded; the stream was synchronized.
		sd.Executed(n)
		return nil
	}
	sd.Enqueue(n) // where frees pile up unread, it learns of those executed
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
		return sd.Pooled()
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
