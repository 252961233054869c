//go:build cuda

// context.h: how the C helpers of this package run in a device's primary
// context on whatever thread the goroutine is on: make the context current,
// operate, and put the thread's previous context back, each result reported
// apart in a memtrack_result.

#ifndef MEMTRACK_CUDA_CONTEXT_H
#define MEMTRACK_CUDA_CONTEXT_H

#include <stddef.h>

#include "driver.h"

// memtrack_result is what one operation reports: the three results apart,
// so that the operation's own result decides (see settle in memtrack's
// backend_cuda.go), and what the operation produced.
typedef struct {
	CUresult enter;     // getting or switching the context; the operation ran only if 0
	CUresult op;        // the operation
	CUresult restore;   // putting the previous context back
	CUdeviceptr ptr;    // an allocation
	size_t free, total; // memtrack_meminfo: cuMemGetInfo
	CUevent event;      // memtrack_free_async: the event recorded after the free
	int retired;        // memtrack_free_async: the free is known to be executed
	int foreign;        // the stream is of another context than ctx (memtrack_enter_stream)
	int spare_unused;   // memtrack_free_async: the event given was not used
	unsigned long long seq; // memtrack_free_async: the event's number among those recorded on its stream
	CUcontext stream_ctx; // the stream's context (memtrack_enter_stream)
	CUdevice stream_device; // the stream's device, where other_device
	int other_device;   // the stream is of another device: the operation did not run
	int capturing;      // the stream's CUstreamCaptureStatus: where not 0 (NONE), the operation did not run
	cuuint64_t capture_id; // the stream's capture, where it is active (memtrack_check_capture)
	int invalidated;    // the operation, refused in the active capture capture_id, left it invalidated
} memtrack_result;

// memtrack_enter makes ctx current on the calling thread and returns in
// *prev the context that was.
static inline CUresult memtrack_enter(CUcontext ctx, CUcontext *prev) {
	*prev = NULL;
	CUresult r = memtrack_cu.cuCtxGetCurrent(prev);
	if (r == CUDA_SUCCESS && *prev != ctx) r = memtrack_cu.cuCtxSetCurrent(ctx);
	return r;
}

// memtrack_leave makes prev current again, where memtrack_enter changed it.
static inline CUresult memtrack_leave(CUcontext ctx, CUcontext prev) {
	return prev == ctx ? CUDA_SUCCESS : memtrack_cu.cuCtxSetCurrent(prev);
}

// memtrack_default_stream reports whether stream is one of the handles that
// name the calling thread's current context's default stream: NULL and
// CU_STREAM_LEGACY (the legacy default stream), CU_STREAM_PER_THREAD (the
// thread's own).
static inline int memtrack_default_stream(CUstream stream) {
	return stream == NULL || stream == MEMTRACK_STREAM_LEGACY || stream == MEMTRACK_STREAM_PER_THREAD;
}

// memtrack_enter_stream makes current, on the calling thread, the context
// that stream belongs to, so that an event recorded on the stream is of its
// context, as cuEventRecord requires: cuStreamGetCtx's answer, or, for a
// default stream's handle, ctx itself without asking (cuStreamGetCtx
// returns the calling thread's current context for those). It returns in
// *prev the context that was current, reports the stream's context in
// res->stream_ctx, a stream of another context in res->foreign and one of
// another device than ctx's in res->other_device, with its device in
// res->stream_device (nothing else should then run). A stream whose capture
// the driver invalidated, of which cuStreamGetCtx answers
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ("further use of any streams which
// are being captured ... is invalid and will return an error, until stream
// capture is ended", CUDA Programming Guide, Stream Capture: Invalidation;
// an H200 answered so on every thread, cuCtxGetCurrent answering 0), is
// reported in res->capturing, in ctx: nothing else should run. Undo it with
// memtrack_leave_stream.
static inline CUresult memtrack_enter_stream(CUcontext ctx, CUstream stream, CUcontext *prev, memtrack_result *res) {
	CUresult r = memtrack_enter(ctx, prev);
	if (r != CUDA_SUCCESS) return r;
	res->stream_ctx = ctx;
	if (memtrack_default_stream(stream)) return CUDA_SUCCESS;
	CUcontext sctx = NULL;
	r = memtrack_cu.cuStreamGetCtx(stream, &sctx);
	if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
		res->capturing = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
		return CUDA_SUCCESS;
	}
	if (r != CUDA_SUCCESS || sctx == ctx) {
		if (r != CUDA_SUCCESS) memtrack_leave(ctx, *prev);
		return r;
	}
	res->foreign = 1;
	res->stream_ctx = sctx;
	CUdevice want = 0;
	r = memtrack_cu.cuCtxGetDevice(&want);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuCtxSetCurrent(sctx);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuCtxGetDevice(&res->stream_device);
	if (r == CUDA_SUCCESS && res->stream_device != want) res->other_device = 1;
	if (r != CUDA_SUCCESS) memtrack_cu.cuCtxSetCurrent(*prev);
	return r;
}

