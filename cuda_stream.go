//go:build cuda

package memtrack

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync) on each
// device's default memory pool, and the device-side figure: the bytes the
// device holds for this package's buffers, in which a buffer freed with
// FreeAsync stays until its stream has executed the free. cu has no binding
// for these calls; each C helper below makes the device's primary context
// current, operates and restores the thread's context, in one cgo call, so
// that the goroutine need not be locked to its thread.

/*
#cgo CFLAGS: -I/usr/local/cuda/include
#cgo LDFLAGS: -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>
#include <stdint.h>

#include "cuda_context.h"

// memtrack_alloc_async allocates size bytes on stream from the device's
// default pool.
static memtrack_result memtrack_alloc_async(CUcontext ctx, size_t size, uintptr_t handle) {
	memtrack_result a = {0};
	CUcontext prev;
	if ((a.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return a;
	a.op = cuMemAllocAsync(&a.ptr, size, (CUstream)handle);
	a.restore = memtrack_leave(ctx, prev);
	return a;
}

// MEMTRACK_RETIRE_DEVICES bounds the device ordinals whose frees the host
// function retires; FreeAsync records an event for the others.
#define MEMTRACK_RETIRE_DEVICES 256

// memtrack_retired_bytes counts, per device ordinal, the bytes of the
// stream-ordered frees that their streams have executed, as the host
// function below learns them. It only grows (modulo 2^64); Go reads it with
// an atomic load and uncounts what it has not yet uncounted.
static uint64_t memtrack_retired_bytes[MEMTRACK_RETIRE_DEVICES];

// memtrack_retired_counter returns the counter of device ordinal.
static uint64_t *memtrack_retired_counter(int ordinal) { return &memtrack_retired_bytes[ordinal]; }

// memtrack_retired is the host function enqueued after a free: the token
// packs the device ordinal (low 16 bits) and the buffer's size. It runs on
// a thread of the driver, calls neither the driver nor Go, and only adds.
static void CUDA_CB memtrack_retired(void *token) {
	uintptr_t t = (uintptr_t)token;
	__atomic_fetch_add(&memtrack_retired_bytes[t & 0xffff], (uint64_t)(t >> 16), __ATOMIC_SEQ_CST);
}

enum { MEMTRACK_UNTRACKED, MEMTRACK_BY_HOSTFN, MEMTRACK_BY_EVENT };

// memtrack_free_async frees ptr on stream and, by how, arranges to learn
// when the stream has executed the free: with a host function that adds the
// size to its device's memtrack_retired_bytes (token), or with event (created if NULL) recorded after the
// free. Where neither can be enqueued, it waits for the stream and reports
// the free retired.
static memtrack_result memtrack_free_async(CUcontext ctx, CUdeviceptr ptr, uintptr_t handle, int how, uintptr_t token, CUevent event) {
	memtrack_result a = {0};
	CUstream stream = (CUstream)handle;
	CUcontext prev;
	a.event = event;
	if ((a.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return a;
	a.op = cuMemFreeAsync(ptr, stream);
	if (a.op == CUDA_SUCCESS && how != MEMTRACK_UNTRACKED) {
		CUresult r;
		if (how == MEMTRACK_BY_HOSTFN) {
			r = cuLaunchHostFunc(stream, memtrack_retired, (void *)token);
		} else {
			r = a.event ? CUDA_SUCCESS : cuEventCreate(&a.event, CU_EVENT_DISABLE_TIMING);
			if (r == CUDA_SUCCESS) r = cuEventRecord(a.event, stream);
		}
		if (r != CUDA_SUCCESS) {
			cuStreamSynchronize(stream);
			a.retired = 1;
		}
	}
	a.restore = memtrack_leave(ctx, prev);
	return a;
}

// memtrack_events_reached queries the n events in ctx, in one call, and
// writes each one's answer to out: CUDA_SUCCESS once its stream has reached
// it, CUDA_ERROR_NOT_READY before. Where the context cannot be made current,
// or the previous one current again, that failure is the answer of every
// event that would have answered CUDA_SUCCESS.
static void memtrack_events_reached(CUcontext ctx, const CUevent *events, CUresult *out, int n) {
	CUcontext prev;
	CUresult r = memtrack_enter(ctx, &prev);
	for (int i = 0; i < n; i++) out[i] = r == CUDA_SUCCESS ? cuEventQuery(events[i]) : r;
	if (r != CUDA_SUCCESS) return;
	CUresult r2 = memtrack_leave(ctx, prev);
	for (int i = 0; r2 != CUDA_SUCCESS && i < n; i++) {
		if (out[i] == CUDA_SUCCESS) out[i] = r2;
	}
}
*/
import "C"

