//go:build cuda

// library.c: NVML opened at run time (dlopen of libnvidia-ml.so.1, which
// the NVIDIA driver installs beside libcuda.so.1) and its calls found with
// dlsym, each by the versioned name nvml.h maps it to, so that a binary
// starts where NVML is missing, or older than these calls, even under
// immediate binding (LD_BIND_NOW=1, or linked with -z now).

#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

#include "library.h"

struct memtrack_nvml memtrack_nvml;

int memtrack_nvml_open(const char *library, char *path, size_t npath, char *err, size_t nerr) {
	dlerror();
	void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(err, nerr, "%s", dlerror());
		return 0;
	}
	struct link_map *map = NULL;
	if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map) snprintf(path, npath, "%s", map->l_name);
	const char *missing = NULL;
#define MEMTRACK_NVML_FIND(ret, name, params) \
	if (!missing && !(*(void **)&memtrack_nvml.name = dlsym(lib, #name))) missing = #name;
	MEMTRACK_NVML_CALLS(MEMTRACK_NVML_FIND)
#undef MEMTRACK_NVML_FIND
	if (missing) {
		const char *why = dlerror();
		snprintf(err, nerr, "it has no %s: %s", missing, why ? why : "not found");
		return 0;
	}
	return 1;
}
