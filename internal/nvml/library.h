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

// The entries of a process list, one layout per call that fills it (doc.go
// cites the headers that introduced each). nvmlProcessInfo_v1_t: what the
// unversioned nvmlDeviceGetComputeRunningProcesses fills, "legacy version
// for older versions of the API".
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

// nvmlProcessInfo_v2_t: what nvmlDeviceGetComputeRunningProcesses_v2
// fills. nvml.h names the same layout nvmlProcessInfo_t, which
// nvmlDeviceGetComputeRunningProcesses_v3 fills.
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_MEMORY = 20,
};

// MEMTRACK_NVML_CALLS lists the calls every library must have, one line
// each: X(return type, name, parameters). The name is the symbol the
// library exports.
#define MEMTRACK_NVML_CALLS(X) \
	X(nvmlReturn_t, nvmlInit_v2, (void)) \
	X(nvmlReturn_t, nvmlShutdown, (void)) \
	X(const char *, nvmlErrorString, (nvmlReturn_t result)) \
	X(nvmlReturn_t, nvmlDeviceGetHandleByUUID, (const char *uuid, nvmlDevice_t *device)) \
	X(nvmlReturn_t, nvmlSystemGetProcessName, (unsigned int pid, char *name, unsigned int length))

// MEMTRACK_NVML_PROCESS_CALLS lists the calls that list a device's compute
// processes, newest first, each with the entry it fills: X(name, entry
// type). memtrack uses the first the library has.
#define MEMTRACK_NVML_PROCESS_CALLS(X) \
	X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t) \
	X(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t) \
	X(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)

#define MEMTRACK_NVML_FIELD(ret, name, params) ret (*name) params;

struct memtrack_nvml {
	MEMTRACK_NVML_CALLS(MEMTRACK_NVML_FIELD)
};

// memtrack_nvml is NVML as nvml.go calls it, filled by memtrack_nvml_open.
extern struct memtrack_nvml memtrack_nvml;

// memtrack_nvml_open opens library and finds every call, and the first of
// the process calls it has, whose name it stores in *process_call. It
// returns 1, or 0 with what went wrong in err and, where the library
// loaded, its file in path.
int memtrack_nvml_open(const char *library, char *path, size_t npath, char *err, size_t nerr, const char **process_call);

// memtrack_nvml_process is an entry of a process list, whatever the
// layout the library filled.
typedef struct {
	unsigned int pid;
	unsigned long long used; // usedGpuMemory
} memtrack_nvml_process;

// memtrack_nvml_processes lists the compute processes on device with the
// process call memtrack_nvml_open found: *count is the call's infoCount,
// the room in out on entry and the count the call answered on return; on
// NVML_SUCCESS, out holds that many entries.
nvmlReturn_t memtrack_nvml_processes(nvmlDevice_t device, unsigned int *count, memtrack_nvml_process *out);

#endif