import (
	"fmt"
	"sync"
	stdatomic "sync/atomic"
	"unsafe"

	"github.com/memtrack/memtrack/tracker"
	"github.com/mumax/3/cuda/cu"
	"go.uber.org/atomic"
)

// How FreeAsync learns that its stream has executed the free.
const (
	// retireByHostFunc enqueues a host function after the free
	// (cuLaunchHostFunc); the driver runs it, on a thread of its own, once
	// the stream reaches it, and it adds the buffer's size to a counter in
	// C memory, which the next reading or allocation on the device
	// uncounts (catchUp): no callback into Go on the driver's thread.
	retireByHostFunc uint32 = iota
	// retireByEvent records an event after the free; the figures are read
	// after querying the pending events (cuEventQuery).
	retireByEvent
)

// deviceSide is the device-side figure of one CUDA device: what the device
// holds for this package's buffers, with its peak. It counts every buffer
// from the allocation's return; Free uncounts at its return, FreeAsync once
// the stream has executed the free.
type deviceSide struct {
	held   tracker.Counter
	retire atomic.Uint32 // retireBy*

	// retired is the device's counter of bytes that host functions saw
	// freed (C memory, see memtrack_retired_bytes), nil past
	// maxRetireDevices; applied is how much of it held has uncounted.
	retired *uint64
	applied atomic.Uint64

	// pending holds the frees awaiting their events: pushed by FreeAsync,
	// taken whole by readers (so no node is ever popped alone, and a stack
	// needs no lock).
	pending  atomic.Pointer[retireNode]
	npending atomic.Int64 // the nodes in pending, or about to be pushed back
	reapAt   atomic.Int64 // FreeAsync reaps at this many pending (0: reapBatch)
	spareMu  sync.Mutex
	spare    []C.CUevent // events reached, for reuse

	poolOnce sync.Once
	pool     C.CUmemoryPool
	poolErr  error
}

// retireNode is one free awaiting its event.
type retireNode struct {
	next  *retireNode
	event C.CUevent
	size  int64
}

// sideTable holds the device-side figures of one CUDA device table, one
// per device, and links to the tables of the device tables used before.
type sideTable struct {
	state *kindState
	sides []deviceSide
	prev  *sideTable
}

// cudaSides is the side table of the CUDA device table, made when first
// needed. A process has one CUDA device table; tests install others, and
// then put the first back, which finds its figures again down the chain.
var cudaSides atomic.Pointer[sideTable]

// sideOf returns the device-side figure of CUDA device ordinal, or nil if
// there is no such device.
func sideOf(ordinal int) *deviceSide {
	s := stateOf(KindCUDA)
	t := cudaSides.Load()
	for t == nil || t.state != s {
		sides := make([]deviceSide, s.n)
		found := false
		for o := t; o != nil; o = o.prev {
			if o.state == s {
				sides, found = o.sides, true
				break
			}
		}
		if !found {
			for i := range min(len(sides), maxRetireDevices) {
				sides[i].retired = (*uint64)(unsafe.Pointer(C.memtrack_retired_counter(C.int(i))))
				sides[i].applied.Store(stdatomic.LoadUint64(sides[i].retired))
			}
		}
		nt := &sideTable{state: s, sides: sides, prev: t}
		if cudaSides.CompareAndSwap(t, nt) {
			t = nt
			break
		}
		t = cudaSides.Load()
	}
	if ordinal < 0 || ordinal >= len(t.sides) {
		return nil
	}
	return &t.sides[ordinal]
}

