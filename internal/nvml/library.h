//go:build cuda

// library.h: the part of NVML's ABI that memtrack uses, declared here so
// that nothing needs nvml.h to build and no NVML symbol is left for the
// dynamic loader to resolve: the types and values of nvml.h (as
// github.com/NVIDIA/go-nvml v0.13.4-1 ships it, gen/nvml/nvml.h), and the
// few calls, found with dlsym in libnvidia-ml.so.1 (library.c).

#ifndef MEMTRACK_NVML_LIBRARY_H
#define MEMTRACK_NVML_LIBRARY_H

#include <stddef.h>

typedef int nvmlReturn_t; // enum nvmlReturn_enum
typedef struct nvmlDevice_st *nvmlDevice_t;

// nvmlProcessInfo_v2_t, which nvml.h also names nvmlProcessInfo_t: what
// nvmlDeviceGetComputeRunningProcesses_v3 fills.
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

// MEMTRACK_NVML_CALLS lists the calls, one line each: X(return type, name,
// parameters). The name is the symbol the library exports.
#define MEMTRACK_NVML_CALLS(X) \
	X(nvmlReturn_t, nvmlInit_v2, (void)) \
	X(nvmlReturn_t, nvmlShutdown, (void)) \
	X(const char *, nvmlErrorString, (nvmlReturn_t result)) \
	X(nvmlReturn_t, nvmlDeviceGetHandleByUUID, (const char *uuid, nvmlDevice_t *device)) \
	X(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos)) \
	X(nvmlReturn_t, nvmlSystemGetProcessName, (unsigned int pid, char *name, unsigned int length))

#define MEMTRACK_NVML_FIELD(ret, name, params) ret (*name) params;

struct memtrack_nvml {
	MEMTRACK_NVML_CALLS(MEMTRACK_NVML_FIELD)
};

// memtrack_nvml is NVML as nvml.go calls it, filled by memtrack_nvml_open.
extern struct memtrack_nvml memtrack_nvml;

// memtrack_nvml_open opens library and finds every call. It returns 1, or
// 0 with what went wrong in err and, where the library loaded, its file in
// path.
int memtrack_nvml_open(const char *library, char *path, size_t npath, char *err, size_t nerr);

#endif
