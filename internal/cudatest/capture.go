//go:build cuda

package cudatest

// Stream capture (CUDA graphs), in the current context.

/*
#include <stdint.h>

#include "calls.h"

static CUresult cudatest_begin_capture(uintptr_t stream, CUstreamCaptureMode mode) {
	return CUDATEST_CALL(cudatest_cu.cuStreamBeginCapture, (CUstream)stream, mode);
}

// cudatest_capture_status asks for stream's capture status, by
// cuStreamGetCaptureInfo_v2 where info, by cuStreamIsCapturing otherwise.
static CUresult cudatest_capture_status(uintptr_t stream, int info, int *status) {
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	CUresult r = info ? CUDATEST_CALL(cudatest_lib.cuStreamGetCaptureInfo, (CUstream)stream, &st, &id, NULL, NULL, NULL)
			  : CUDATEST_CALL(cudatest_lib.cuStreamIsCapturing, (CUstream)stream, &st);
	*status = st;
	return r;
}

static CUresult cudatest_exchange_mode(CUstreamCaptureMode *mode) {
	return CUDATEST_CALL(cudatest_lib.cuThreadExchangeStreamCaptureMode, mode);
}

// cudatest_end_capture ends the capture on stream and reports how many
// nodes the graph holds, then destroys it.
static CUresult cudatest_end_capture(uintptr_t stream, size_t *nodes) {
	CUgraph g = NULL;
	CUresult r = CUDATEST_CALL(cudatest_cu.cuStreamEndCapture, (CUstream)stream, &g);
	*nodes = 0;
	if (r == CUDA_SUCCESS && g) {
		r = CUDATEST_CALL(cudatest_cu.cuGraphGetNodes, g, NULL, nodes);
		CUDATEST_CALL(cudatest_cu.cuGraphDestroy, g);
	}
	return r;
}
*/
import "C"

import "github.com/memtrack/memtrack/internal/cudadrv"

// CaptureMode is a stream capture's interaction mode with potentially
// unsafe calls (CUstreamCaptureMode).
type CaptureMode int

// The capture modes of cuda.h.
const (
	CaptureGlobal      CaptureMode = C.CU_STREAM_CAPTURE_MODE_GLOBAL
	CaptureThreadLocal CaptureMode = C.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	CaptureRelaxed     CaptureMode = C.CU_STREAM_CAPTURE_MODE_RELAXED
)

// BeginCapture begins capturing stream into a graph (cuStreamBeginCapture).
func BeginCapture(stream uintptr, mode CaptureMode) cudadrv.Result {
	return cudadrv.Result(C.cudatest_begin_capture(C.uintptr_t(stream), C.CUstreamCaptureMode(mode)))
}

// EndCapture ends the capture of stream (cuStreamEndCapture) and returns
// how many nodes the graph it captured holds (cuGraphGetNodes); the graph
// is destroyed.
func EndCapture(stream uintptr) (nodes int, _ cudadrv.Result) {
	var n C.size_t
	r := cudadrv.Result(C.cudatest_end_capture(C.uintptr_t(stream), &n))
	return int(n), r
}

// ExchangeCaptureMode sets the calling thread's stream-capture mode to mode
// and returns the one it had (cuThreadExchangeStreamCaptureMode), as a
// program does around a call it makes relaxed: the caller locks its
// goroutine to the thread until it has put the old mode back.
func ExchangeCaptureMode(mode CaptureMode) (CaptureMode, cudadrv.Result) {
	m := C.CUstreamCaptureMode(mode)
	r := cudadrv.Result(C.cudatest_exchange_mode(&m))
	return CaptureMode(m), r
}

// CaptureStatus returns stream's capture status as the raw
// cuStreamGetCaptureInfo_v2 answers it, in the current context; where
// isCapturing, as cuStreamIsCapturing answers it.
func CaptureStatus(stream uintptr, isCapturing bool) (cudadrv.CaptureStatus, cudadrv.Result) {
	var st C.int
	info := C.int(1)
	if isCapturing {
		info = 0
	}
	r := cudadrv.Result(C.cudatest_capture_status(C.uintptr_t(stream), info, &st))
	return cudadrv.CaptureStatus(st), r
}
