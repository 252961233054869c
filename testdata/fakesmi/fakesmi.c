// fakesmi is a stand-in for AMD's ROCm SMI library (librocm_smi64) for
// memtrack's tests on machines without an AMD GPU. It is test equipment,
// never part of the library, and a model of rocm_smi's documented
// behaviour: RULES.md lists each rule it follows with its source.
// scripts/test-rocm.sh builds it against AMD's rocm_smi.h (Debian's
// librocm-smi-dev) with
//
//	gcc -shared -fPIC -I<dir of rocm_smi/> -I<testdata/fakehip> -o librocm_smi64.so.5 fakesmi.c -ldl -lpthread
//
// a library of ROCm 5.7 (rsmi_compute_process_info_by_device_get), and
// once more with -DFAKESMI_ROCM=502 as librocm_smi64.so.1, a library of
// ROCm 5.2 as Debian ships it, which has no such call.
//
// It reads the machine the fake HIP runtime keeps (testdata/fakehip,
// machine.h): which processes initialised the runtime, where they hold
// memory or created queues, and how much, so that every process's
// hipMemGetInfo and the SMI library's per-process figures agree, across
// OS processes when they share FAKEHIP_MACHINE. Without FAKEHIP_MACHINE it
// reads the machine of the fake runtime loaded in the process, if any; with
// neither, or with FAKEHIP_DEVICES=0, the machine has no AMD GPU, and
// rsmi_init fails as AMD's library does there.
//
// Its environment variables, read at rsmi_init:
//
//	FAKESMI_LIST_FIELDS=r  what rsmi_compute_process_info_get fills in each
//	                       entry: pid (default), the process and PASID
//	                       only, as AMD's ROCm 5.2 library does; all, the
//	                       VRAM too (the sum over the process's devices)
//	FAKESMI_GPUS=r         which devices a process "is using"
//	                       (rsmi_compute_process_gpus_get, and what
//	                       rsmi_compute_process_info_by_pid_get sums):
//	                       memory (default), those where it holds memory or
//	                       created a queue; queues, those where it created a
//	                       queue (a stream) only
//	FAKESMI_PID_OFFSET=n   the PIDs reported are the processes' plus n: a
//	                       caller in a container with a PID namespace of
//	                       its own, where the kernel's PIDs are the host's
//	FAKESMI_FAIL=f:n:code[,..] the n-th call of the process to f fails with
//	                       the rsmi_status_t code and does nothing
#include <rocm_smi/rocm_smi.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "machine.h"

#ifndef FAKESMI_ROCM
#define FAKESMI_ROCM 507
#endif

#if FAKESMI_ROCM >= 507
// ROCm 5.7's rocm_smi.h: "Get the info of a process on a specific device".
rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv_ind, rsmi_process_info_t *proc);
#endif

#define MAX_FAULTS 16

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inits; // rsmi_init's count, less rsmi_shut_down's
static struct machine *mach;
static int mach_fd = -1;
static struct machine_devices devs;
static int list_all, gpus_queues;
static unsigned pid_offset;
static struct {
	char name[64];
	long n, calls;
	int code;
} faults[MAX_FAULTS];
static int nfaults;

static void parse_faults(const char *s) {
	nfaults = 0;
	while (s && *s && nfaults < MAX_FAULTS) {
		size_t n = strcspn(s, ":");
		if (n == 0 || n >= sizeof faults[0].name || s[n] != ':') break;
		memcpy(faults[nfaults].name, s, n);
		faults[nfaults].name[n] = 0;
		char *end;
		faults[nfaults].n = strtol(s + n + 1, &end, 0);
		if (*end != ':') break;
		faults[nfaults].code = (int)strtol(end + 1, &end, 0);
		faults[nfaults].calls = 0;
		nfaults++;
		s = *end == ',' ? end + 1 : NULL;
	}
}

// fault returns the status injected into this call of fn, or success; mu
// is held.
static rsmi_status_t fault(const char *fn) {
	for (int i = 0; i < nfaults; i++) {
		if (strcmp(faults[i].name, fn) == 0 && ++faults[i].calls == faults[i].n) return (rsmi_status_t)faults[i].code;
	}
	return RSMI_STATUS_SUCCESS;
}

