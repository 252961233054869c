//go:build cuda

package cudadrv

// Graph memory, the physical memory the driver keeps for the allocations
// of CUDA graphs (graph memory nodes, CUDA 11.4) apart from every memory
// pool. Each call makes the device's context current, operates and
// restores the thread's context, in one cgo call.

/*
#include <stdint.h>
#include <string.h>

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

// memtrack_graph_call is memtrack_graph_op's what and g, for
// memtrack_on_device.
typedef struct {
	int what;
	memtrack_graph_mem *g;
} memtrack_graph_call;

static CUresult memtrack_graph_call_op(CUdevice dev, void *arg) {
	memtrack_graph_call *c = arg;
	return memtrack_graph_op(c->what, dev, c->g);
}

// memtrack_chunk_probe is what memtrack_graph_chunk found.
typedef struct {
	memtrack_result call;
	memtrack_graph_mem before; // the figures before the probe (its call unused)
	cuuint64_t chunk;          // the probe's reservation: the chunk, or 0
	cuuint64_t after;          // RESERVED_MEM_CURRENT after the probe's trim
	int ran;                   // the device had no graph memory: the probe ran
} memtrack_chunk_probe;

// memtrack_graph_probe learns, on device dev, the chunk in which the driver
// reserves graph memory, where the device has none reserved (p->before):
// on a stream of its own, it captures a graph of one allocation node of 1
// byte and its free node, instantiates and uploads it (cuGraphUpload maps
// the graph's memory without running it), reads how much the driver
// reserved, destroys the graph exec, the graph and the stream, and trims
// (cuDeviceGraphMemTrim), which returns the probe's reservation alone, the
// device having had none before. A device with graph memory reserved is
// not probed: a graph that finished may have left memory that the probe
// would reuse, so that the reservation would not grow, and the trim would
// return that graph's cached memory. The chunk is trusted only where the
// trim left nothing reserved: memory of another thread's graph that
// appeared meanwhile may be in the reading.
static CUresult memtrack_graph_probe(CUdevice dev, void *arg) {
	memtrack_chunk_probe *p = arg;
	CUresult r = memtrack_graph_op(MEMTRACK_GRAPH_GET, dev, &p->before);
	if (r != CUDA_SUCCESS || p->before.reserved != 0) return r;
	p->ran = 1;
	CUstream s = NULL;
	CUgraph g = NULL;
	CUgraphExec e = NULL;
	CUdeviceptr ptr = 0;
	cuuint64_t reserved = 0;
	r = memtrack_cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
	if (r == CUDA_SUCCESS) {
		CUresult node = memtrack_cu.cuMemAllocAsync(&ptr, 1, s);
		if (node == CUDA_SUCCESS) node = memtrack_cu.cuMemFreeAsync(ptr, s);
		r = memtrack_cu.cuStreamEndCapture(s, &g); // the capture begun ends, whatever its nodes
		if (r == CUDA_SUCCESS) r = node;
	}
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuGraphInstantiateWithFlags(&e, g, 0);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuGraphUpload(e, s);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuStreamSynchronize(s);
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
	if (e) memtrack_cu.cuGraphExecDestroy(e);
	if (g) memtrack_cu.cuGraphDestroy(g);
	if (s) memtrack_cu.cuStreamDestroy(s);
	CUresult t = memtrack_cu.cuDeviceGraphMemTrim(dev);
	if (r == CUDA_SUCCESS) r = t;
	if (r == CUDA_SUCCESS) r = memtrack_cu.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &p->after);
	if (r == CUDA_SUCCESS && p->after == 0) p->chunk = reserved;
	// High-water marks of 0 before are 0 again: the driver's reset sets
	// them to 0 or to the current figures, which the trim left at 0. Marks
	// above 0 are whole chunks, which the probe's one chunk did not pass.
	if (p->before.used_high == 0 && p->before.reserved_high == 0) {
		memtrack_graph_mem unused;
		t = memtrack_graph_op(MEMTRACK_GRAPH_RESET_HIGHS, dev, &unused);
		if (r == CUDA_SUCCESS) r = t;
	}
	return r;
}

// memtrack_graph_chunk runs memtrack_graph_probe on the device of ctx
// (memtrack_on_device).
static memtrack_chunk_probe memtrack_graph_chunk(uintptr_t c) {
	CUcontext ctx = (CUcontext)c;
	memtrack_chunk_probe p;
	memset(&p, 0, sizeof p);
	if (!memtrack_cu.cuDeviceGetGraphMemAttribute || !memtrack_cu.cuDeviceSetGraphMemAttribute || !memtrack_cu.cuDeviceGraphMemTrim ||
	    !memtrack_cu.cuMemAllocAsync ||
	    !memtrack_cu.cuMemFreeAsync || !memtrack_cu.cuStreamCreate || !memtrack_cu.cuStreamDestroy ||
	    !memtrack_cu.cuStreamBeginCapture || !memtrack_cu.cuStreamEndCapture || !memtrack_cu.cuGraphInstantiateWithFlags ||
	    !memtrack_cu.cuGraphUpload || !memtrack_cu.cuGraphExecDestroy || !memtrack_cu.cuGraphDestroy) {
		p.call.op = CUDA_ERROR_NOT_SUPPORTED;
		return p;
	}
	memtrack_on_device(ctx, &p.call, memtrack_graph_probe, &p);
	return p;
}

// memtrack_graph does what on the device of ctx, in ctx and in relaxed
// stream-capture mode: memtrack's own calls, which no capture that this
// thread or another has begun may refuse or be invalidated by. An H200
// allowed the reads and the trim during another thread's global capture
// (testdata/fakecuda/RULES.md); the reset of the high-water marks no probe
// asked.
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
	memtrack_graph_call call = {what, &g};
	memtrack_on_device(ctx, &g.call, memtrack_graph_call_op, &call);
	return g;
}
*/
import "C"

