//go:build cuda

package cudadrv

// Whether the driver runs host functions of different streams at once: its
// reference says they "may be serialized". The GPU check asks the driver.

/*
#include <cuda.h>
#include <stdint.h>
#include <time.h>

#include "context.h"

static int memtrack_b_started, memtrack_a_saw_b;

static void CUDA_CB memtrack_reading_b(void *unused) { __atomic_store_n(&memtrack_b_started, 1, __ATOMIC_SEQ_CST); }

// memtrack_reading_a waits up to 200 ms for the other stream's host function
// to start; it calls neither the driver nor Go.
static void CUDA_CB memtrack_reading_a(void *unused) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (__atomic_load_n(&memtrack_b_started, __ATOMIC_SEQ_CST)) {
			__atomic_store_n(&memtrack_a_saw_b, 1, __ATOMIC_SEQ_CST);
			return;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 200000000L) return;
	}
}

// memtrack_host_funcs_concurrent enqueues a on s1 and b on s2 in ctx and
// waits for both streams; *concurrent says whether b started while a ran.
static memtrack_result memtrack_host_funcs_concurrent(CUcontext ctx, uintptr_t s1, uintptr_t s2, int *concurrent) {
	memtrack_result res = {0};
	CUcontext prev;
	__atomic_store_n(&memtrack_b_started, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&memtrack_a_saw_b, 0, __ATOMIC_SEQ_CST);
	if ((res.enter = memtrack_enter(ctx, &prev)) != CUDA_SUCCESS) return res;
	res.op = cuLaunchHostFunc((CUstream)s1, memtrack_reading_a, NULL);
	if (res.op == CUDA_SUCCESS) res.op = cuLaunchHostFunc((CUstream)s2, memtrack_reading_b, NULL);
	if (res.op == CUDA_SUCCESS) res.op = cuStreamSynchronize((CUstream)s1);
	if (res.op == CUDA_SUCCESS) res.op = cuStreamSynchronize((CUstream)s2);
	*concurrent = __atomic_load_n(&memtrack_a_saw_b, __ATOMIC_SEQ_CST);
	res.restore = memtrack_leave(ctx, prev);
	return res;
}
*/
import "C"

// HostFuncsConcurrent enqueues a host function on s1 that waits up to
// 200 ms for one enqueued next on s2 to start, waits for both streams, and
// reports whether the second started while the first ran: false where the
// driver serializes host functions of different streams.
func HostFuncsConcurrent(ctx Context, s1, s2 uintptr) (bool, Call) {
	var c C.int
	r := C.memtrack_host_funcs_concurrent(ctx.p, C.uintptr_t(s1), C.uintptr_t(s2), &c)
	return c != 0, callOf(r)
}
