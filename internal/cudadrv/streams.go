//go:build cuda

package cudadrv

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync), how a free
// is learned to have run (an event recorded after it), and the capture a
// stream takes part in. Each call makes the stream's context current,
// operates and restores the thread's context, in one cgo call, so that the
// goroutine need not be locked to its thread.

/*
#include <stdint.h>

#include "context.h"

// memtrack_alloc_async allocates size bytes on stream from the current pool
// of the stream's device, in the stream's context; a stream of another
// device than ctx's allocates nothing (other_device).
static memtrack_result memtrack_alloc_async(uintptr_t c, size_t size, uintptr_t handle) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result a = {0};
	if (!memtrack_cu.cuMemAllocAsync) {
		a.op = CUDA_ERROR_NOT_SUPPORTED;
		return a;
	}
	CUcontext prev;
	if ((a.enter = memtrack_enter_stream(ctx, (CUstream)handle, &prev, &a)) != CUDA_SUCCESS) return a;
	if (!a.other_device) a.op = memtrack_check_capture((CUstream)handle, &a);
	if (!a.other_device && !a.capturing && a.op == CUDA_SUCCESS) a.op = memtrack_cu.cuMemAllocAsync(&a.ptr, size, (CUstream)handle);
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_free_async frees ptr on stream and arranges to learn when the
// stream has executed the free: with event (created if NULL) recorded after
// the free. Where the event cannot be recorded, it waits for the stream and
// reports the free retired.
static memtrack_result memtrack_free_async(uintptr_t c, CUdeviceptr ptr, uintptr_t handle, CUevent event) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result a = {0};
	if (!memtrack_cu.cuMemFreeAsync) {
		a.op = CUDA_ERROR_NOT_SUPPORTED;
		return a;
	}
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
	a.op = memtrack_cu.cuMemFreeAsync(ptr, stream);
	if (a.op == CUDA_SUCCESS) {
		CUresult r = a.event ? CUDA_SUCCESS : memtrack_cu.cuEventCreate(&a.event, CU_EVENT_DISABLE_TIMING);
		if (r == CUDA_SUCCESS) r = memtrack_cu.cuEventRecord(a.event, stream);
		if (r != CUDA_SUCCESS) {
			memtrack_cu.cuStreamSynchronize(stream);
			a.retired = 1;
		}
	}
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_check_stream reports what memtrack_alloc_async would find of
// stream (another device, a capture) without allocating; where any_device,
// it asks for the capture of a stream of another device too.
static memtrack_result memtrack_check_stream(uintptr_t c, uintptr_t handle, int any_device) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result a = {0};
	CUcontext prev;
	if ((a.enter = memtrack_enter_stream(ctx, (CUstream)handle, &prev, &a)) != CUDA_SUCCESS) return a;
	if (!a.other_device || any_device) a.op = memtrack_check_capture((CUstream)handle, &a);
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_event_destroy destroys an event of a stream of another context,
// once reached: memtrack keeps only events of its own context for reuse.
static void memtrack_event_destroy(CUevent e) { memtrack_cu.cuEventDestroy(e); }

// memtrack_events_reached queries the n events in ctx, in one call, and
// writes each one's answer to out: CUDA_SUCCESS once its stream has reached
// it, CUDA_ERROR_NOT_READY before. Where the context cannot be made current,
// or the previous one current again, that failure is the answer of every
// event that would have answered CUDA_SUCCESS.
static void memtrack_events_reached(uintptr_t c, const CUevent *events, CUresult *out, int n) {
	CUcontext ctx = (CUcontext)c;
	CUcontext prev;
	CUresult r = memtrack_enter(ctx, &prev);
	for (int i = 0; i < n; i++) out[i] = r == CUDA_SUCCESS ? memtrack_cu.cuEventQuery(events[i]) : r;
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

// The handles of the default streams: 0 and StreamLegacy name the legacy
// default stream of the calling thread's current context, StreamPerThread
// the thread's own default stream (cuda.h's CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD).
const (
	StreamLegacy    uintptr = 0x1
	StreamPerThread uintptr = 0x2
)

// StreamCall is what a stream-ordered operation reports.
type StreamCall struct {
	Call
	Ptr          uintptr // AllocAsync: the allocation
	Event        Event   // FreeAsync: the event recorded after the free
	Retired      bool    // FreeAsync: the free is known to have run (the stream was synchronized)
	StreamCtx    Context // the stream's context
	Foreign      bool    // the stream is of another context than ctx
	SpareUnused  bool    // FreeAsync: the event given was not used (another context's stream)
	OtherDevice  bool    // the stream is of another device than ctx's: nothing ran
	StreamDevice int     // the stream's device, where OtherDevice
	Capturing    bool    // the stream is capturing a graph: nothing ran
	CaptureID    uint64  // where Capturing and the capture is active: its ID, unique in the process (0 where the driver cannot say, before CUDA 11.3)
}

func streamCallOf(r C.memtrack_result) StreamCall {
	return StreamCall{
		Call: callOf(r), Ptr: uintptr(r.ptr), Event: Event{r.event}, Retired: r.retired != 0,
		StreamCtx: Context(uintptr(unsafe.Pointer(r.stream_ctx))), Foreign: r.foreign != 0, SpareUnused: r.spare_unused != 0, OtherDevice: r.other_device != 0,
		StreamDevice: int(r.stream_device), Capturing: r.capturing != 0, CaptureID: uint64(r.capture_id),
	}
}

// AllocAsync allocates size bytes on stream (cuMemAllocAsync), from the
// current pool of the stream's device, in the stream's context
// (cuStreamGetCtx; ctx itself for a default stream's handle, which the
// driver is not asked about). A stream of another device than ctx's, or
// one that is capturing a graph (cuStreamGetCaptureInfo_v2, which gives the
// capture's ID in the same call; cuStreamIsCapturing before CUDA 11.3),
// allocates nothing. Where the driver lacks cuMemAllocAsync the result is
// CUDA_ERROR_NOT_SUPPORTED (MemPools says why); so for FreeAsync and
// cuMemFreeAsync.
func AllocAsync(ctx Context, size int64, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_alloc_async(C.uintptr_t(ctx), C.size_t(size), C.uintptr_t(stream)))
}

// CheckStream reports what AllocAsync would find of stream, in ctx, without
// allocating: whether it is of another device, or capturing a graph, and
// which capture.
func CheckStream(ctx Context, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_check_stream(C.uintptr_t(ctx), C.uintptr_t(stream), 0))
}

// FreeAsync frees ptr on stream (cuMemFreeAsync) in the stream's context
// and arranges to learn when it has run: with event (created where zero, or
// where the stream is of another context) recorded after the free. Where
// the event cannot be recorded it synchronizes the stream and reports the
// free retired.
func FreeAsync(ctx Context, ptr uintptr, stream uintptr, event Event) StreamCall {
	return streamCallOf(C.memtrack_free_async(C.uintptr_t(ctx), C.CUdeviceptr(ptr), C.uintptr_t(stream), event.p))
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
	C.memtrack_events_reached(C.uintptr_t(ctx), &ev[0], &res[0], C.int(len(events)))
	for i := range out[:len(events)] {
		out[i] = Result(res[i])
	}
}

// EventDestroy destroys an event (cuEventDestroy).
func EventDestroy(e Event) { C.memtrack_event_destroy(e.p) }

// CaptureStatus is a stream's capture status (CUstreamCaptureStatus).
type CaptureStatus int

// The capture statuses of cuda.h.
const (
	CaptureNone        CaptureStatus = C.CU_STREAM_CAPTURE_STATUS_NONE        // not capturing
	CaptureOngoing     CaptureStatus = C.CU_STREAM_CAPTURE_STATUS_ACTIVE      // capturing
	CaptureInvalidated CaptureStatus = C.CU_STREAM_CAPTURE_STATUS_INVALIDATED // capturing, but the capture failed: it will end with no graph
)

// Capture is a stream's part in a capture (cuStreamGetCaptureInfo_v2).
type Capture struct {
	Status CaptureStatus
	// ID is the capture's ID, "unique over the lifetime of the process",
	// where Status is CaptureOngoing; 0 otherwise. Streams that joined a
	// capture by waiting for an event recorded in it share its ID.
	ID uint64
}

// CaptureInfo returns stream's capture status and, where it is active,
// the capture's ID, asked in the stream's context (cuStreamGetCtx), a
// stream of another device's too, in the one driver call AllocAsync makes
// (cuStreamGetCaptureInfo_v2; cuStreamIsCapturing, which gives no ID,
// before CUDA 11.3).
func CaptureInfo(ctx Context, stream uintptr) (Capture, Call) {
	r := C.memtrack_check_stream(C.uintptr_t(ctx), C.uintptr_t(stream), 1)
	return Capture{Status: CaptureStatus(r.capturing), ID: uint64(r.capture_id)}, callOf(r)
}
