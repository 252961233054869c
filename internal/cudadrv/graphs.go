//go:build cuda

package cudadrv

// Graph memory, the physical memory the driver keeps for the allocations
// of CUDA graphs (graph memory nodes, CUDA 11.4) apart from every memory
// pool, and a stream's capture. Each call makes the context it needs
// current, operates and restores the thread's context, in one cgo call.

/*
#include <stdint.h>

#include "context.h"

typedef struct {
	memtrack_result call;
	cuuint64_t used, used_high, reserved, reserved_high;
} memtrack_graph_mem;

// memtrack_graph_get reads the four graph memory figures of ctx's device.
static memtrack_graph_mem memtrack_graph_get(uintptr_t c) {
	CUcontext ctx = (CUcontext)c;
	memtrack_graph_mem g = {{0}, 0, 0, 0, 0};
	if (!memtrack_cu.cuDeviceGetGraphMemAttribute) {
		g.call.op = CUDA_ERROR_NOT_SUPPORTED;
		return g;
	}
	CUcontext prev;
	if ((g.call.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return g;
	CUdevice dev = 0;
	CUresult r = memtrack_cu.cuCtxGetDevice(&dev);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &g.used);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &g.used_high);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &g.reserved);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &g.reserved_high);
	g.call.op = r;
	g.call.restore = memtrack_leave(ctx, prev);
	return g;
}

// memtrack_graph_reset_highs sets both high-water marks of ctx's device:
// the driver accepts 0 for them and nothing else.
static memtrack_result memtrack_graph_reset_highs(uintptr_t c) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result res = {0};
	if (!memtrack_cu.cuDeviceSetGraphMemAttribute) {
		res.op = CUDA_ERROR_NOT_SUPPORTED;
		return res;
	}
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUdevice dev = 0;
	cuuint64_t zero = 0;
	CUresult r = memtrack_cu.cuCtxGetDevice(&dev);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero);
	res.op = r;
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

// memtrack_graph_trim returns the graph memory of ctx's device that no
// graph uses to the device.
static memtrack_result memtrack_graph_trim(uintptr_t c) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result res = {0};
	if (!memtrack_cu.cuDeviceGraphMemTrim) {
		res.op = CUDA_ERROR_NOT_SUPPORTED;
		return res;
	}
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	CUdevice dev = 0;
	CUresult r = memtrack_cu.cuCtxGetDevice(&dev);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGraphMemTrim(dev);
	res.op = r;
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

// memtrack_capture_info asks, in the stream's context, for the stream's
// capture status and, where it is active, the capture's ID; capturing holds
// the status.
static memtrack_result memtrack_capture_info(uintptr_t c, uintptr_t handle) {
	CUcontext ctx = (CUcontext)c;
	CUstream stream = (CUstream)handle;
	memtrack_result res = {0};
	if (!memtrack_cu.cuStreamGetCaptureInfo) {
		res.op = CUDA_ERROR_NOT_SUPPORTED;
		return res;
	}
	CUcontext prev;
	if ((res.enter = memtrack_enter_stream(ctx, stream, &prev, &res)) != CUDA_SUCCESS) return res;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	res.op = memtrack_cu.cuStreamGetCaptureInfo(stream, &st, &id, NULL, NULL, NULL);
	if (res.op == CUDA_SUCCESS) res.capturing = st;
	if (res.op == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE) res.capture_id = id;
	res.restore = memtrack_leave_stream(ctx, prev, &res);
	return res;
}
*/
import "C"

// GraphMem fails, with a *MissingError, where the driver lacks a call that
// graph memory needs: cuStreamGetCaptureInfo_v2 (CUDA 11.3), the graph
// memory calls (CUDA 11.4: "Graph memory nodes are only supported on
// driver versions 11.4 and newer", CUDA Programming Guide, Graph Memory
// Nodes), or those of stream-ordered allocation, which a capture turns
// into graph memory nodes (CUDA 11.2). CaptureInfo, GraphGet,
// GraphResetHighs and GraphTrim then answer CUDA_ERROR_NOT_SUPPORTED.
func GraphMem() error {
	return missingCall("cuStreamGetCaptureInfo", "cuDeviceGetGraphMemAttribute", "cuDeviceSetGraphMemAttribute",
		"cuDeviceGraphMemTrim", "cuMemAllocAsync", "cuMemFreeAsync")
}

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
// the capture's ID, asked in the stream's context (cuStreamGetCtx).
func CaptureInfo(ctx Context, stream uintptr) (Capture, Call) {
	r := C.memtrack_capture_info(C.uintptr_t(ctx), C.uintptr_t(stream))
	return Capture{Status: CaptureStatus(r.capturing), ID: uint64(r.capture_id)}, callOf(r)
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
	// GraphFootprint is CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: "the amount
	// of physical memory reserved by the driver for graph allocations in
	// the current process", mapped or not, until GraphTrim returns it.
	GraphFootprint int64
	// PeakGraphFootprint is CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH.
	PeakGraphFootprint int64
}

// GraphGet reads the graph memory figures of ctx's device, in one call.
func GraphGet(ctx Context) (GraphAttributes, Call) {
	g := C.memtrack_graph_get(C.uintptr_t(ctx))
	return GraphAttributes{
		GraphUsed: int64(g.used), PeakGraphUsed: int64(g.used_high),
		GraphFootprint: int64(g.reserved), PeakGraphFootprint: int64(g.reserved_high),
	}, callOf(g.call)
}

// GraphResetHighs resets the graph memory high-water marks of ctx's device
// (cuDeviceSetGraphMemAttribute of 0, the one value it accepts for them).
// Whether they then read 0 or the current figures, the reference does not
// say (testdata/fakecuda/RULES.md).
func GraphResetHighs(ctx Context) Call { return callOf(C.memtrack_graph_reset_highs(C.uintptr_t(ctx))) }

// GraphTrim returns to the device the graph memory of ctx's device that is
// "not in use by a graph that is either currently executing or scheduled
// to execute" (cuDeviceGraphMemTrim); the memory of graph allocations not
// yet freed stays.
func GraphTrim(ctx Context) Call { return callOf(C.memtrack_graph_trim(C.uintptr_t(ctx))) }