// find_machine maps FAKEHIP_MACHINE's file, or finds the machine of the fake
// runtime loaded in the process; NULL where there is neither.
static struct machine *find_machine(int *fd) {
	const char *path = getenv("FAKEHIP_MACHINE");
	*fd = -1;
	if (path && *path) {
		const char *what = NULL;
		struct machine *m = machine_map(path, fd, &what);
		if (!m) fprintf(stderr, "fakesmi: FAKEHIP_MACHINE=%s: %s failed\n", path, what);
		return m;
	}
	static const char *runtimes[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
	for (size_t i = 0; i < sizeof runtimes / sizeof runtimes[0]; i++) {
		void *lib = dlopen(runtimes[i], RTLD_NOW | RTLD_NOLOAD);
		if (!lib) continue;
		fakehip_machine_fn get = (fakehip_machine_fn)dlsym(lib, "fakehip_machine");
		fakehip_machine_fd_fn get_fd = (fakehip_machine_fd_fn)dlsym(lib, "fakehip_machine_fd");
		dlclose(lib); // NOLOAD took a reference; the process keeps the library
		if (get && get_fd) {
			*fd = get_fd();
			return get();
		}
	}
	return NULL;
}

// enter is the prologue of every call but rsmi_init, rsmi_status_string
// and rsmi_version_get: an initialised library, and the fault injected into
// this call. It returns with mu held where it succeeds.
static rsmi_status_t enter(const char *fn) {
	pthread_mutex_lock(&mu);
	rsmi_status_t r = inits > 0 ? fault(fn) : RSMI_STATUS_INIT_ERROR;
	if (r != RSMI_STATUS_SUCCESS) pthread_mutex_unlock(&mu);
	return r;
}

// rsmi_init "initializes internal data structures, including those
// corresponding to sources of information that SMI provides": here, it
// finds the machine and its GPUs, and fails with RSMI_STATUS_INIT_ERROR
// where there are none, as AMD's library does on a machine without an AMD
// GPU.
rsmi_status_t rsmi_init(uint64_t init_flags) {
	pthread_mutex_lock(&mu);
	parse_faults(getenv("FAKESMI_FAIL"));
	rsmi_status_t r = fault("rsmi_init");
	if (r == RSMI_STATUS_SUCCESS && inits == 0) {
		machine_config(&devs);
		const char *s = getenv("FAKESMI_LIST_FIELDS");
		list_all = s && strcmp(s, "all") == 0;
		s = getenv("FAKESMI_GPUS");
		gpus_queues = s && strcmp(s, "queues") == 0;
		s = getenv("FAKESMI_PID_OFFSET");
		pid_offset = s && *s ? (unsigned)strtoul(s, NULL, 0) : 0;
		if (!mach) mach = find_machine(&mach_fd);
		if (!mach || devs.n == 0) r = RSMI_STATUS_INIT_ERROR;
	}
	if (r == RSMI_STATUS_SUCCESS) inits++;
	pthread_mutex_unlock(&mu);
	return r;
}

rsmi_status_t rsmi_shut_down(void) {
	pthread_mutex_lock(&mu);
	rsmi_status_t r = inits > 0 ? RSMI_STATUS_SUCCESS : RSMI_STATUS_INIT_ERROR;
	if (r == RSMI_STATUS_SUCCESS) inits--;
	pthread_mutex_unlock(&mu);
	return r;
}

static const struct {
	rsmi_status_t status;
	const char *text;
} texts[] = {
	{RSMI_STATUS_SUCCESS, "RSMI_STATUS_SUCCESS: The function has been executed successfully."},
	{RSMI_STATUS_INVALID_ARGS, "RSMI_STATUS_INVALID_ARGS: The provided arguments do not meet the preconditions required for the input."},
	{RSMI_STATUS_NOT_SUPPORTED, "RSMI_STATUS_NOT_SUPPORTED: This function is not supported in the current environment."},
	{RSMI_STATUS_PERMISSION, "RSMI_STATUS_PERMISSION: The user does not have permission to perform the requested operation."},
	{RSMI_STATUS_INPUT_OUT_OF_BOUNDS, "RSMI_STATUS_INPUT_OUT_OF_BOUNDS: The provided input is out of allowable or safe range"},
	{RSMI_STATUS_INIT_ERROR, "An error occurred during initialization, during monitor discovery or when when initializing internal data structures"},
	{RSMI_STATUS_NOT_FOUND, "RSMI_STATUS_NOT_FOUND: An item required to complete the call was not found"},
	{RSMI_STATUS_INSUFFICIENT_SIZE, "RSMI_STATUS_INSUFFICIENT_SIZE: Not enough resources were available to fully execute the call"},
};

rsmi_status_t rsmi_status_string(rsmi_status_t status, const char **status_string) {
	if (!status_string) return RSMI_STATUS_INVALID_ARGS;
	*status_string = "RSMI_STATUS_UNKNOWN_ERROR: An unknown error prevented the call from completing successfully";
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		if (texts[i].status == status) *status_string = texts[i].text;
	}
	return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_version_get(rsmi_version_t *version) {
	if (!version) return RSMI_STATUS_INVALID_ARGS;
	*version = (rsmi_version_t){.major = FAKESMI_ROCM / 100, .minor = FAKESMI_ROCM % 100, .patch = 0, .build = "fakesmi"};
	return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_num_monitor_devices(uint32_t *num_devices) {
	if (!num_devices) return RSMI_STATUS_INVALID_ARGS;
	rsmi_status_t r = enter("rsmi_num_monitor_devices");
	if (r != RSMI_STATUS_SUCCESS) return r;
	*num_devices = (uint32_t)devs.n;
	pthread_mutex_unlock(&mu);
	return RSMI_STATUS_SUCCESS;
}

// rsmi_dev_pci_id_get: "BDFID = ((DOMAIN & 0xffffffff) << 32) | ((BUS &
// 0xff) << 8) | ((DEVICE & 0x1f) <<3 ) | (FUNCTION & 0x7)", the device's
// address as the fake runtime's hipDeviceGetPCIBusId writes it.
rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid) {
	if (!bdfid) return RSMI_STATUS_INVALID_ARGS;
	rsmi_status_t r = enter("rsmi_dev_pci_id_get");
	if (r != RSMI_STATUS_SUCCESS) return r;
	if (dv_ind >= (uint32_t)devs.n) {
		r = RSMI_STATUS_INVALID_ARGS;
	} else {
		*bdfid = ((uint64_t)devs.domain[dv_ind] << 32) | ((devs.bus[dv_ind] & 0xff) << 8) | ((devs.dev[dv_ind] & 0x1f) << 3) |
			 (devs.fn[dv_ind] & 0x7);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

// ---- the compute processes, read from the machine at every call

// snapshot copies the machine's processes, the exited ones reaped; mu is
// held.
static void snapshot(struct machine_proc *out) {
	machine_lock(mach, mach_fd, NULL);
	memcpy(out, mach->procs, sizeof mach->procs);
	machine_unlock(mach);
}

// on reports whether p is on device d: it holds memory or created a queue
// there (only a queue, for the devices it "is using" under
// FAKESMI_GPUS=queues).
static int on(const struct machine_proc *p, int d, int queues_only) {
	return p->queues[d] || (!queues_only && p->used[d] > 0);
}

// find returns the listed process whose reported PID is pid, or NULL.
static const struct machine_proc *find(const struct machine_proc *procs, uint32_t pid) {
	for (int i = 0; i < MACHINE_PROCS; i++) {
		if (procs[i].pid != 0 && procs[i].kfd && (uint32_t)procs[i].pid + pid_offset == pid) return &procs[i];
	}
	return NULL;
}

static void fill(rsmi_process_info_t *info, const struct machine_proc *procs, const struct machine_proc *p, int vram) {
	memset(info, 0, sizeof *info);
	info->process_id = (uint32_t)p->pid + pid_offset;
	info->pasid = MACHINE_PASID_BASE + (uint32_t)(p - procs);
	for (int d = 0; vram && d < devs.n; d++) {
		if (on(p, d, gpus_queues)) info->vram_usage += p->used[d];
	}
}

// rsmi_compute_process_info_get: "If procs is NULL, num_items will be
// updated with the number of processes for which there is current process
// information"; otherwise it writes "up to *num_items instances", sets
// *num_items to "the number of processes actually written", and returns
// RSMI_STATUS_INSUFFICIENT_SIZE "if there were more processes for which
// information was available, but not enough space was provided". The
// processes are those the kernel knows as compute processes: each once its
// runtime initialised, until it exits.
rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items) {
	if (!num_items) return RSMI_STATUS_INVALID_ARGS;
	rsmi_status_t r = enter("rsmi_compute_process_info_get");
	if (r != RSMI_STATUS_SUCCESS) return r;
	struct machine_proc snap[MACHINE_PROCS];
	snapshot(snap);
	uint32_t found = 0, written = 0;
	for (int i = 0; i < MACHINE_PROCS; i++) {
		if (snap[i].pid == 0 || !snap[i].kfd) continue;
		if (procs && written < *num_items) fill(&procs[written++], snap, &snap[i], list_all);
		found++;
	}
	pthread_mutex_unlock(&mu);
	if (!procs) {
		*num_items = found;
		return RSMI_STATUS_SUCCESS;
	}
	r = written < found ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
	*num_items = written;
	return r;
}

// rsmi_compute_process_info_by_pid_get: "the process information for pid,
// if available"; RSMI_STATUS_NOT_FOUND "if there was no process information
// found for the provided pid". Its VRAM is the sum over the devices the
// process is using.
rsmi_status_t rsmi_compute_process_info_by_pid_get(uint32_t pid, rsmi_process_info_t *proc) {
	if (!proc) return RSMI_STATUS_INVALID_ARGS;
	rsmi_status_t r = enter("rsmi_compute_process_info_by_pid_get");
	if (r != RSMI_STATUS_SUCCESS) return r;
	struct machine_proc snap[MACHINE_PROCS];
	snapshot(snap);
	pthread_mutex_unlock(&mu);
	const struct machine_proc *p = find(snap, pid);
	if (!p) return RSMI_STATUS_NOT_FOUND;
	fill(proc, snap, p, 1);
	return RSMI_STATUS_SUCCESS;
}

// rsmi_compute_process_gpus_get: "the device indices currently being used
// by a process", read as the process list is ("If dv_indices is NULL,
// num_devices will be updated with the number devices being used";
// RSMI_STATUS_INSUFFICIENT_SIZE "if there were more gpu indices that could
// have been written").
rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices, uint32_t *num_devices) {
	if (!num_devices) return RSMI_STATUS_INVALID_ARGS;
	rsmi_status_t r = enter("rsmi_compute_process_gpus_get");
	if (r != RSMI_STATUS_SUCCESS) return r;
	struct machine_proc snap[MACHINE_PROCS];
	snapshot(snap);
	pthread_mutex_unlock(&mu);
	const struct machine_proc *p = find(snap, pid);
	if (!p) return RSMI_STATUS_NOT_FOUND;
	uint32_t found = 0, written = 0;
	for (int d = 0; d < devs.n; d++) {
		if (!on(p, d, gpus_queues)) continue;
		if (dv_indices && written < *num_devices) dv_indices[written++] = (uint32_t)d;
		found++;
	}
	if (!dv_indices) {
		*num_devices = found;
		return RSMI_STATUS_SUCCESS;
	}
	r = written < found ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
	*num_devices = written;
	return r;
}

#if FAKESMI_ROCM >= 507
// rsmi_compute_process_info_by_device_get (ROCm 5.7): "the process
// information for pid on the device, if available": its VRAM on dv_ind, for
// a process on that device; RSMI_STATUS_NOT_FOUND otherwise.
rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv_ind, rsmi_process_info_t *proc) {
	if (!proc) return RSMI_STATUS_INVALID_ARGS;
	rsmi_status_t r = enter("rsmi_compute_process_info_by_device_get");
	if (r != RSMI_STATUS_SUCCESS) return r;
	if (dv_ind >= (uint32_t)devs.n) {
		pthread_mutex_unlock(&mu);
		return RSMI_STATUS_INPUT_OUT_OF_BOUNDS;
	}
	struct machine_proc snap[MACHINE_PROCS];
	snapshot(snap);
	pthread_mutex_unlock(&mu);
	const struct machine_proc *p = find(snap, pid);
	if (!p || !on(p, (int)dv_ind, 0)) return RSMI_STATUS_NOT_FOUND;
	fill(proc, snap, p, 0);
	proc->vram_usage = p->used[dv_ind];
	return RSMI_STATUS_SUCCESS;
}
#endif
