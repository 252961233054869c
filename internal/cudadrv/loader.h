//go:build cuda

// loader.h: loading the driver's library and resolving its calls
// (loader.c), for load.go.

#ifndef MEMTRACK_CUDADRV_LOADER_H
#define MEMTRACK_CUDADRV_LOADER_H

#include <stddef.h>

#include "driver.h"

// How the calls are resolved: by cuGetProcAddress_v2 (CUDA 12.0 and later),
// by cuGetProcAddress (11.3 to 11.8), or by dlsym of the versioned names.
enum { MEMTRACK_BY_DLSYM, MEMTRACK_BY_PROC, MEMTRACK_BY_PROC_V2 };

// memtrack_driver is what memtrack_cuda_open found.
typedef struct {
	int loaded;              // the library loaded; error says why not
	CUresult version_result; // cuDriverGetVersion's result (-1: no such symbol)
	int version;             // the driver's CUDA version, or 0 where unknown
	int resolver;            // MEMTRACK_BY_*
	char path[1024];         // the file loaded, as the dynamic loader names it
	char error[1024];        // dlerror's message
} memtrack_driver;

int memtrack_cuda_open(const char *library, memtrack_driver *d);

// The outcomes of a lookup.
enum {
	MEMTRACK_FOUND,
	MEMTRACK_NEWER,          // the call's version is above the driver's
	MEMTRACK_PROC_RESULT,    // cuGetProcAddress failed with result
	MEMTRACK_PROC_STATUS,    // cuGetProcAddress_v2 found none, with status
	MEMTRACK_PROC_NULL,      // cuGetProcAddress succeeded with NULL
	MEMTRACK_DLSYM,          // dlsym found none: dlerror says why
};

// memtrack_lookup is what memtrack_cuda_lookup found.
typedef struct {
	void *fn;
	int outcome;     // MEMTRACK_FOUND or why fn is NULL
	CUresult result; // MEMTRACK_PROC_RESULT
	int status;      // MEMTRACK_PROC_STATUS: CUdriverProcAddressQueryResult
	char dlerror[512];
} memtrack_lookup;

memtrack_lookup memtrack_cuda_lookup(const char *name, const char *suffix, int version);

// memtrack_cuda_table returns the calls of package cudadrv (driver.h), for
// load.go to fill, and their number in *n.
const struct memtrack_cuda_entry *memtrack_cuda_table(int *n);

#endif
