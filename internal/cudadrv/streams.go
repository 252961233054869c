//go:build cuda

package cudadrv

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync) and how a
// free is learned to have run: an event recorded after it. Each call makes the
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

enum { MEMTRACK_UNTRACKED, MEMTRACK_BY_EVENT };

// memtrack_free_async frees ptr on stream and, where how is
// MEMTRACK_BY_EVENT, arranges to learn when the stream has executed the free:
// with event (created if NULL) recorded after the free. Where the event
// cannot be recorded, it waits for the stream and reports the free retired.
static memtrack_result memtrack_free_async(CUcontext ctx, CUdeviceptr ptr, uintptr_t handle, int how, CUevent event) {
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
	if (a.op == CUDA_SUCCESS && how == MEMTRACK_BY_EVENT) {
		CUresult r = a.event ? CUDA_SUCCESS : cuEventCreate(&a.event, CU_EVENT_DISABLE_TIMING);
		if (r == CUDA_SUCCESS) r = cuEventRecord(a.event, stream);
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
	Untracked How = C.MEMTRACK_UNTRACKED // nothing after the free
	ByEvent   How = C.MEMTRACK_BY_EVENT  // an event recorded after the free
)

// FreeAsync frees ptr on stream (cuMemFreeAsync) in the stream's context
// and, by how, arranges to learn when it has run: with event (created where
// zero, or where the stream is of another context) recorded after the free.
// Where the event cannot be recorded it synchronizes the stream and reports
// the free retired.
func FreeAsync(ctx Context, ptr uintptr, stream uintptr, how How, event Event) StreamCall {
	return streamCallOf(C.memtrack_free_async(ctx.p, C.CUdeviceptr(ptr), C.uintptr_t(stream), C.int(how), event.p))
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
