//go:build cuda

package cudatest

// Holding a stream back from the host, for tests of the order the driver
// gives streams: a host function that waits, on the driver's thread, until
// the host lets it return (it calls neither the driver nor Go).

/*
#include <stdint.h>
#include <time.h>

#include "calls.h"

static int cudatest_held_back;

static void cudatest_hold(void *unused) {
	struct timespec ms = {0, 100000};
	while (__atomic_load_n(&cudatest_held_back, __ATOMIC_SEQ_CST)) nanosleep(&ms, NULL);
}

static CUresult cudatest_hold_stream(uintptr_t stream) {
	__atomic_store_n(&cudatest_held_back, 1, __ATOMIC_SEQ_CST);
	return CUDATEST_CALL(cudatest_cu.cuLaunchHostFunc, (CUstream)stream, cudatest_hold, NULL);
}

static void cudatest_release_streams(void) { __atomic_store_n(&cudatest_held_back, 0, __ATOMIC_SEQ_CST); }
*/
import "C"

import "github.com/memtrack/memtrack/internal/cudadrv"

// HoldStream enqueues on stream, in the current context, a host function
// (cuLaunchHostFunc) that returns only once ReleaseStreams is called: the
// work enqueued after it waits.
func HoldStream(stream uintptr) cudadrv.Result {
	return cudadrv.Result(C.cudatest_hold_stream(C.uintptr_t(stream)))
}

// ReleaseStreams lets every host function of HoldStream return.
func ReleaseStreams() { C.cudatest_release_streams() }
