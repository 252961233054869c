//go:build cuda

// loader.c: the driver's library opened at run time and its calls
// resolved, so that a binary built with -tags cuda needs neither cuda.h nor
// libcuda to build, and starts without the driver (see load.go).
//
// The rules, from the CUDA Driver API reference, "Driver Entry Point
// Access", and cuda.h:
//
//   - cuGetProcAddress(symbol, pfn, cudaVersion, flags) (CUDA 11.3) returns
//     the entry point of a base name at a CUDA version: "if the specified
//     CUDA version is greater than or equal to the CUDA version in which
//     the driver symbol was introduced, this API will return the function
//     pointer to the corresponding versioned function" (cuMemAlloc at 3020
//     is cuMemAlloc_v2). The 11.x reference answers CUDA_ERROR_NOT_FOUND
//     for a symbol it does not know.
//   - cuGetProcAddress_v2 (CUDA 12.0; cuda.h 12.x maps cuGetProcAddress to
//     it) adds symbolStatus: for an unknown symbol, or none at that version,
//     it returns CUDA_SUCCESS with pfn NULL and says which
//     (CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, _VERSION_NOT_SUFFICIENT); "if
//     the specified CUDA version is greater than the driver version, the
//     API will return CUDA_ERROR_INVALID_VALUE".
//   - flags CU_GET_PROC_ADDRESS_DEFAULT gives the legacy default-stream
//     variants to code not compiled for per-thread default streams, which
//     is what the direct calls of cuda.h gave.
//   - cuDriverGetVersion (CUDA 2.2) answers CUDA_SUCCESS or
//     CUDA_ERROR_INVALID_VALUE only, so needs no cuInit, and is never versioned;
//     a driver before 11.3 has no cuGetProcAddress, and its calls are found
//     by the names cuda.h #defines (cuMemAlloc_v2, ...).
//   - The library to open is libcuda.so.1, which the driver installs; the
//     toolkit alone installs libcuda.so, the link stub's name.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "loader.h"

struct memtrack_cuda memtrack_cu;

#define MEMTRACK_CUDA_TABLE memtrack_cu
static const struct memtrack_cuda_entry entries[] = {MEMTRACK_CUDA_CALLS(MEMTRACK_CUDA_ENTRY)};

const struct memtrack_cuda_entry *memtrack_cuda_table(int *n) {
	*n = (int)(sizeof entries / sizeof entries[0]);
	return entries;
}

enum { CU_GET_PROC_ADDRESS_DEFAULT = 0 };

typedef CUresult (*get_version_fn)(int *version);
typedef CUresult (*get_proc_fn)(const char *symbol, void **fn, int version, cuuint64_t flags);
typedef CUresult (*get_proc_v2_fn)(const char *symbol, void **fn, int version, cuuint64_t flags, int *status);

// The library opened and how its calls are resolved: written once by
// memtrack_cuda_open, before any lookup (load.go orders them).
static void *lib;
static int driver_version;
static get_proc_fn get_proc;
static get_proc_v2_fn get_proc_v2;

static void copy(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src ? src : ""); }

// memtrack_cuda_open opens library, asks the driver its version and picks
// how to resolve its calls. It returns d->loaded.
int memtrack_cuda_open(const char *library, memtrack_driver *d) {
	memset(d, 0, sizeof *d);
	dlerror();
	lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		copy(d->error, sizeof d->error, dlerror());
		return 0;
	}
	d->loaded = 1;
	struct link_map *map = NULL;
	if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map) copy(d->path, sizeof d->path, map->l_name);
	get_version_fn get_version = (get_version_fn)dlsym(lib, "cuDriverGetVersion");
	d->version_result = -1;
	int v = 0;
	if (get_version) d->version_result = get_version(&v);
	if (d->version_result == CUDA_SUCCESS && v > 0) driver_version = v;
	d->version = driver_version;
	d->resolver = MEMTRACK_BY_DLSYM;
	if (driver_version >= 12000 && (get_proc_v2 = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2"))) {
		d->resolver = MEMTRACK_BY_PROC_V2;
	} else if (driver_version >= 11030 && (get_proc = (get_proc_fn)dlsym(lib, "cuGetProcAddress"))) {
		d->resolver = MEMTRACK_BY_PROC;
	}
	return 1;
}

// memtrack_cuda_lookup resolves call name (whose versioned name ends in
// suffix) at the CUDA version of its signature. A call newer than the driver
// is not asked for: an older variant may have another signature. Where the
// driver's version is unknown (cuDriverGetVersion failed: the link stub, a
// broken installation), the versioned names are looked up with dlsym, and
// cuInit's failure says what is wrong.
memtrack_lookup memtrack_cuda_lookup(const char *name, const char *suffix, int version) {
	memtrack_lookup l;
	memset(&l, 0, sizeof l);
	if (driver_version > 0 && version > driver_version) {
		l.outcome = MEMTRACK_NEWER;
		return l;
	}
	if (get_proc_v2) {
		l.result = get_proc_v2(name, &l.fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &l.status);
		l.outcome = l.result != CUDA_SUCCESS ? MEMTRACK_PROC_RESULT : !l.fn ? MEMTRACK_PROC_STATUS : MEMTRACK_FOUND;
	} else if (get_proc) {
		l.result = get_proc(name, &l.fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
		l.outcome = l.result != CUDA_SUCCESS ? MEMTRACK_PROC_RESULT : !l.fn ? MEMTRACK_PROC_NULL : MEMTRACK_FOUND;
	} else {
		char symbol[256];
		snprintf(symbol, sizeof symbol, "%s%s", name, suffix);
		dlerror();
		l.fn = dlsym(lib, symbol);
		l.outcome = l.fn ? MEMTRACK_FOUND : MEMTRACK_DLSYM;
		if (!l.fn) copy(l.dlerror, sizeof l.dlerror, dlerror());
	}
	if (l.outcome != MEMTRACK_FOUND) l.fn = NULL;
	return l;
}
