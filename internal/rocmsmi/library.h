//go:build rocm

// library.h: the part of rocm_smi's ABI that memtrack uses, declared here
// so that nothing needs rocm_smi.h to build and no SMI symbol is left for
// the dynamic loader to resolve: the types and values of rocm_smi.h (ROCm
// 5.2.3, as Debian's librocm-smi-dev ships it; rsmi_process_info_t is the
// same from ROCm 4.0 to the current header), and the few calls, found with
// dlsym in the library (library.c).

#ifndef MEMTRACK_ROCMSMI_LIBRARY_H
#define MEMTRACK_ROCMSMI_LIBRARY_H

#include <stddef.h>
#include <stdint.h>

typedef int rsmi_status_t; // enum rsmi_status_t

// rsmi_process_info_t: what the compute-process calls fill.
typedef struct {
	uint32_t process_id;   // "Process ID"
	uint32_t pasid;        // "PASID"
	uint64_t vram_usage;   // "VRAM usage"
	uint64_t sdma_usage;   // "SDMA usage in microseconds"
	uint32_t cu_occupancy; // "Compute Unit usage in percent"
} rsmi_process_info_t;

// rsmi_version_t: rsmi_version_get's answer.
typedef struct {
	uint32_t major, minor, patch;
	const char *build;
} rsmi_version_t;

enum {
	RSMI_STATUS_SUCCESS = 0,
	RSMI_STATUS_NOT_SUPPORTED = 2,
	RSMI_STATUS_INIT_ERROR = 8,
	RSMI_STATUS_NOT_FOUND = 10,
	RSMI_STATUS_INSUFFICIENT_SIZE = 11,
};

// MEMTRACK_RSMI_CALLS lists the calls, one line each: X(name, essential,
// parameters); every call returns rsmi_status_t. The name is the symbol
// the library exports; a call that is not essential turns off what needs
// it where the library lacks it.
#define MEMTRACK_RSMI_CALLS(X) \
	X(rsmi_init, 1, (uint64_t flags)) \
	X(rsmi_shut_down, 1, (void)) \
	X(rsmi_status_string, 1, (rsmi_status_t status, const char **text)) \
	X(rsmi_version_get, 1, (rsmi_version_t *version)) \
	X(rsmi_num_monitor_devices, 1, (uint32_t *n)) \
	X(rsmi_dev_pci_id_get, 1, (uint32_t dv, uint64_t *bdfid)) \
	X(rsmi_compute_process_info_get, 1, (rsmi_process_info_t *procs, uint32_t *n)) \
	X(rsmi_compute_process_info_by_pid_get, 1, (uint32_t pid, rsmi_process_info_t *proc)) \
	X(rsmi_compute_process_gpus_get, 1, (uint32_t pid, uint32_t *dv, uint32_t *n)) \
	X(rsmi_compute_process_info_by_device_get, 0, (uint32_t pid, uint32_t dv, rsmi_process_info_t *proc))

#define MEMTRACK_RSMI_FIELD(name, essential, params) rsmi_status_t (*name) params;

struct memtrack_rsmi {
	MEMTRACK_RSMI_CALLS(MEMTRACK_RSMI_FIELD)
};

// memtrack_rsmi is rocm_smi as rocmsmi.go calls it, filled by
// memtrack_rsmi_open.
extern struct memtrack_rsmi memtrack_rsmi;

// The library names tried, in order.
#define MEMTRACK_RSMI_NAMES 5

// memtrack_rsmi_opened is what memtrack_rsmi_open found.
typedef struct {
	int loaded;           // a library loaded and has every essential call
	int name;             // the index of the name that loaded, or -1
	char path[1024];      // its file
	char missing[128];    // the first essential call it lacks
	char why[512];        // dlerror's message for it
	char tried[MEMTRACK_RSMI_NAMES][512]; // dlerror's message for each name tried before
} memtrack_rsmi_opened;

void memtrack_rsmi_open(memtrack_rsmi_opened *o);
const char *memtrack_rsmi_name(int i);

#endif