// maxRetireDevices is C's MEMTRACK_RETIRE_DEVICES.
const maxRetireDevices = C.MEMTRACK_RETIRE_DEVICES

// catchUp uncounts the frees that host functions have seen executed since
// the last catchUp. Every figure is read after one, and so is every
// addition that raises the peak (see count): the figures are those a host
// function calling into Go at once would give, without a callback into Go
// on the driver's thread.
func (sd *deviceSide) catchUp() {
	if sd.retired == nil {
		return
	}
	for {
		a := sd.applied.Load()
		r := stdatomic.LoadUint64(sd.retired)
		if r == a {
			return
		}
		if sd.applied.CompareAndSwap(a, r) {
			_ = sd.held.Free(int64(r - a))
			return
		}
	}
}

// count adds size bytes, allocated on device ordinal, to the device-side
// figure. Uncounting the frees known to have executed (reap) can only lower
// the figure, so it must come first only where the addition raises the
// peak: an addition that stays within the peak is made without it, in one
// compare-and-swap against the peak, and only where that fails (or the
// figures show it would) are the frees reaped (for events, a cgo call per
// reapBatch) before the addition that raises the peak.
func (sd *deviceSide) count(ordinal int, size int64) {
	if cur, peak := sd.held.Load(); size <= peak-cur && sd.held.AllocWithin(size, peak) == nil {
		return
	}
	sd.reap(ordinal)
	_ = sd.held.Alloc(size) // cannot fail: the record already holds size
}

// sideAlloc counts size bytes allocated on d in its device-side figure.
func sideAlloc(d Device, size int64) {
	if d.kind == KindCUDA {
		if sd := sideOf(d.ordinal); sd != nil {
			sd.count(d.ordinal, size)
		}
	}
}

// sideFree uncounts size bytes that the device no longer holds.
func sideFree(d Device, size int64) {
	if d.kind == KindCUDA {
		if sd := sideOf(d.ordinal); sd != nil {
			_ = sd.held.Free(size)
		}
	}
}

// deviceHeld returns the device-side figure of d and its peak: for CUDA
// devices, after learning which stream-ordered frees have executed; for the
// others, the tracked figures current and peak, which are the same.
func deviceHeld(d Device, current, peak int64) (int64, int64) {
	if d.kind != KindCUDA {
		return current, peak
	}
	sd := sideOf(d.ordinal)
	if sd == nil {
		return current, peak
	}
	sd.reap(d.ordinal)
	return sd.held.Load()
}

// resetDevicePeaks sets the device-side peak of d to its current figure,
// and the high-water marks of its memory pool, where it has one, to the
// pool's current figures.
func resetDevicePeaks(d Device) {
	if d.kind != KindCUDA {
		return
	}
	if sd := sideOf(d.ordinal); sd != nil {
		sd.reap(d.ordinal)
		sd.held.ResetPeak()
		sd.resetPoolHighs(d)
	}
}

