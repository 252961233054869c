//go:build rocm

// loader.h: what loader.c tells load.go.

#ifndef MEMTRACK_HIPDRV_LOADER_H
#define MEMTRACK_HIPDRV_LOADER_H

#include "runtime.h"

// The library names tried, in order (loader.c).
#define MEMTRACK_HIP_NAMES 4

// How the calls are resolved.
enum { MEMTRACK_HIP_BY_DLSYM, MEMTRACK_HIP_BY_PROC };

// memtrack_hip_runtime is what memtrack_hip_open found.
typedef struct {
	int loaded;             // a library loaded; tried[] says why the others did not
	int name;               // the index of the name that loaded
	hipError_t version_result; // hipRuntimeGetVersion's result (-1: no such symbol)
	int version;            // its answer, HIP_VERSION's encoding (50221153 for 5.2.21153), or 0
	int resolver;           // MEMTRACK_HIP_BY_*
	int proc_present;       // the library exports hipGetProcAddress
	hipError_t proc_result; // where hipGetProcAddress failed for another reason than a symbol, its result (else 0)
	char path[1024];        // the file loaded, as the dynamic loader names it
	char tried[MEMTRACK_HIP_NAMES][512]; // dlerror's message for each name tried before
} memtrack_hip_runtime;

int memtrack_hip_open(memtrack_hip_runtime *rt);

// memtrack_hip_name returns the i-th library name tried.
const char *memtrack_hip_name(int i);

// The outcomes of a lookup.
enum {
	MEMTRACK_HIP_FOUND,
	MEMTRACK_HIP_PROC_STATUS, // hipGetProcAddress found none: result and status say why
	MEMTRACK_HIP_PROC_NULL,   // hipGetProcAddress succeeded with NULL
	MEMTRACK_HIP_DLSYM,       // dlsym found none: dlerror says why
};

// memtrack_hip_lookup is what memtrack_hip_find found.
typedef struct {
	void *fn;
	int outcome;       // MEMTRACK_HIP_FOUND or why fn is NULL
	hipError_t result; // MEMTRACK_HIP_PROC_STATUS: hipGetProcAddress's result
	int status;        // MEMTRACK_HIP_PROC_STATUS: hipDriverProcAddressQueryResult
	char dlerror[512];
} memtrack_hip_lookup;

memtrack_hip_lookup memtrack_hip_find(const char *name, int version);

// memtrack_hip_table returns the calls of package hipdrv (runtime.h), for
// load.go to fill, and their number in *n.
const struct memtrack_hip_entry *memtrack_hip_table(int *n);

#endif
