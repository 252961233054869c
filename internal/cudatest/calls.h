//go:build cuda

// calls.h: the driver calls of the tests (package cudatest), declared as
// internal/cudadrv/driver.h declares the library's (see there: each line is
// X(name, suffix, version, need, parameters)), with the types only they
// need, from cuda.h (CUDA 11.8); the pool's properties (CUmemPoolProps)
// are driver.h's.

#ifndef MEMTRACK_CUDATEST_CALLS_H
#define MEMTRACK_CUDATEST_CALLS_H

#include "../cudadrv/driver.h"

typedef struct CUgraphExec_st *CUgraphExec;
typedef void (*CUhostFn)(void *data);

enum {
	CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1, // CUgraphInstantiate_flags
};

// CUDATEST_CALLS lists the calls of the tests that the library does not
// make; those it makes (MEMTRACK_CUDA_CALLS) the tests call through a
// table of their own of that list, cudatest_lib.
#define CUDATEST_CALLS(X) \
	X(cuCtxCreate, _v2, 3020, MEMTRACK_ESSENTIAL, (CUcontext *ctx, unsigned int flags, CUdevice dev)) \
	X(cuCtxDestroy, _v2, 4000, MEMTRACK_ESSENTIAL, (CUcontext ctx)) \
	X(cuStreamCreate, , 2000, MEMTRACK_ESSENTIAL, (CUstream *stream, unsigned int flags)) \
	X(cuStreamDestroy, _v2, 4000, MEMTRACK_ESSENTIAL, (CUstream stream)) \
	X(cuStreamQuery, , 2000, MEMTRACK_ESSENTIAL, (CUstream stream)) \
	X(cuLaunchHostFunc, , 10000, MEMTRACK_ESSENTIAL, (CUstream stream, CUhostFn fn, void *data)) \
	X(cuMemsetD8Async, , 3020, MEMTRACK_ESSENTIAL, (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream)) \
	X(cuStreamBeginCapture, _v2, 10010, MEMTRACK_ESSENTIAL, (CUstream stream, CUstreamCaptureMode mode)) \
	X(cuStreamEndCapture, , 10000, MEMTRACK_ESSENTIAL, (CUstream stream, CUgraph *graph)) \
	X(cuGraphGetNodes, , 10000, MEMTRACK_ESSENTIAL, (CUgraph graph, CUgraphNode *nodes, size_t *n)) \
	X(cuGraphDestroy, , 10000, MEMTRACK_ESSENTIAL, (CUgraph graph)) \
	X(cuGraphInstantiateWithFlags, , 11040, MEMTRACK_OPTIONAL, (CUgraphExec *exec, CUgraph graph, unsigned long long flags)) \
	X(cuGraphUpload, , 11010, MEMTRACK_OPTIONAL, (CUgraphExec exec, CUstream stream)) \
	X(cuGraphLaunch, , 10000, MEMTRACK_OPTIONAL, (CUgraphExec exec, CUstream stream)) \
	X(cuGraphExecDestroy, , 10000, MEMTRACK_OPTIONAL, (CUgraphExec exec)) \
	X(cuMemPoolCreate, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool *pool, const CUmemPoolProps *props)) \
	X(cuMemPoolDestroy, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool pool)) \
	X(cuDeviceSetMemPool, , 11020, MEMTRACK_OPTIONAL, (CUdevice dev, CUmemoryPool pool)) \
	X(cuDeviceGetDefaultMemPool, , 11020, MEMTRACK_OPTIONAL, (CUmemoryPool *pool, CUdevice dev)) \
	X(cuMemGetAccess, , 10020, MEMTRACK_OPTIONAL, (unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr))

struct cudatest_cuda {
	CUDATEST_CALLS(MEMTRACK_CUDA_FIELD)
};
extern struct cudatest_cuda cudatest_cu; // the tests' calls
extern struct memtrack_cuda cudatest_lib; // the library's, in a table of the tests'

// cudatest_table returns the calls for load.go to fill, and their number in
// *n.
const struct memtrack_cuda_entry *cudatest_table(int *n);

// cudatest_handle is what a call that makes something returns: its handle
// (a context, stream, event, pool or device pointer) and the result.
typedef struct {
	uintptr_t h;
	CUresult r;
} cudatest_handle;

// CUDATEST_CALL calls f, a call of cudatest_cu or cudatest_lib, or answers
// CUDA_ERROR_NOT_SUPPORTED where the driver lacks it (an optional call), or
// before Load.
#define CUDATEST_CALL(f, ...) ((f) ? (f)(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

#endif