// memtrack_check_capture reports in res->capturing the capture status of
// stream (not 0 where it takes part in a capture), and in res->capture_id
// the capture's ID where it is active, in one driver call:
// cuStreamGetCaptureInfo_v2 (CUDA 11.3), or, on a driver without it,
// cuStreamIsCapturing, which gives no ID. It returns why it cannot say,
// where it cannot.
static inline CUresult memtrack_check_capture(CUstream stream, memtrack_result *res) {
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	CUresult r = memtrack_cu.cuStreamGetCaptureInfo ? memtrack_cu.cuStreamGetCaptureInfo(stream, &st, &id, NULL, NULL, NULL)
							 : memtrack_cu.cuStreamIsCapturing(stream, &st);
	if (r == CUDA_SUCCESS) res->capturing = st;
	if (r == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE) res->capture_id = id;
	return r;
}

// memtrack_ask_capture is memtrack_check_capture where the capture's ID
// is wanted only where the stream captures: cuStreamIsCapturing, which
// costs half of cuStreamGetCaptureInfo on an H200 (17 and 33 ns a call),
// and cuStreamGetCaptureInfo only where a capture is under way.
static inline CUresult memtrack_ask_capture(CUstream stream, memtrack_result *res) {
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult r = memtrack_cu.cuStreamIsCapturing(stream, &st);
	if (r != CUDA_SUCCESS || st == CU_STREAM_CAPTURE_STATUS_NONE || !memtrack_cu.cuStreamGetCaptureInfo) {
		if (r == CUDA_SUCCESS) res->capturing = st;
		return r;
	}
	return memtrack_check_capture(stream, res);
}

// memtrack_relaxed sets the calling thread's stream capture mode to relaxed
// and returns the one it had, for memtrack_unrelax: a potentially unsafe
// call (cuMemAlloc, cuMemFree; on an H200 the pool's attributes and trim
// and cuEventQuery too, doc.go) made in between then neither fails nor
// invalidates a capture that another thread, or this one, has begun in
// global or thread-local mode (cuThreadExchangeStreamCaptureMode). Every
// call memtrack makes on its own account runs so.
static inline CUstreamCaptureMode memtrack_relaxed(void) {
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	if (memtrack_cu.cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS) m = CU_STREAM_CAPTURE_MODE_RELAXED;
	return m;
}

static inline void memtrack_unrelax(CUstreamCaptureMode m) {
	if (m != CU_STREAM_CAPTURE_MODE_RELAXED) memtrack_cu.cuThreadExchangeStreamCaptureMode(&m);
}

// memtrack_on_device runs op(dev, arg) on dev, the device of ctx, in ctx
// and in relaxed stream-capture mode, so that none of op's calls fails for,
// or invalidates, a capture that this thread or another has begun; call
// gets the context's results and op's.
static inline void memtrack_on_device(CUcontext ctx, memtrack_result *call, CUresult (*op)(CUdevice dev, void *arg), void *arg) {
	CUcontext prev;
	if ((call->enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return;
	CUstreamCaptureMode mode = memtrack_relaxed();
	CUdevice dev = 0;
	call->op = memtrack_cu.cuCtxGetDevice(&dev);
	if (call->op == CUDA_SUCCESS) call->op = op(dev, arg);
	memtrack_unrelax(mode);
	call->restore = memtrack_leave(ctx, prev);
}

// memtrack_leave_stream makes prev current again after memtrack_enter_stream.
static inline CUresult memtrack_leave_stream(CUcontext ctx, CUcontext prev, const memtrack_result *res) {
	return res->foreign ? memtrack_cu.cuCtxSetCurrent(prev) : memtrack_leave(ctx, prev);
}

#endif