// reap uncounts the pending frees whose events their streams have reached,
// and keeps the others pending. A query that fails (the event or its context
// is gone) retires the free too: nothing would ever reach it.
func (sd *deviceSide) reap(ordinal int) {
	sd.catchUp()
	n := sd.pending.Swap(nil)
	if n == nil {
		return
	}
	_, ctx, err := cudaDeviceOf(ordinal, "event query")
	// The events are queried in batches of up to reapBatch, a cgo call
	// each.
	k := 0
	for m := n; m != nil && k < reapBatch; m = m.next {
		k++
	}
	nodes := make([]*retireNode, 0, k)
	events := make([]C.CUevent, k)
	answers := make([]C.CUresult, k)
	for n != nil {
		nodes = nodes[:0]
		for ; n != nil && len(nodes) < k; n = n.next {
			events[len(nodes)] = n.event
			nodes = append(nodes, n)
		}
		if err == nil {
			C.memtrack_events_reached(ctx, &events[0], &answers[0], C.int(len(nodes)))
		} else {
			clear(answers) // nothing would ever reach them: retired
		}
		for i, m := range nodes {
			if answers[i] == C.CUDA_ERROR_NOT_READY {
				sd.push(m)
				continue
			}
			sd.npending.Add(-1)
			_ = sd.held.Free(m.size)
			if answers[i] == C.CUDA_SUCCESS {
				sd.spareMu.Lock()
				sd.spare = append(sd.spare, m.event)
				sd.spareMu.Unlock()
			}
		}
	}
}

// reapBatch is how many events reap queries in one cgo call, and how many
// frees may wait for their events before FreeAsync reaps them itself.
const reapBatch = 64

func (sd *deviceSide) push(n *retireNode) {
	for {
		n.next = sd.pending.Load()
		if sd.pending.CompareAndSwap(n.next, n) {
			return
		}
	}
}

// spareEvent returns an event reached before, or nil.
func (sd *deviceSide) spareEvent() C.CUevent {
	sd.spareMu.Lock()
	defer sd.spareMu.Unlock()
	if k := len(sd.spare); k > 0 {
		e := sd.spare[k-1]
		sd.spare = sd.spare[:k-1]
		return e
	}
	return nil
}

// cudaDeviceOf returns the CUDA backend's state of device ordinal and its
// primary context, as the backend's own operations get them.
func cudaDeviceOf(ordinal int, op string) (*cudaDevice, cuContext, error) {
	b, ok := stateOf(KindCUDA).b.(*cudaBackend)
	if !ok {
		return nil, nil, fmt.Errorf("%w: the CUDA backend is not the driver's", ErrBackendUnavailable)
	}
	return b.device(ordinal, op)
}

// cudaPool returns the device-side figure and the default memory pool of
// CUDA device d, or an error wrapping [ErrNotSupported] where d is not a
// CUDA device or has no memory pools.
func cudaPool(d Device) (*deviceSide, C.CUmemoryPool, error) {
	if d.kind != KindCUDA {
		return nil, nil, fmt.Errorf("%w: %v has no CUDA memory pool: stream-ordered allocation needs a CUDA device", ErrNotSupported, d)
	}
	if _, _, err := d.resolve(); err != nil {
		return nil, nil, err
	}
	sd := sideOf(d.ordinal)
	sd.poolOnce.Do(func() { sd.pool, sd.poolErr = defaultPool(d) })
	return sd, sd.pool, sd.poolErr
}

// AllocAsync allocates size bytes on the device in stream order: from the
// device's default memory pool (cuMemAllocAsync), usable by work enqueued
// on stream after this call. It checks, counts and fails as [Device.Alloc]
// does: [ErrInvalidSize] for size <= 0, an [*OutOfMemoryError] when the
// memory limit or the pool refuses it (counting one failure and nothing
// else). It fails with [ErrNotSupported] on a device that is not a CUDA GPU
// or whose driver has no memory pools (CUDA before 11.2, or
// CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0), changing nothing.
//
// The buffer counts from AllocAsync's return, both in the tracked figure
// ([Device.MemoryAllocated]) and in the device-side one ([Stats].Held).
// Release it with [Buffer.FreeAsync], or with [Buffer.Free] once the work
// that uses it is done.
func (d Device) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	return d.allocAsync(size, stream, Category{})
}

