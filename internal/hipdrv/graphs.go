//go:build rocm

package hipdrv

// Graph memory, the memory the runtime keeps for the allocations of HIP
// graphs apart from every memory pool (ROCm 5.3). Each call names its
// device; none needs it current.

/*
#include <stdint.h>

#include "runtime.h"

typedef struct {
	hipError_t status;
	uint64_t used, used_high, reserved, reserved_high;
} memtrack_hip_graph_mem;

// What memtrack_hip_graph does on a device.
enum { MEMTRACK_HIP_GRAPH_GET, MEMTRACK_HIP_GRAPH_RESET_HIGHS, MEMTRACK_HIP_GRAPH_TRIM };

// memtrack_hip_graph does what on device: reads the four graph memory
// figures, resets both high-water marks, or trims.
static memtrack_hip_graph_mem memtrack_hip_graph(int device, int what) {
	memtrack_hip_graph_mem g = {hipErrorNotSupported, 0, 0, 0, 0};
	uint64_t zero = 0;
	switch (what) {
	case MEMTRACK_HIP_GRAPH_GET:
		if (!memtrack_hip.hipDeviceGetGraphMemAttribute) return g;
		g.status = memtrack_hip.hipDeviceGetGraphMemAttribute(device, hipGraphMemAttrUsedMemCurrent, &g.used);
		if (g.status == hipSuccess) g.status = memtrack_hip.hipDeviceGetGraphMemAttribute(device, hipGraphMemAttrUsedMemHigh, &g.used_high);
		if (g.status == hipSuccess) g.status = memtrack_hip.hipDeviceGetGraphMemAttribute(device, hipGraphMemAttrReservedMemCurrent, &g.reserved);
		if (g.status == hipSuccess) g.status = memtrack_hip.hipDeviceGetGraphMemAttribute(device, hipGraphMemAttrReservedMemHigh, &g.reserved_high);
		return g;
	case MEMTRACK_HIP_GRAPH_RESET_HIGHS:
		if (!memtrack_hip.hipDeviceSetGraphMemAttribute) return g;
		g.status = memtrack_hip.hipDeviceSetGraphMemAttribute(device, hipGraphMemAttrUsedMemHigh, &zero);
		if (g.status == hipSuccess) g.status = memtrack_hip.hipDeviceSetGraphMemAttribute(device, hipGraphMemAttrReservedMemHigh, &zero);
		return g;
	default:
		if (!memtrack_hip.hipDeviceGraphMemTrim) return g;
		g.status = memtrack_hip.hipDeviceGraphMemTrim(device);
		return g;
	}
}
*/
import "C"

// GraphAttributes are a device's graph memory figures
// (hipDeviceGetGraphMemAttribute), which no memory pool's attributes count.
type GraphAttributes struct {
	GraphUsed         int64 // hipGraphMemAttrUsedMemCurrent: "Amount of memory, in bytes, currently associated with graphs"
	PeakGraphUsed     int64 // hipGraphMemAttrUsedMemHigh
	GraphReserved     int64 // hipGraphMemAttrReservedMemCurrent: "Amount of memory, in bytes, currently allocated for graphs"
	PeakGraphReserved int64 // hipGraphMemAttrReservedMemHigh
}

// GraphGet reads the graph memory figures of device, in one call;
// hipErrorNotSupported where the runtime lacks the call (GraphMem says
// why).
func GraphGet(device int) (GraphAttributes, Result) {
	g := C.memtrack_hip_graph(C.int(device), C.MEMTRACK_HIP_GRAPH_GET)
	return GraphAttributes{
		GraphUsed: int64(g.used), PeakGraphUsed: int64(g.used_high),
		GraphReserved: int64(g.reserved), PeakGraphReserved: int64(g.reserved_high),
	}, Result(g.status)
}

// GraphResetHighs resets the graph memory high-water marks of device
// (hipDeviceSetGraphMemAttribute of 0).
func GraphResetHighs(device int) Result {
	return Result(C.memtrack_hip_graph(C.int(device), C.MEMTRACK_HIP_GRAPH_RESET_HIGHS).status)
}

// GraphTrim returns to the device the graph memory of device that no
// graph uses (hipDeviceGraphMemTrim: "Free unused memory on specific
// device used for graph back to OS").
func GraphTrim(device int) Result {
	return Result(C.memtrack_hip_graph(C.int(device), C.MEMTRACK_HIP_GRAPH_TRIM).status)
}
