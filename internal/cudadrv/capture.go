//go:build cuda

package cudadrv

// Stream capture (CUDA graphs), for tests that check what memtrack does
// while a stream captures: each call runs in the calling thread's current
// context, which the caller makes current on a locked thread.

/*
#include <cuda.h>
#include <stdint.h>

static CUresult memtrack_begin_capture(uintptr_t stream, CUstreamCaptureMode mode) {
	return cuStreamBeginCapture((CUstream)stream, mode);
}

// memtrack_end_capture ends the capture on stream and reports how many
// nodes the graph holds, then destroys it.
static CUresult memtrack_end_capture(uintptr_t stream, size_t *nodes) {
	CUgraph g = NULL;
	CUresult r = cuStreamEndCapture((CUstream)stream, &g);
	*nodes = 0;
	if (r == CUDA_SUCCESS && g) {
		r = cuGraphGetNodes(g, NULL, nodes);
		cuGraphDestroy(g);
	}
	return r;
}
*/
import "C"

// CaptureMode is a stream capture's interaction mode with potentially unsafe
// calls (CUstreamCaptureMode).
type CaptureMode int

// The capture modes of cuda.h.
const (
	CaptureGlobal      CaptureMode = C.CU_STREAM_CAPTURE_MODE_GLOBAL
	CaptureThreadLocal CaptureMode = C.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	CaptureRelaxed     CaptureMode = C.CU_STREAM_CAPTURE_MODE_RELAXED
)

// BeginCapture begins capturing stream into a graph (cuStreamBeginCapture).
func BeginCapture(stream uintptr, mode CaptureMode) Result {
	return Result(C.memtrack_begin_capture(C.uintptr_t(stream), C.CUstreamCaptureMode(mode)))
}

// EndCapture ends the capture of stream (cuStreamEndCapture) and returns how
// many nodes the graph it captured holds (cuGraphGetNodes); the graph is
// destroyed.
func EndCapture(stream uintptr) (nodes int, _ Result) {
	var n C.size_t
	r := Result(C.memtrack_end_capture(C.uintptr_t(stream), &n))
	return int(n), r
}
