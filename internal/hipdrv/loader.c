//go:build rocm

// loader.c: the HIP runtime opened at run time and its calls resolved, so
// that a binary built with -tags rocm needs neither AMD's headers to build
// nor libamdhip64 to start (see load.go).
//
// The rules, from AMD's HIP runtime API reference (hip_runtime_api.h):
//
//   - The library. ROCm installs libamdhip64.so.N, N the runtime's major
//     version (5 for ROCm 5.x, 6 for 6.x, 7 for 7.x: the SONAME changes
//     with each ABI break), and the development link libamdhip64.so; Debian
//     ships libamdhip64.so.5 (ROCm 5.2.3) in libamdhip64-5. The newest
//     major name is tried first.
//   - hipRuntimeGetVersion "Returns the approximate HIP Runtime version"
//     (on AMD's platform the HIP version), which hip_version.h defines as
//     HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 +
//     HIP_VERSION_PATCH (50221153 for Debian's 5.2.21153; AMD's
//     hipDriverGetVersion reference states the same format). It needs no
//     device: AMD's runtime answers it on a machine without a GPU.
//   - hipGetProcAddress(symbol, pfn, hipVersion, flags, symbolStatus) (ROCm
//     6.2; its map node is hip_6.1, but ROCm 6.1's map has no such symbol)
//     "Gets the pointer of requested HIP driver function". Its hipVersion
//     is encoded otherwise: "HIP version is defined as 100*version_major +
//     version_minor. For example, in HIP 6.1, the hipversion is 601"; a
//     version at or above the one a variant came with selects that variant
//     ("hipGetDeviceProperties" at 601 >= 600). Its flags: "Currently only
//     default flag is supported" (HIP_GET_PROC_ADDRESS_DEFAULT, 0). It
//     returns hipSuccess "if the returned pfn is addressed to the pointer
//     of found driver function", else hipErrorInvalidValue, with
//     symbolStatus HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND or
//     _VERSION_NOT_SUFFICIENT.
//   - "Most HIP APIs implicitly initialize the HIP runtime" (hipInit):
//     hipGetProcAddress does too, so on a machine where the runtime cannot
//     initialise (no GPU) it fails as hipInit does, for every symbol. The
//     loader then resolves by dlsym, which needs no device, and says why.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "loader.h"

struct memtrack_hip memtrack_hip;

#define MEMTRACK_HIP_TABLE memtrack_hip
static const struct memtrack_hip_entry entries[] = {
	MEMTRACK_HIP_CALLS(MEMTRACK_HIP_ENTRY)
	{"hipGetErrorName", 401, MEMTRACK_HIP_ESSENTIAL, (void **)&memtrack_hip.hipGetErrorName},
	{"hipGetErrorString", 401, MEMTRACK_HIP_ESSENTIAL, (void **)&memtrack_hip.hipGetErrorString},
};

const struct memtrack_hip_entry *memtrack_hip_table(int *n) {
	*n = (int)(sizeof entries / sizeof entries[0]);
	return entries;
}

static const char *names[MEMTRACK_HIP_NAMES] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};

const char *memtrack_hip_name(int i) { return names[i]; }

typedef hipError_t (*get_version_fn)(int *version);
typedef hipError_t (*get_proc_fn)(const char *symbol, void **pfn, int version, uint64_t flags, int *status);

// The library opened and how its calls are resolved: written once by
// memtrack_hip_open, before any lookup (load.go orders them).
static void *lib;
static get_proc_fn get_proc;

static void copy(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src ? src : ""); }

// memtrack_hip_open opens the first library of names that loads, asks its
// version and picks how to resolve its calls. It returns rt->loaded.
int memtrack_hip_open(memtrack_hip_runtime *rt) {
	memset(rt, 0, sizeof *rt);
	for (int i = 0; i < MEMTRACK_HIP_NAMES && !lib; i++) {
		dlerror();
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			copy(rt->tried[i], sizeof rt->tried[i], dlerror());
			continue;
		}
		rt->name = i;
	}
	if (!lib) return 0;
	rt->loaded = 1;
	struct link_map *map = NULL;
	if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map) copy(rt->path, sizeof rt->path, map->l_name);
	get_version_fn get_version = (get_version_fn)dlsym(lib, "hipRuntimeGetVersion");
	rt->version_result = -1;
	int v = 0;
	if (get_version) rt->version_result = get_version(&v);
	if (rt->version_result == hipSuccess && v > 0) rt->version = v;
	rt->resolver = MEMTRACK_HIP_BY_DLSYM;
	get_proc_fn p = (get_proc_fn)dlsym(lib, "hipGetProcAddress");
	rt->proc_present = p != NULL;
	int major = rt->version / 10000000, minor = rt->version / 100000 % 100;
	if (p && 100 * major + minor >= 602) {
		// Ask for a call every runtime has, to learn whether
		// hipGetProcAddress works here (it initialises the runtime).
		void *fn = NULL;
		int status = HIP_GET_PROC_ADDRESS_SUCCESS;
		hipError_t r = p("hipRuntimeGetVersion", &fn, 401, HIP_GET_PROC_ADDRESS_DEFAULT, &status);
		if (r == hipSuccess && fn) {
			get_proc = p;
			rt->resolver = MEMTRACK_HIP_BY_PROC;
		} else {
			rt->proc_result = r == hipSuccess ? hipErrorInvalidValue : r;
		}
	}
	return 1;
}

// memtrack_hip_find resolves call name at version (runtime.h's), by
// hipGetProcAddress where memtrack_hip_open chose it, by dlsym otherwise.
memtrack_hip_lookup memtrack_hip_find(const char *name, int version) {
	memtrack_hip_lookup l;
	memset(&l, 0, sizeof l);
	if (get_proc) {
		l.status = HIP_GET_PROC_ADDRESS_SUCCESS;
		l.result = get_proc(name, &l.fn, version, HIP_GET_PROC_ADDRESS_DEFAULT, &l.status);
		l.outcome = l.result != hipSuccess ? MEMTRACK_HIP_PROC_STATUS : !l.fn ? MEMTRACK_HIP_PROC_NULL : MEMTRACK_HIP_FOUND;
	} else {
		dlerror();
		l.fn = dlsym(lib, name);
		l.outcome = l.fn ? MEMTRACK_HIP_FOUND : MEMTRACK_HIP_DLSYM;
		if (!l.fn) copy(l.dlerror, sizeof l.dlerror, dlerror());
	}
	if (l.outcome != MEMTRACK_HIP_FOUND) l.fn = NULL;
	return l;
}
