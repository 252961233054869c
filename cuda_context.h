//go:build cuda

// cuda_context.h: how the C helpers of cuda_calls.go and cuda_stream.go run
// in a device's primary context on whatever thread the goroutine is on:
// make the context current, operate, and put the thread's previous context
// back, each result reported apart.

#ifndef MEMTRACK_CUDA_CONTEXT_H
#define MEMTRACK_CUDA_CONTEXT_H

#include <cuda.h>

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
