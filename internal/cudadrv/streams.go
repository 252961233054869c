//go:build cuda

package cudadrv

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync) and how a
// free is learned to have run: an event recorded after it, or a host
// function that adds its size to a counter in C memory. Each call makes the
// stream's context current, operates and restores the thread's context, in
// one cgo call, so that the goroutine need not be locked to its thread.

/*
#include <cuda.h>
#include <stdint.h>

#include "context.h"

// memtrack_alloc_async allocates size bytes on stream from the current pool
// of the stream's device, in the stream's context; a stream of another
// device than ctx's allocates nothing (other_device).
static memtrack_result memtrack_alloc_async(CUcontext ctx, size_t size, uintptr_t handle) {
	memtrack_result a = {0};
	CUcontext prev;
	if ((a.enter = memtrack_enter_stream(ctx, (CUstream)handle, &prev, &a)) != CUDA_SUCCESS) return a;
	if (!a.other_device) a.op = memtrack_check_capture((CUstream)handle, &a);
	if (!a.other_device && !a.capturing && a.op == CUDA_SUCCESS) a.op = cuMemAllocAsync(&a.ptr, size, (CUstream)handle);
	a.restore = memtrack_leave_stream(ctx, prev, &a);
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
	if ((a.enter = memtrack_enter_stream(ctx, stream, &prev, &a)) != CUDA_SUCCESS) return a;
	if (!a.other_device) a.op = memtrack_check_capture(stream, &a);
	if (a.other_device || a.capturing || a.op != CUDA_SUCCESS) {
		a.restore = memtrack_leave_stream(ctx, prev, &a);
		return a;
	}
	if (a.foreign && a.event) {
		// The event given is of ctx; the stream's context needs its own.
		a.event = NULL;
		a.spare_unused = 1;
	}
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
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_check_stream reports what memtrack_alloc_async would find of
// stream (another device, a capture) without allocating.
static memtrack_result memtrack_check_stream(CUcontext ctx, uintptr_t handle) {
	memtrack_result a = {0};
	CUcontext prev;
	if ((a.enter = memtrack_enter_stream(ctx, (CUstream)handle, &prev, &a)) != CUDA_SUCCESS) return a;
	if (!a.other_device) a.op = memtrack_check_capture((CUstream)handle, &a);
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_event_destroy destroys an event of a stream of another context,
// once reached: memtrack keeps only events of its own context for reuse.
static void memtrack_event_destroy(CUevent e) { cuEventDestroy(e); }

// memtrack_stream_wait makes the work enqueued on waiter from now on wait
// for the work enqueued on after so far: an event recorded on after, which
// waiter waits for (cuStreamWaitEvent), then destroyed (the driver lets a
// destroyed event complete).
static memtrack_result memtrack_stream_wait(CUcontext ctx, uintptr_t waiter, uintptr_t after) {
	memtrack_result a = {0};
	CUcontext prev;
	if ((a.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return a;
	CUevent e = NULL;
	a.op = cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
	if (a.op == CUDA_SUCCESS) a.op = cuEventRecord(e, (CUstream)after);
	if (a.op == CUDA_SUCCESS) a.op = cuStreamWaitEvent((CUstream)waiter, e, 0);
	if (e) cuEventDestroy(e);
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

import "unsafe"

// Event is a CUDA event (CUevent); the zero Event is none.
type Event struct{ p C.CUevent }

// IsZero reports whether e is no event.
func (e Event) IsZero() bool { return e.p == nil }

// StreamCall is what a stream-ordered operation reports.
type StreamCall struct {
	Call
	Ptr          uintptr // AllocAsync: the allocation
	Event        Event   // FreeAsync: the event recorded after the free
	Retired      bool    // FreeAsync: the free is known to have run (the stream was synchronized)
	Foreign      bool    // the stream is of another context than ctx
	SpareUnused  bool    // FreeAsync: the event given was not used (another context's stream)
	OtherDevice  bool    // the stream is of another device than ctx's: nothing ran
	StreamDevice int     // the stream's device, where OtherDevice
	Capturing    bool    // the stream is capturing a graph: nothing ran
}

func streamCallOf(r C.memtrack_result) StreamCall {
	return StreamCall{
		Call: callOf(r), Ptr: uintptr(r.ptr), Event: Event{r.event}, Retired: r.retired != 0,
		Foreign: r.foreign != 0, SpareUnused: r.spare_unused != 0, OtherDevice: r.other_device != 0,
		StreamDevice: int(r.stream_device), Capturing: r.capturing != 0,
	}
}

// AllocAsync allocates size bytes on stream (cuMemAllocAsync), from the
// current pool of the stream's device, in the stream's context
// (cuStreamGetCtx). A stream of another device than ctx's, or one that is
// capturing a graph (cuStreamIsCapturing), allocates nothing.
func AllocAsync(ctx Context, size int64, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_alloc_async(ctx.p, C.size_t(size), C.uintptr_t(stream)))
}

// CheckStream reports what AllocAsync would find of stream, in ctx, without
// allocating: whether it is of another device, or capturing a graph.
func CheckStream(ctx Context, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_check_stream(ctx.p, C.uintptr_t(stream)))
}

// How FreeAsync learns that its stream has run the free.
type How int

// The ways of learning of a free.
const (
	Untracked  How = C.MEMTRACK_UNTRACKED // nothing after the free
	ByHostFunc How = C.MEMTRACK_BY_HOSTFN // a host function adds its size to the device's retired counter
	ByEvent    How = C.MEMTRACK_BY_EVENT  // an event recorded after the free
)

// FreeAsync frees ptr on stream (cuMemFreeAsync) in the stream's context
// and arranges to learn when it has run, by how: with a host function that
// adds the size packed in token (see HostFuncToken) to its device's retired
// counter, or with event (created where zero, or where the stream is of
// another context) recorded after the free. Where neither can be enqueued
// it synchronizes the stream and reports the free retired.
func FreeAsync(ctx Context, ptr uintptr, stream uintptr, how How, token uintptr, event Event) StreamCall {
	return streamCallOf(C.memtrack_free_async(ctx.p, C.CUdeviceptr(ptr), C.uintptr_t(stream), C.int(how), C.uintptr_t(token), event.p))
}

// HostFuncToken packs the device ordinal and a size for ByHostFunc; ok is
// false where they do not fit (ordinal >= MaxRetireDevices, size >= 2^47).
func HostFuncToken(ordinal int, size int64) (token uintptr, ok bool) {
	if ordinal < 0 || ordinal >= MaxRetireDevices || size < 0 || size >= 1<<47 {
		return 0, false
	}
	return uintptr(uint64(size)<<16 | uint64(ordinal)), true
}

// MaxRetireDevices bounds the device ordinals whose frees host functions
// retire.
const MaxRetireDevices = C.MEMTRACK_RETIRE_DEVICES

// RetiredCounter returns the counter, in C memory, to which the host
// functions of device ordinal add the sizes of the frees they see run. It
// only grows (modulo 2^64); read it with an atomic load.
func RetiredCounter(ordinal int) *uint64 {
	return (*uint64)(unsafe.Pointer(C.memtrack_retired_counter(C.int(ordinal))))
}

// EventsReached queries events in ctx (cuEventQuery), in one call, and
// writes each one's answer to out: Success once its stream has reached it,
// NotReady before, or the error of the query.
func EventsReached(ctx Context, events []Event, out []Result) {
	if len(events) == 0 {
		return
	}
	ev := make([]C.CUevent, len(events))
	for i, e := range events {
		ev[i] = e.p
	}
	res := make([]C.CUresult, len(events))
	C.memtrack_events_reached(ctx.p, &ev[0], &res[0], C.int(len(events)))
	for i := range out[:len(events)] {
		out[i] = Result(res[i])
	}
}

// EventDestroy destroys an event (cuEventDestroy).
func EventDestroy(e Event) { C.memtrack_event_destroy(e.p) }

// StreamWait makes the work enqueued on waiter from now on wait for the
// work enqueued on after so far (an event recorded on after, which waiter
// waits for with cuStreamWaitEvent), in ctx.
func StreamWait(ctx Context, waiter, after uintptr) Call {
	return callOf(C.memtrack_stream_wait(ctx.p, C.uintptr_t(waiter), C.uintptr_t(after)))
}