// allocAsync is AllocAsync, through category c unless it is the zero
// Category, which is counted as Device.alloc counts it (category.go).
func (d Device) allocAsync(size int64, stream Stream, c Category) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes requested on %v", ErrInvalidSize, size, d)
	}
	sd, _, err := cudaPool(d)
	if err != nil {
		return nil, err
	}
	s, rec, err := d.resolve()
	if err != nil {
		return nil, err
	}
	dev, ctx, err := cudaDeviceOf(d.ordinal, "alloc")
	if err != nil {
		return nil, fillError(err, d, size, rec)
	}
	var crec *tracker.Record
	if c.set != nil { // kept out of the path of an allocation without one
		if crec, err = c.checked(s, rec, size); err != nil { // category.go
			return nil, err
		}
	}
	if lim := rec.Limit(); lim > 0 {
		if cur := rec.Tracked(); size > lim-cur {
			return nil, d.overLimitIn(rec, size, cur, lim, c)
		}
	}
	a := C.memtrack_alloc_async(ctx, C.size_t(size), C.uintptr_t(stream))
	if err := dev.settle("alloc", resultOf(a)); err != nil {
		return nil, d.backendRefusedIn(rec, size, err, c)
	}
	b := new(Buffer)
	b.size, b.ordinal, b.kind = size, int32(d.ordinal), d.kind
	b.mem.ptr, b.pooled = uintptr(a.ptr), true
	// recordRefused releases the memory with cuMemFree, which takes memory
	// of the pool back at once.
	if crec != nil {
		if err := c.count(rec, crec, size); err != nil {
			return nil, d.recordRefusedIn(s, rec, b, err, c, true)
		}
	}
	if err := rec.Alloc(size); err != nil {
		c.uncount(crec, size)
		return nil, d.recordRefusedIn(s, rec, b, err, c, false)
	}
	sd.count(d.ordinal, size) // the peak leaves out what is known freed
	b.self, b.cat = b, c.idx
	if sr := s.sites.lookup(d.ordinal); sr != nil {
		b.site = sr.allocIn(size, 1, c.Name()) // see sites.go
	}
	if h := tables[d.kind].history.lookup(d.ordinal); h != nil {
		h.allocIn(size, b.site, rec, stream, c.idx, crec) // see history.go
	}
	return b, nil
}

// AllocAsync allocates size bytes in stream order on the category's device,
// as [Device.AllocAsync] does, and counts them in the category besides, as
// [Category.Alloc] does. [Buffer.FreeAsync] and [Buffer.Free] uncount them
// in both.
func (c Category) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	if c.set == nil {
		return nil, fmt.Errorf("%w: AllocAsync of %d bytes through the zero Category; obtain one with Device.Category", ErrInvalidCategory, size)
	}
	return c.dev.allocAsync(size, stream, c)
}

