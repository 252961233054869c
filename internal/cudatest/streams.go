//go:build cuda

package cudatest

// Streams and events of one's own, in the calling thread's current context,
// and the raw stream-ordered calls the benchmarks compare with.

/*
#include <stdint.h>

#include "calls.h"

static cudatest_handle cudatest_stream_create(void) {
	CUstream s = NULL;
	CUresult r = CUDATEST_CALL(cudatest_cu.cuStreamCreate, &s, 0);
	return (cudatest_handle){(uintptr_t)s, r};
}

static CUresult cudatest_stream_destroy(uintptr_t s) { return CUDATEST_CALL(cudatest_cu.cuStreamDestroy, (CUstream)s); }
static CUresult cudatest_stream_sync(uintptr_t s) { return CUDATEST_CALL(cudatest_lib.cuStreamSynchronize, (CUstream)s); }
static CUresult cudatest_stream_query(uintptr_t s) { return CUDATEST_CALL(cudatest_cu.cuStreamQuery, (CUstream)s); }

static cudatest_handle cudatest_stream_ctx(uintptr_t s) {
	CUcontext c = NULL;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuStreamGetCtx, (CUstream)s, &c);
	return (cudatest_handle){(uintptr_t)c, r};
}

static CUresult cudatest_memset_async(uintptr_t dst, unsigned char v, size_t n, uintptr_t s) {
	return CUDATEST_CALL(cudatest_cu.cuMemsetD8Async, (CUdeviceptr)dst, v, n, (CUstream)s);
}

// cudatest_stream_wait makes the work enqueued on waiter from now on wait
// for the work enqueued on after so far: an event recorded on after, which
// waiter waits for, then destroyed (the driver lets a destroyed event
// complete).
static CUresult cudatest_stream_wait(uintptr_t waiter, uintptr_t after) {
	CUevent e = NULL;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuEventRecord, e, (CUstream)after);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuStreamWaitEvent, (CUstream)waiter, e, 0);
	if (e) CUDATEST_CALL(cudatest_lib.cuEventDestroy, e);
	return r;
}

// cudatest_record_query records a new event on stream and queries it at
// once.
static cudatest_handle cudatest_record_query(uintptr_t stream) {
	CUevent e = NULL;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuEventRecord, e, (CUstream)stream);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuEventQuery, e);
	return (cudatest_handle){(uintptr_t)e, r};
}

// cudatest_record_again records event e, of the current context, on stream
// once more and queries it at once.
static CUresult cudatest_record_again(uintptr_t e, uintptr_t stream) {
	CUresult r = CUDATEST_CALL(cudatest_lib.cuEventRecord, (CUevent)e, (CUstream)stream);
	return r == CUDA_SUCCESS ? CUDATEST_CALL(cudatest_lib.cuEventQuery, (CUevent)e) : r;
}

static CUresult cudatest_event_query(uintptr_t e) { return CUDATEST_CALL(cudatest_lib.cuEventQuery, (CUevent)e); }
static CUresult cudatest_event_destroy(uintptr_t e) { return CUDATEST_CALL(cudatest_lib.cuEventDestroy, (CUevent)e); }

// cudatest_enter makes ctx current and returns the context that was in
// *prev; cudatest_leave puts it back.
static CUresult cudatest_enter(CUcontext ctx, CUcontext *prev) {
	CUresult r = CUDATEST_CALL(cudatest_lib.cuCtxGetCurrent, prev);
	return r == CUDA_SUCCESS && *prev != ctx ? CUDATEST_CALL(cudatest_lib.cuCtxSetCurrent, ctx) : r;
}

static CUresult cudatest_leave(CUcontext ctx, CUcontext prev) {
	return prev == ctx ? CUDA_SUCCESS : CUDATEST_CALL(cudatest_lib.cuCtxSetCurrent, prev);
}

// cudatest_alloc_async is cuMemAllocAsync in ctx, which it makes current
// and restores, as memtrack's own call does.
static cudatest_handle cudatest_alloc_async(uintptr_t ctx, size_t size, uintptr_t stream) {
	CUcontext prev;
	CUdeviceptr p = 0;
	CUresult r = cudatest_enter((CUcontext)ctx, &prev);
	if (r != CUDA_SUCCESS) return (cudatest_handle){0, r};
	r = CUDATEST_CALL(cudatest_lib.cuMemAllocAsync, &p, size, (CUstream)stream);
	CUresult r2 = cudatest_leave((CUcontext)ctx, prev);
	return (cudatest_handle){(uintptr_t)p, r != CUDA_SUCCESS ? r : r2};
}

// cudatest_free_async is cuMemFreeAsync in ctx, followed where event is
// not 0 by cuEventRecord of event on the stream.
static CUresult cudatest_free_async(uintptr_t ctx, uintptr_t ptr, uintptr_t stream, uintptr_t event) {
	CUcontext prev;
	CUresult r = cudatest_enter((CUcontext)ctx, &prev);
	if (r != CUDA_SUCCESS) return r;
	r = CUDATEST_CALL(cudatest_lib.cuMemFreeAsync, (CUdeviceptr)ptr, (CUstream)stream);
	if (r == CUDA_SUCCESS && event) r = CUDATEST_CALL(cudatest_lib.cuEventRecord, (CUevent)event, (CUstream)stream);
	CUresult r2 = cudatest_leave((CUcontext)ctx, prev);
	return r != CUDA_SUCCESS ? r : r2;
}

// cudatest_checks makes the driver calls memtrack's stream-ordered calls
// make beside the operation, in the context current: the stream's context
// for a stream of one's own (cuStreamGetCtx), and its capture
// (cuStreamIsCapturing).
static CUresult cudatest_checks(CUstream stream) {
	CUresult r = CUDA_SUCCESS;
	if (stream != NULL && stream != (CUstream)0x1 && stream != (CUstream)0x2) {
		CUcontext c;
		r = CUDATEST_CALL(cudatest_lib.cuStreamGetCtx, stream, &c);
	}
	CUstreamCaptureStatus st;
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuStreamIsCapturing, stream, &st);
	return r;
}

// cudatest_alloc_checked and cudatest_free_async_checked are
// cuMemAllocAsync and cuMemFreeAsync in ctx, in one crossing each as
// memtrack's, each with the checks memtrack's make (cudatest_checks).
static CUresult cudatest_alloc_checked(uintptr_t ctx, size_t size, uintptr_t stream, CUdeviceptr *p) {
	CUcontext prev;
	CUresult r = cudatest_enter((CUcontext)ctx, &prev);
	if (r != CUDA_SUCCESS) return r;
	r = cudatest_checks((CUstream)stream);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuMemAllocAsync, p, size, (CUstream)stream);
	CUresult r2 = cudatest_leave((CUcontext)ctx, prev);
	return r != CUDA_SUCCESS ? r : r2;
}

static cudatest_handle cudatest_alloc_async_checked(uintptr_t ctx, size_t size, uintptr_t stream) {
	CUdeviceptr p = 0;
	CUresult r = cudatest_alloc_checked(ctx, size, stream, &p);
	return (cudatest_handle){(uintptr_t)p, r};
}

static CUresult cudatest_free_async_checked(uintptr_t ctx, uintptr_t ptr, uintptr_t stream) {
	CUcontext prev;
	CUresult r = cudatest_enter((CUcontext)ctx, &prev);
	if (r != CUDA_SUCCESS) return r;
	r = cudatest_checks((CUstream)stream);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuMemFreeAsync, (CUdeviceptr)ptr, (CUstream)stream);
	CUresult r2 = cudatest_leave((CUcontext)ctx, prev);
	return r != CUDA_SUCCESS ? r : r2;
}

static cudatest_handle cudatest_event_create(uintptr_t ctx) {
	CUcontext prev;
	CUevent e = NULL;
	CUresult r = cudatest_enter((CUcontext)ctx, &prev);
	if (r != CUDA_SUCCESS) return (cudatest_handle){0, r};
	r = CUDATEST_CALL(cudatest_lib.cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
	CUresult r2 = cudatest_leave((CUcontext)ctx, prev);
	return (cudatest_handle){(uintptr_t)e, r != CUDA_SUCCESS ? r : r2};
}
*/
import "C"

