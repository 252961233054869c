//go:build rocm

// calls.c: the table of the tests' runtime calls (calls.h).

#include "calls.h"

struct hiptest_hip hiptest_hip;
struct memtrack_hip hiptest_lib;

static const struct memtrack_hip_entry entries[] = {
#define MEMTRACK_HIP_TABLE hiptest_hip
	HIPTEST_CALLS(MEMTRACK_HIP_ENTRY)
#undef MEMTRACK_HIP_TABLE
#define MEMTRACK_HIP_TABLE hiptest_lib
	MEMTRACK_HIP_CALLS(MEMTRACK_HIP_ENTRY)
#undef MEMTRACK_HIP_TABLE
};

const struct memtrack_hip_entry *hiptest_table(int *n) {
	*n = (int)(sizeof entries / sizeof entries[0]);
	return entries;
}
