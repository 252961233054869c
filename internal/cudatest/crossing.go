//go:build cuda

package cudatest

// The crossing from Go into C that every driver call of memtrack's makes
// once per operation: its cost, beside the driver calls', is the unit of
// the predicted cost of the tracked pair (docs/performance.md).

/*
#include "calls.h"

static void cudatest_nothing(void) {}

static CUresult cudatest_ctx_get_times(int n) {
	CUcontext c = NULL;
	CUresult r = CUDA_SUCCESS;
	for (int i = 0; i < n; i++) {
		CUresult q = CUDATEST_CALL(cudatest_lib.cuCtxGetCurrent, &c);
		if (q != CUDA_SUCCESS) r = q;
	}
	return r;
}
*/
import "C"

import "github.com/memtrack/memtrack/internal/cudadrv"

// Nothing calls a C function that does nothing: one crossing from Go into
// C and back, alone.
func Nothing() { C.cudatest_nothing() }

// ThreadContextTimes calls cuCtxGetCurrent n times in one crossing into C,
// through the table the driver was loaded into, as memtrack's C helpers
// call it; the result is the last failure, or Success.
func ThreadContextTimes(n int) cudadrv.Result {
	return cudadrv.Result(C.cudatest_ctx_get_times(C.int(n)))
}