import (
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
)

// StreamCreate creates a blocking stream in the current context
// (cuStreamCreate).
func StreamCreate() (uintptr, cudadrv.Result) { return handleOf(C.cudatest_stream_create()) }

// StreamDestroy destroys a stream (cuStreamDestroy).
func StreamDestroy(s uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_stream_destroy(C.uintptr_t(s)))
}

// StreamSynchronize waits until s has executed everything enqueued on it
// (cuStreamSynchronize), in the current context.
func StreamSynchronize(s uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_stream_sync(C.uintptr_t(s)))
}

// StreamQuery reports whether s has executed everything enqueued on it
// (cuStreamQuery: Success, or NotReady).
func StreamQuery(s uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_stream_query(C.uintptr_t(s)))
}

// StreamContext returns the context s belongs to (cuStreamGetCtx).
func StreamContext(s uintptr) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_stream_ctx(C.uintptr_t(s)))
}

// MemsetD8Async enqueues on s the setting of n bytes at dst to v
// (cuMemsetD8Async), in the current context.
func MemsetD8Async(dst uintptr, v byte, n int64, s uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_memset_async(C.uintptr_t(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
}

// StreamWait makes the work enqueued on waiter from now on wait for the
// work enqueued on after so far (an event recorded on after, which waiter
// waits for with cuStreamWaitEvent), in the current context.
func StreamWait(waiter, after uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_stream_wait(C.uintptr_t(waiter), C.uintptr_t(after)))
}

// RecordQuery records a new event on stream, in the current context, and
// queries it at once (cuEventQuery): Success if the stream had nothing
// before it left to run, NotReady if it had. The event is returned for
// EventQuery and EventDestroy.
func RecordQuery(stream uintptr) (event uintptr, _ cudadrv.Result) {
	return handleOf(C.cudatest_record_query(C.uintptr_t(stream)))
}

// RecordAgain records event, of the current context, on stream once more
// (cuEventRecord) and queries it at once (cuEventQuery), in one cgo call:
// Success if the stream had nothing before it left to run, NotReady if it
// had. It is the event's own cost in learning when a free has executed.
func RecordAgain(event, stream uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_record_again(C.uintptr_t(event), C.uintptr_t(stream)))
}

