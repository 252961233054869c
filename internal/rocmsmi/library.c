//go:build rocm

// library.c: rocm_smi opened at run time (dlopen of librocm_smi64, which
// ROCm installs beside the HIP runtime and Debian ships in
// librocm-smi64-N) and its calls found with dlsym, so that a binary starts
// where the library is missing, even under immediate binding
// (LD_BIND_NOW=1, or linked with -z now).
//
// The names: the library's SONAME carries its own major version (its
// CMakeLists.txt sets SOVERSION to it), which AMD's ROCm releases install
// as librocm_smi64.so.7, .so.6 and .so.5; Debian's package installs
// librocm_smi64.so.1; the development link is librocm_smi64.so. The newest
// is tried first.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "library.h"

struct memtrack_rsmi memtrack_rsmi;

static const char *names[MEMTRACK_RSMI_NAMES] = {
	"librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5", "librocm_smi64.so.1", "librocm_smi64.so",
};

const char *memtrack_rsmi_name(int i) { return names[i]; }

void memtrack_rsmi_open(memtrack_rsmi_opened *o) {
	memset(o, 0, sizeof *o);
	o->name = -1;
	void *lib = NULL;
	for (int i = 0; i < MEMTRACK_RSMI_NAMES && !lib; i++) {
		dlerror();
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			snprintf(o->tried[i], sizeof o->tried[i], "%s", dlerror());
			continue;
		}
		o->name = i;
	}
	if (!lib) return;
	struct link_map *map = NULL;
	if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map) snprintf(o->path, sizeof o->path, "%s", map->l_name);
#define MEMTRACK_RSMI_FIND(name, essential, params) \
	dlerror(); \
	*(void **)&memtrack_rsmi.name = dlsym(lib, #name); \
	if (!memtrack_rsmi.name && essential && !o->missing[0]) { \
		const char *why = dlerror(); \
		snprintf(o->missing, sizeof o->missing, "%s", #name); \
		snprintf(o->why, sizeof o->why, "%s", why ? why : "not found"); \
	}
	MEMTRACK_RSMI_CALLS(MEMTRACK_RSMI_FIND)
#undef MEMTRACK_RSMI_FIND
	o->loaded = !o->missing[0];
}
