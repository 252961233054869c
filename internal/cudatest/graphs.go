//go:build cuda

package cudatest

// Graphs that a capture returns, instantiated, uploaded and launched (CUDA
// 11.4's graph memory nodes), in the current context.

/*
#include <stdint.h>

#include "calls.h"

static cudatest_handle cudatest_end_capture_graph(uintptr_t stream) {
	CUgraph g = NULL;
	CUresult r = CUDATEST_CALL(cudatest_cu.cuStreamEndCapture, (CUstream)stream, &g);
	return (cudatest_handle){(uintptr_t)g, r};
}

static cudatest_handle cudatest_graph_nodes(uintptr_t graph) {
	size_t n = 0;
	CUresult r = CUDATEST_CALL(cudatest_cu.cuGraphGetNodes, (CUgraph)graph, NULL, &n);
	return (cudatest_handle){n, r};
}

static CUresult cudatest_graph_destroy(uintptr_t graph) { return CUDATEST_CALL(cudatest_cu.cuGraphDestroy, (CUgraph)graph); }

static cudatest_handle cudatest_graph_instantiate(uintptr_t graph, unsigned long long flags) {
	CUgraphExec e = NULL;
	CUresult r = CUDATEST_CALL(cudatest_cu.cuGraphInstantiateWithFlags, &e, (CUgraph)graph, flags);
	return (cudatest_handle){(uintptr_t)e, r};
}

static CUresult cudatest_graph_upload(uintptr_t exec, uintptr_t stream) {
	return CUDATEST_CALL(cudatest_cu.cuGraphUpload, (CUgraphExec)exec, (CUstream)stream);
}

static CUresult cudatest_graph_launch(uintptr_t exec, uintptr_t stream) {
	return CUDATEST_CALL(cudatest_cu.cuGraphLaunch, (CUgraphExec)exec, (CUstream)stream);
}

static CUresult cudatest_graph_exec_destroy(uintptr_t exec) {
	return CUDATEST_CALL(cudatest_cu.cuGraphExecDestroy, (CUgraphExec)exec);
}

static CUresult cudatest_set_graph_mem_attribute(int ordinal, int attr, cuuint64_t value) {
	CUdevice dev;
	CUresult r = CUDATEST_CALL(cudatest_lib.cuDeviceGet, &dev, ordinal);
	if (r == CUDA_SUCCESS) r = CUDATEST_CALL(cudatest_lib.cuDeviceSetGraphMemAttribute, dev, attr, &value);
	return r;
}
*/
import "C"

import "github.com/memtrack/memtrack/internal/cudadrv"

// EndCaptureGraph ends the capture of stream (cuStreamEndCapture) and
// returns the graph it captured, which the caller destroys with
// GraphDestroy.
func EndCaptureGraph(stream uintptr) (graph uintptr, _ cudadrv.Result) {
	return handleOf(C.cudatest_end_capture_graph(C.uintptr_t(stream)))
}

// GraphNodes returns how many nodes graph holds (cuGraphGetNodes).
func GraphNodes(graph uintptr) (int, cudadrv.Result) {
	n, r := handleOf(C.cudatest_graph_nodes(C.uintptr_t(graph)))
	return int(n), r
}

// GraphDestroy destroys a graph (cuGraphDestroy), which frees none of its
// live allocations.
func GraphDestroy(graph uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_graph_destroy(C.uintptr_t(graph)))
}

// GraphInstantiate makes a graph exec of graph (cuGraphInstantiateWithFlags,
// CUDA 11.4), in the current context; autoFree instantiates it with
// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.
func GraphInstantiate(graph uintptr, autoFree bool) (exec uintptr, _ cudadrv.Result) {
	var flags C.ulonglong
	if autoFree {
		flags = C.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
	}
	return handleOf(C.cudatest_graph_instantiate(C.uintptr_t(graph), flags))
}

// GraphUpload maps the memory a graph exec needs on stream without
// running it (cuGraphUpload), in the current context.
func GraphUpload(exec, stream uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_graph_upload(C.uintptr_t(exec), C.uintptr_t(stream)))
}

// GraphLaunch launches a graph exec on stream (cuGraphLaunch), in the
// current context.
func GraphLaunch(exec, stream uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_graph_launch(C.uintptr_t(exec), C.uintptr_t(stream)))
}

// GraphExecDestroy destroys a graph exec (cuGraphExecDestroy).
func GraphExecDestroy(exec uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_graph_exec_destroy(C.uintptr_t(exec)))
}

// GraphMemAttr is a graph memory attribute that can be set
// (CUgraphMem_attribute).
type GraphMemAttr int

// The attributes cuDeviceSetGraphMemAttribute accepts.
const (
	GraphMemUsedHigh      GraphMemAttr = C.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH
	GraphMemFootprintHigh GraphMemAttr = C.CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
)

// SetGraphMemAttribute sets a graph memory attribute of device ordinal to
// value (cuDeviceSetGraphMemAttribute), any value, where
// cudadrv.GraphResetHighs sets 0 alone.
func SetGraphMemAttribute(ordinal int, attr GraphMemAttr, value uint64) cudadrv.Result {
	return cudadrv.Result(C.cudatest_set_graph_mem_attribute(C.int(ordinal), C.int(attr), C.cuuint64_t(value)))
}