// FreeAsync frees the buffer in stream order (cuMemFreeAsync): the memory
// returns to the pool once stream has executed the work enqueued before
// this call; stream may differ from the one the buffer was allocated on.
// The tracked figure drops at FreeAsync's return; the device-side figure
// ([Stats].Held) when the stream executes the free, which the package
// learns without blocking the caller and without a goroutine.
//
// It fails with [ErrDoubleFree] on a buffer already freed, with
// [ErrNilBuffer] on a nil buffer and with [ErrInvalidArgument] on a buffer
// that [Device.Alloc] allocated (free it with [Buffer.Free]). If the driver
// refuses the free, the buffer stays live and counted, and FreeAsync or
// Free may be called again.
func (b *Buffer) FreeAsync(stream Stream) error {
	if !b.valid() {
		return b.refuseFree()
	}
	d := b.Device()
	if !b.pooled {
		return fmt.Errorf("%w: FreeAsync of a %d-byte buffer on %v that Device.Alloc allocated; free it with Free", ErrInvalidArgument, b.size, d)
	}
	if !b.state.CompareAndSwap(bufLive, bufFreed) {
		return b.refuseFree()
	}
	// The device's table and record, looked up as Free does.
	s := tables[b.kind].p.Load()
	var rec *tracker.Record
	if s != nil {
		rec = s.records.Lookup(int(b.ordinal))
	}
	sd := sideOf(int(b.ordinal))
	if rec == nil || sd == nil { // only where a test replaced the device table
		b.state.Store(bufLive)
		return fmt.Errorf("%w: the device table of %v that allocated the buffer is gone", ErrInvalidBuffer, d)
	}
	dev, ctx, err := cudaDeviceOf(int(b.ordinal), "free")
	if err != nil {
		b.state.Store(bufLive)
		return fillError(err, d, b.size, nil)
	}
	how, token, event := C.int(C.MEMTRACK_BY_EVENT), C.uintptr_t(0), C.CUevent(nil)
	if sd.retire.Load() == retireByHostFunc && b.size < 1<<47 && sd.retired != nil {
		how, token = C.MEMTRACK_BY_HOSTFN, C.uintptr_t(uint64(b.size)<<16|uint64(b.ordinal))
	} else {
		event = sd.spareEvent()
	}
	f := C.memtrack_free_async(ctx, C.CUdeviceptr(b.mem.ptr), C.uintptr_t(stream), how, token, event)
	// The free's own result decides (see settle): a failure to restore the
	// thread's context is logged and counted there, and the free stands.
	if err := dev.settle("free", resultOf(f)); err != nil {
		if event != nil {
			sd.spareMu.Lock()
			sd.spare = append(sd.spare, event)
			sd.spareMu.Unlock()
		}
		b.state.Store(bufLive)
		return fillError(err, d, b.size, nil)
	}
	// The free is enqueued: count it, then learn when it executes.
	if f.retired != 0 {
		_ = sd.held.Free(b.size)
	} else if how == C.MEMTRACK_BY_EVENT {
		sd.push(&retireNode{event: f.event, size: b.size})
		if sd.npending.Add(1) >= max(sd.reapAt.Load(), reapBatch) {
			// Nothing else may read the figures for a while: keep the
			// frees waiting, and their events, bounded. The next bound is
			// twice what is left, so that a stream far behind is not
			// queried whole at every free.
			sd.reap(int(b.ordinal))
			sd.reapAt.Store(2 * sd.npending.Load())
		}
	}
	if err := rec.Free(b.size); err != nil {
		return b.uncountFailed(err)
	}
	var crec *tracker.Record
	if b.cat != 0 {
		crec = b.uncountCategory(s)
	}
	if b.site != nil {
		b.site.free(b.size)
	}
	if h := tables[b.kind].history.lookup(int(b.ordinal)); h != nil {
		h.freeIn(b.size, b.site, rec, stream, b.cat, crec) // see history.go
	}
	return nil
}

// rawAllocFreeAsync is the floor BenchmarkCUDAAllocFreeAsync compares with:
// cuMemAllocAsync and cuMemFreeAsync in one cgo call each, in ctx, which it
// makes current and restores as the tracked calls do.
// With marker, the free is followed by the host function FreeAsync enqueues
// (adding 0 bytes): the raw pair plus the one stream operation that
// learning exactly when a free executes takes.
func rawAllocFreeAsync(ctx cuContext, size int64, stream Stream, marker bool) error {
	a := C.memtrack_alloc_async(ctx, C.size_t(size), C.uintptr_t(stream))
	if r := resultOf(a); r.enter != cu.SUCCESS || r.op != cu.SUCCESS {
		return resultError("alloc", "", max(r.enter, r.op))
	}
	how := C.int(C.MEMTRACK_UNTRACKED)
	if marker {
		how = C.MEMTRACK_BY_HOSTFN
	}
	f := C.memtrack_free_async(ctx, a.ptr, C.uintptr_t(stream), how, 0, nil)
	if r := resultOf(f); r.enter != cu.SUCCESS || r.op != cu.SUCCESS {
		return resultError("free", "", max(r.enter, r.op))
	}
	return nil
}