// EventCreate creates an event without timing in ctx (cuEventCreate), for
// FreeAsync.
func EventCreate(ctx uintptr) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_event_create(C.uintptr_t(ctx)))
}

// EventQuery reports whether the stream of event has reached it
// (cuEventQuery: Success, or NotReady).
func EventQuery(event uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_event_query(C.uintptr_t(event)))
}

// EventDestroy destroys an event (cuEventDestroy).
func EventDestroy(event uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_event_destroy(C.uintptr_t(event)))
}

// AllocAsync is the raw cuMemAllocAsync of size bytes on stream, in ctx,
// which it makes current and restores in the same cgo call, as memtrack's
// own AllocAsync does.
func AllocAsync(ctx uintptr, size int64, stream uintptr) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_alloc_async(C.uintptr_t(ctx), C.size_t(size), C.uintptr_t(stream)))
}

// FreeAsync is the raw cuMemFreeAsync of ptr on stream, in ctx, and, where
// event is not 0, cuEventRecord of event on the stream after it: the one
// stream operation that learning when a free has executed takes.
func FreeAsync(ctx, ptr, stream, event uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_free_async(C.uintptr_t(ctx), C.uintptr_t(ptr), C.uintptr_t(stream), C.uintptr_t(event)))
}

// AllocAsyncChecked is AllocAsync with the driver calls memtrack's
// AllocAsync makes beside cuMemAllocAsync: the stream's context, for a
// stream of one's own (cuStreamGetCtx), and its capture
// (cuStreamIsCapturing), in the same crossing.
func AllocAsyncChecked(ctx uintptr, size int64, stream uintptr) (uintptr, cudadrv.Result) {
	return handleOf(C.cudatest_alloc_async_checked(C.uintptr_t(ctx), C.size_t(size), C.uintptr_t(stream)))
}

// FreeAsyncChecked is FreeAsync, without an event, with the driver calls
// memtrack's FreeAsync makes beside cuMemFreeAsync, as AllocAsyncChecked.
func FreeAsyncChecked(ctx, ptr, stream uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_free_async_checked(C.uintptr_t(ctx), C.uintptr_t(ptr), C.uintptr_t(stream)))
}

// NewStream creates a stream in ctx (StreamCreate), which tb's cleanup
// destroys; tb fails where either cannot be done.
func NewStream(tb testing.TB, ctx uintptr) uintptr {
	tb.Helper()
	var s uintptr
	if r := InContext(ctx, func() {
		var r cudadrv.Result
		if s, r = StreamCreate(); r != cudadrv.Success {
			tb.Fatalf("cuStreamCreate: CUresult %d", r)
		}
	}); r != cudadrv.Success {
		tb.Fatalf("making the stream's context current: CUresult %d", r)
	}
	tb.Cleanup(func() {
		var r cudadrv.Result
		if r2 := InContext(ctx, func() { r = StreamDestroy(s) }); r2 != cudadrv.Success || r != cudadrv.Success {
			tb.Errorf("cuStreamDestroy: CUresult %d (context: %d)", r, r2)
		}
	})
	return s
}
