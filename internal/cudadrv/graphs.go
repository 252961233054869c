//go:build cuda

package cudadrv

// Graph memory, the physical memory the driver keeps for the allocations
// of CUDA graphs (graph memory nodes, CUDA 11.4) apart from every memory
// pool. Each call makes the device's context current, operates and
// restores the thread's context, in one cgo call.

/*
#include <stdint.h>

#include "context.h"

typedef struct {
	memtrack_result call;
	cuuint64_t used, used_high, reserved, reserved_high;
} memtrack_graph_mem;

// What memtrack_graph does on a device.
enum { MEMTRACK_GRAPH_GET, MEMTRACK_GRAPH_RESET_HIGHS, MEMTRACK_GRAPH_TRIM };

// memtrack_graph_op does what on device dev: reads the four graph memory
// figures into g, resets both high-water marks (the driver accepts 0 for
// them and nothing else), or trims.
static CUresult memtrack_graph_op(int what, CUdevice dev, memtrack_graph_mem *g) {
	cuuint64_t zero = 0;
	CUresult r = CUDA_SUCCESS;
	switch (what) {
	case MEMTRACK_GRAPH_GET:
		r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &g->used);
		if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &g->used_high);
		if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &g->reserved);
		if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &g->reserved_high);
		return r;
	case MEMTRACK_GRAPH_RESET_HIGHS:
		r = memtrack_cu.cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero);
		if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero);
		return r;
	default:
		return memtrack_cu.cuDeviceGraphMemTrim(dev);
	}
}

// memtrack_graph does what on the device of ctx, in ctx.
static memtrack_graph_mem memtrack_graph(uintptr_t c, int what) {
	CUcontext ctx = (CUcontext)c;
	memtrack_graph_mem g = {{0}, 0, 0, 0, 0};
	int present = what == MEMTRACK_GRAPH_GET ? memtrack_cu.cuDeviceGetGraphMemAttribute != NULL
		      : what == MEMTRACK_GRAPH_RESET_HIGHS ? memtrack_cu.cuDeviceSetGraphMemAttribute != NULL
		      : memtrack_cu.cuDeviceGraphMemTrim != NULL;
	if (!present) {
		g.call.op = CUDA_ERROR_NOT_SUPPORTED;
		return g;
	}
	CUcontext prev;
	if ((g.call.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return g;
	CUdevice dev = 0;
	g.call.op = memtrack_cu.cuCtxGetDevice(&dev);
	if (g.call.op == CUDA_SUCCESS) g.call.op = memtrack_graph_op(what, dev, &g);
	g.call.restore = memtrack_leave(ctx, prev);
	return g;
}
*/
import "C"

// GraphMem fails, with a *MissingError, where the driver lacks a call that
// graph memory needs: cuStreamGetCaptureInfo_v2 (CUDA 11.3), for the
// capture's ID, the graph memory calls (CUDA 11.4: "Graph memory nodes are
// only supported on driver versions 11.4 and newer", CUDA Programming
// Guide, Graph Memory Nodes), those of stream-ordered allocation, which
// a capture turns into graph memory nodes (CUDA 11.2), or
// cuMemGetAllocationGranularity (CUDA 10.2), the granule of the physical
// memory mapped for each allocation node (Granularity). GraphGet,
// GraphResetHighs, GraphTrim and Granularity then answer
// CUDA_ERROR_NOT_SUPPORTED where their call is missing, and CaptureInfo
// and AllocAsync give no capture ID.
func GraphMem() error {
	return missingCall("cuStreamGetCaptureInfo", "cuDeviceGetGraphMemAttribute", "cuDeviceSetGraphMemAttribute",
		"cuDeviceGraphMemTrim", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemGetAllocationGranularity")
}

// GraphAttributes are a device's graph memory figures
// (cuDeviceGetGraphMemAttribute): the memory the driver keeps for graph
// allocations, which no memory pool's attributes count, and which is
// device memory of the process (cuMemGetInfo counts it).
type GraphAttributes struct {
	// GraphUsed is CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: "the amount of
	// physical memory currently mapped by at least one graph".
	GraphUsed int64
	// PeakGraphUsed is CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, its high-water
	// mark since the last GraphResetHighs.
	PeakGraphUsed int64
	// GraphReserved is CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: "the amount
	// of physical memory reserved by the driver for graph allocations in
	// the current process", mapped or not, until GraphTrim returns it.
	GraphReserved int64
	// PeakGraphReserved is CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH.
	PeakGraphReserved int64
}

// GraphGet reads the graph memory figures of ctx's device, in one call.
func GraphGet(ctx Context) (GraphAttributes, Call) {
	g := C.memtrack_graph(C.uintptr_t(ctx), C.MEMTRACK_GRAPH_GET)
	return GraphAttributes{
		GraphUsed: int64(g.used), PeakGraphUsed: int64(g.used_high),
		GraphReserved: int64(g.reserved), PeakGraphReserved: int64(g.reserved_high),
	}, callOf(g.call)
}

// GraphResetHighs resets the graph memory high-water marks of ctx's device
// (cuDeviceSetGraphMemAttribute of 0, the one value it accepts for them).
// Whether they then read 0 or the current figures, the reference does not
// say (testdata/fakecuda/RULES.md).
func GraphResetHighs(ctx Context) Call {
	return callOf(C.memtrack_graph(C.uintptr_t(ctx), C.MEMTRACK_GRAPH_RESET_HIGHS).call)
}

// GraphTrim returns to the device the graph memory of ctx's device that is
// "not in use by a graph that is either currently executing or scheduled
// to execute" (cuDeviceGraphMemTrim); the memory of graph allocations not
// yet freed stays.
func GraphTrim(ctx Context) Call {
	return callOf(C.memtrack_graph(C.uintptr_t(ctx), C.MEMTRACK_GRAPH_TRIM).call)
}
