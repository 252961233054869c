//go:build cuda

package cudadrv

// The chunk in which a device's memory pools reserve memory, learned by a
// probe of a pool of memtrack's own.

/*
#include <stdint.h>
#include <string.h>

#include "context.h"

typedef struct {
	memtrack_result call;
	cuuint64_t chunk; // the probe pool's reservation for one byte
	cuuint64_t used;  // the probe pool's used figure then
} memtrack_pool_chunk;

// memtrack_pool_probe makes, on device dev, a memory pool of its own (pinned
// device memory, no shareable handle, the default release threshold of 0)
// and a non-blocking stream of its own, allocates 1 byte from the pool on
// the stream (cuMemAllocFromPoolAsync), reads what the pool reserved for it
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), frees the byte on the stream,
// synchronizes the stream, and destroys the stream and the pool, which
// gives the pool's memory back. The device's current pool, its default
// pool and every stream but the probe's own are left alone.
static CUresult memtrack_pool_probe(CUdevice dev, void *arg) {
	memtrack_pool_chunk *p = arg;
	CUmemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = dev;
	CUmemoryPool pool = NULL;
	CUstream s = NULL;
	CUdeviceptr ptr = 0;
	CUresult r = memtrack_cu.cuMemPoolCreate(&pool, &props);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuMemAllocFromPoolAsync(&ptr, 1, pool, s);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &p->chunk);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &p->used);
	if (ptr) {
		CUresult f = memtrack_cu.cuMemFreeAsync(ptr, s);
		if (r == CUDA_SUCCESS) r = f;
	}
	if (s) {
		CUresult f = memtrack_cu.cuStreamSynchronize(s);
		if (r == CUDA_SUCCESS) r = f;
		f = memtrack_cu.cuStreamDestroy(s);
		if (r == CUDA_SUCCESS) r = f;
	}
	if (pool) {
		CUresult f = memtrack_cu.cuMemPoolDestroy(pool);
		if (r == CUDA_SUCCESS) r = f;
	}
	return r;
}

// memtrack_pool_chunk runs memtrack_pool_probe on the device of ctx
// (memtrack_on_device).
static memtrack_pool_chunk memtrack_pool_chunk_of(uintptr_t c) {
	CUcontext ctx = (CUcontext)c;
	memtrack_pool_chunk p;
	memset(&p, 0, sizeof p);
	if (!memtrack_cu.cuMemPoolCreate || !memtrack_cu.cuMemPoolDestroy || !memtrack_cu.cuMemAllocFromPoolAsync ||
	    !memtrack_cu.cuMemFreeAsync || !memtrack_cu.cuMemPoolGetAttribute || !memtrack_cu.cuStreamCreate ||
	    !memtrack_cu.cuStreamDestroy) {
		p.call.op = CUDA_ERROR_NOT_SUPPORTED;
		return p;
	}
	memtrack_on_device(ctx, &p.call, memtrack_pool_probe, &p);
	return p;
}
*/
import "C"

// PoolProbe is what PoolChunk found.
type PoolProbe struct {
	// Chunk is what the probe pool reserved for an allocation of 1 byte:
	// the chunk in which the device's memory pools reserve memory.
	Chunk int64
	// Used is the probe pool's used figure then: the byte, as the pool
	// rounds it.
	Used int64
}

// PoolChunks fails, with a *MissingError, where the driver lacks a call of
// PoolChunk's probe: a pool of one's own (cuMemPoolCreate,
// cuMemPoolDestroy, cuMemAllocFromPoolAsync, CUDA 11.2) and a stream of
// one's own (cuStreamCreate, cuStreamDestroy). PoolChunk then answers
// CUDA_ERROR_NOT_SUPPORTED.
func PoolChunks() error {
	return missingCall("cuMemPoolCreate", "cuMemPoolDestroy", "cuMemAllocFromPoolAsync", "cuMemFreeAsync",
		"cuMemPoolGetAttribute", "cuStreamCreate", "cuStreamDestroy")
}

// PoolChunk learns the chunk in which the memory pools of ctx's device
// reserve device memory: a stream-ordered allocation grows its pool's
// reservation in whole chunks (32 MiB on an NVIDIA H200 with driver
// 580.159.04, which reserved 32 MiB for 1 B to 32 MiB, 64 for 33 MiB, 96
// for 65 MiB); NVIDIA documents no size, and no attribute gives it. It
// makes a memory pool and a non-blocking stream of its own, allocates 1
// byte from the pool on the stream (cuMemAllocFromPoolAsync), reads the
// pool's reservation, frees the byte, synchronizes its stream and destroys
// both, which gives the pool's memory back: the device's current pool, its
// default pool and the program's streams are never touched, and the probe
// holds one chunk of the device while it runs (it fails with
// CUDA_ERROR_OUT_OF_MEMORY on a device without one chunk free). Every call
// is made in ctx and in relaxed stream-capture mode
// (cuThreadExchangeStreamCaptureMode), so that none fails for, or
// invalidates, a capture that this thread or another has begun.
func PoolChunk(ctx Context) (PoolProbe, Call) {
	p := C.memtrack_pool_chunk_of(C.uintptr_t(ctx))
	return PoolProbe{Chunk: int64(p.chunk), Used: int64(p.used)}, callOf(p.call)
}
