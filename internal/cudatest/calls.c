//go:build cuda

// calls.c: the table of the tests' driver calls (calls.h).

#include "calls.h"

struct cudatest_cuda cudatest_cu;
struct memtrack_cuda cudatest_lib;

static const struct memtrack_cuda_entry entries[] = {
#define MEMTRACK_CUDA_TABLE cudatest_cu
	CUDATEST_CALLS(MEMTRACK_CUDA_ENTRY)
#undef MEMTRACK_CUDA_TABLE
#define MEMTRACK_CUDA_TABLE cudatest_lib
	MEMTRACK_CUDA_CALLS(MEMTRACK_CUDA_ENTRY)
#undef MEMTRACK_CUDA_TABLE
};

const struct memtrack_cuda_entry *cudatest_table(int *n) {
	*n = (int)(sizeof entries / sizeof entries[0]);
	return entries;
}