// GraphMem fails, with a *MissingError, where the driver lacks a call that
// graph memory needs: cuStreamGetCaptureInfo_v2 (CUDA 11.3), for the
// capture's ID, the graph memory calls (CUDA 11.4: "Graph memory nodes are
// only supported on driver versions 11.4 and newer", CUDA Programming
// Guide, Graph Memory Nodes), those of stream-ordered allocation, which
// a capture turns into graph memory nodes (CUDA 11.2), or those that
// GraphChunk's probe graph needs (a stream of its own, its capture,
// cuGraphInstantiateWithFlags of CUDA 11.4, cuGraphUpload of 11.1).
// GraphGet, GraphResetHighs, GraphTrim and GraphChunk then answer
// CUDA_ERROR_NOT_SUPPORTED where their call is missing, and CaptureInfo
// and AllocAsync give no capture ID.
func GraphMem() error {
	return missingCall("cuStreamGetCaptureInfo", "cuDeviceGetGraphMemAttribute", "cuDeviceSetGraphMemAttribute",
		"cuDeviceGraphMemTrim", "cuMemAllocAsync", "cuMemFreeAsync", "cuStreamCreate", "cuStreamDestroy",
		"cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphUpload",
		"cuGraphExecDestroy", "cuGraphDestroy")
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
// GraphGet, GraphResetHighs and GraphTrim run in relaxed stream-capture
// mode, as memtrack's own calls do (doc.go).
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

// ChunkProbe is what GraphChunk found of a device's graph memory.
type ChunkProbe struct {
	// Before is the device's graph memory figures before the probe. Where
	// its GraphReserved is not 0 the probe did not run (Ran is false).
	Before GraphAttributes
	// Ran says that the device had no graph memory reserved, and the probe
	// graph was made, uploaded and destroyed, and the device trimmed.
	Ran bool
	// Chunk is what the driver reserved for the probe graph, whose one
	// allocation node is of 1 byte: the chunk in which it reserves a
	// graph's memory. It is 0 where the probe did not run, failed, or
	// found graph memory reserved after its trim (After), which another
	// thread's graph may have taken meanwhile, so that the reading may
	// hold more than the probe's.
	Chunk int64
	// After is CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT after the probe's
	// trim: 0 where nothing but the probe reserved graph memory.
	After int64
}

// GraphChunk learns the chunk in which the driver reserves the graph memory
// of ctx's device: a graph's memory is its peak footprint rounded up to it
// (32 MiB on an NVIDIA H200 with driver 580.159.04; NVIDIA documents no
// size). Where the device has no graph memory reserved, it captures, on a
// stream of its own, a graph of one allocation node of 1 byte and its free
// node, instantiates it, uploads it (cuGraphUpload maps its memory without
// running it), reads what the driver reserved, destroys the graph exec, the
// graph and the stream, and trims the device's graph memory, which then
// returns the probe's reservation alone. Every call is made in ctx and in
// relaxed stream-capture mode (cuThreadExchangeStreamCaptureMode), so that
// none fails for, or invalidates, a capture that this thread or another has
// begun, in global mode included; the probe's own capture is relaxed. A
// device with graph memory reserved is not probed (ChunkProbe.Ran): the
// driver may reuse a finished graph's memory for the probe, which would
// then reserve nothing, and the trim would return that graph's cached
// memory. Relaxed mode is needed: the H200 answered
// cuGraphInstantiateWithFlags, cuStreamSynchronize and cuGraphExecDestroy
// with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and invalidated the capture,
// where another thread held one begun in global mode. It costs about
// 100 µs where it runs (the H200: 99 µs for a launched probe in C, 32 MiB),
// once per device for a caller that keeps the answer.
func GraphChunk(ctx Context) (ChunkProbe, Call) {
	p := C.memtrack_graph_chunk(C.uintptr_t(ctx))
	return ChunkProbe{
		Before: GraphAttributes{
			GraphUsed: int64(p.before.used), PeakGraphUsed: int64(p.before.used_high),
			GraphReserved: int64(p.before.reserved), PeakGraphReserved: int64(p.before.reserved_high),
		},
		Ran: p.ran != 0, Chunk: int64(p.chunk), After: int64(p.after),
	}, callOf(p.call)
}
