//go:build cuda

package cudadrv

// Holding a stream back from the host, for tests of the order the driver
// gives streams: a host function that waits, on the driver's thread, until
// the host lets it return (it calls neither the driver nor Go).

/*
#include <cuda.h>
#include <stdint.h>
#include <time.h>

#include "context.h"

static int memtrack_held_back;

static void CUDA_CB memtrack_hold(void *unused) {
	struct timespec ms = {0, 100000};
	while (__atomic_load_n(&memtrack_held_back, __ATOMIC_SEQ_CST)) nanosleep(&ms, NULL);
}

static memtrack_result memtrack_hold_stream(CUcontext ctx, uintptr_t stream) {
	memtrack_result res = {0};
	CUcontext prev;
	__atomic_store_n(&memtrack_held_back, 1, __ATOMIC_SEQ_CST);
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	res.op = cuLaunchHostFunc((CUstream)stream, memtrack_hold, NULL);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}

static void memtrack_release_streams(void) { __atomic_store_n(&memtrack_held_back, 0, __ATOMIC_SEQ_CST); }

// memtrack_record_query records a new event on stream, in ctx, and
// queries it at once.
static memtrack_result memtrack_record_query(CUcontext ctx, uintptr_t stream) {
	memtrack_result res = {0};
	CUcontext prev;
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	res.op = cuEventCreate(&res.event, CU_EVENT_DISABLE_TIMING);
	if (res.op == CUDA_SUCCESS) res.op = cuEventRecord(res.event, (CUstream)stream);
	if (res.op == CUDA_SUCCESS) res.op = cuEventQuery(res.event);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}
*/
import "C"

// HoldStream enqueues on stream, in ctx, a host function that returns only
// once ReleaseStreams is called: the work enqueued after it waits.
func HoldStream(ctx Context, stream uintptr) Call {
	return callOf(C.memtrack_hold_stream(ctx.p, C.uintptr_t(stream)))
}

// ReleaseStreams lets every host function of HoldStream return.
func ReleaseStreams() { C.memtrack_release_streams() }

// RecordQuery records a new event on stream, in ctx, and queries it at
// once (cuEventQuery): Op is Success if the stream had nothing before it
// left to run, NotReady if it had. The event is returned for EventDestroy.
func RecordQuery(ctx Context, stream uintptr) (Event, Call) {
	r := C.memtrack_record_query(ctx.p, C.uintptr_t(stream))
	return Event{r.event}, callOf(r)
}
