//go:build cuda

// cuda_context.h: how the C helpers of cuda_calls.go and cuda_stream.go run
// in a device's primary context on whatever thread the goroutine is on:
// make the context current, operate, and put the thread's previous context
// back, each result reported apart in a memtrack_result.

#ifndef MEMTRACK_CUDA_CONTEXT_H
#define MEMTRACK_CUDA_CONTEXT_H

#include <cuda.h>
#include <stddef.h>

// memtrack_result is what one operation reports: the three results apart,
// so that the operation's own result decides (see settle in
// backend_cuda.go), and what the operation produced.
typedef struct {
	CUresult enter;     // getting or switching the context; the operation ran only if 0
	CUresult op;        // the operation
	CUresult restore;   // putting the previous context back
	CUdeviceptr ptr;    // an allocation
	size_t free, total; // memtrack_meminfo: cuMemGetInfo
	CUevent event;      // memtrack_free_async: the event recorded after the free
	int retired;        // memtrack_free_async: the free is known to be executed
} memtrack_result;

// memtrack_enter makes ctx current on the calling thread and returns in
// *prev the context that was.
static inline CUresult memtrack_enter(CUcontext ctx, CUcontext *prev) {
	*prev = NULL;
	CUresult r = cuCtxGetCurrent(prev);
	if (r == CUDA_SUCCESS && *prev != ctx) r = cuCtxSetCurrent(ctx);
	return r;
}

// memtrack_leave makes prev current again, where memtrack_enter changed it.
static inline CUresult memtrack_leave(CUcontext ctx, CUcontext prev) {
	return prev == ctx ? CUDA_SUCCESS : cuCtxSetCurrent(prev);
}

#endif
