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
#include <stdlib.h>

#include "library.h"

struct memtrack_nvml memtrack_nvml;

// The process call found, and how to call it: an entry of
// MEMTRACK_NVML_PROCESS_CALLS. Written once by memtrack_nvml_open, before
// any call (nvml.go orders them).
struct process_call {
	const char *name;
	nvmlReturn_t (*list)(void *fn, nvmlDevice_t device, unsigned int *count, void *infos,
			     memtrack_nvml_process *out);
};

// Each process call's caller: the call with its own entry type, then the
// entries copied out field by field.
#define MEMTRACK_NVML_LIST(name, info) \
	static nvmlReturn_t list_##name(void *fn, nvmlDevice_t device, unsigned int *count, void *infos, \
					memtrack_nvml_process *out) { \
		unsigned int room = *count; \
		nvmlReturn_t r = ((nvmlReturn_t(*)(nvmlDevice_t, unsigned int *, info *))fn)(device, count, infos); \
		if (r != NVML_SUCCESS) return r; \
		for (unsigned int i = 0; i < *count && i < room; i++) { \
			const info *e = (const info *)infos + i; \
			out[i] = (memtrack_nvml_process){.pid = e->pid, .used = e->usedGpuMemory}; \
		} \
		return r; \
	}
MEMTRACK_NVML_PROCESS_CALLS(MEMTRACK_NVML_LIST)
#undef MEMTRACK_NVML_LIST

#define MEMTRACK_NVML_ENTRY(name, info) {#name, list_##name},
static const struct process_call process_calls[] = {MEMTRACK_NVML_PROCESS_CALLS(MEMTRACK_NVML_ENTRY)};
#undef MEMTRACK_NVML_ENTRY

static const struct process_call *process_call;
static void *process_fn;

int memtrack_nvml_open(const char *library, char *path, size_t npath, char *err, size_t nerr, const char **name) {
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
	size_t n = sizeof process_calls / sizeof process_calls[0];
	for (size_t i = 0; i < n && !process_call; i++) {
		if ((process_fn = dlsym(lib, process_calls[i].name))) process_call = &process_calls[i];
	}
	if (!process_call) {
		int w = snprintf(err, nerr, "it has none of the calls that list processes: ");
		for (size_t i = 0; i < n && w >= 0 && (size_t)w < nerr; i++) {
			w += snprintf(err + w, nerr - (size_t)w, "%s%s", i > 0 ? ", " : "", process_calls[i].name);
		}
		return 0;
	}
	*name = process_call->name;
	return 1;
}

// The room each entry is given, whatever the layout: the largest entry a
// process call is known to fill. The first libraries of the 535 branch
// were reported to fill 32-byte entries through _v3 (nvmlProcessInfo_t
// with a usedGpuCcProtectedMemory appended) where nvml.h declares 24: read
// at the declared layout, their entries after the first are wrong, but no
// library writes past the room it was given.
enum { ENTRY_ROOM = 32 };

_Static_assert(sizeof(nvmlProcessInfo_t) <= ENTRY_ROOM, "an entry fits its room");

nvmlReturn_t memtrack_nvml_processes(nvmlDevice_t device, unsigned int *count, memtrack_nvml_process *out) {
	void *infos = NULL;
	if (*count > 0 && !(infos = calloc(*count, ENTRY_ROOM))) return NVML_ERROR_MEMORY;
	nvmlReturn_t r = process_call->list(process_fn, device, count, infos, out);
	free(infos);
	return r;
}
