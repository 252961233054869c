// fakenvml is a stand-in for NVIDIA's management library
// (libnvidia-ml.so.1) for memtrack's tests on machines without a GPU, beside
// the fake driver of testdata/fakecuda. It is test equipment, never part of
// the library, and a model of NVML's documented behaviour: RULES.md lists
// each rule it follows with its source. scripts/test-cuda.sh builds it with
//
//	gcc -shared -fPIC -I<go-nvml's gen/nvml> -o libnvidia-ml.so.1 fakenvml.c -ldl -lpthread
//
// against NVIDIA's nvml.h as github.com/NVIDIA/go-nvml v0.13.4-1 ships it
// (gen/nvml, from which NVIDIA generates that binding; scripts/test-cuda.sh
// fetches the module with go mod download), so that every function has the
// signature and versioned name the real library has. It reads the machine the fake driver keeps
// (testdata/fakecuda/machine.h): which processes hold a context on each
// device and the memory the driver attributes to each, so that its figures
// and every process's cuMemGetInfo agree as on a real machine; with
// FAKECUDA_MACHINE, across processes. It finds the driver loaded in the
// process (dlopen with RTLD_NOLOAD, then dlsym), as NVML talks to the
// driver that is loaded: without the fake driver in the process,
// nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED.
//
// Where the documentation leaves a behaviour open, or describes a machine
// the fake is not, it is configured by environment variables, read once:
//
//	FAKENVML_PID_OFFSET=n     NVML reports every process's PID plus n: the
//	                          host's PIDs, as a process in a container with
//	                          its own PID namespace does not see them
//	FAKENVML_USED=na          usedGpuMemory is NVML_VALUE_NOT_AVAILABLE, as
//	                          under Windows WDDM
//	FAKENVML_PRIVILEGED=1     the caller has the privileges that a full-GPU
//	                          handle of a GPU in MIG mode needs for the
//	                          aggregate process list (default 0: it gets
//	                          NVML_ERROR_NO_PERMISSION)
//	FAKENVML_HIDE=f[,..]      dlsym finds no f, one of the three calls that
//	                          list processes (their full names), as in an
//	                          older driver's library: a 470 driver's has no
//	                          nvmlDeviceGetComputeRunningProcesses_v3
//	FAKENVML_ERROR=code       every call returns this nvmlReturn_t
//	FAKENVML_FAIL=f:n:code[,..] the n-th call of the process to the function
//	                          f (its full name, such as
//	                          nvmlDeviceGetComputeRunningProcesses_v3) fails
//	                          with code and does nothing
//	FAKENVML_TRACE=path       every call appends its function's name and a
//	                          newline to the file path, so that a test can
//	                          count the calls a program makes (none on its
//	                          allocation path)
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../fakecuda/faults.h"
#include "../fakecuda/machine.h"

struct nvmlDevice_st {
	int index;
	int mig; // a MIG device handle (nvmlDeviceGetHandleByUUID of a MIG- UUID)
};

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long pid_offset;
static int used_na, privileged;
static nvmlReturn_t every_call = NVML_SUCCESS;
static struct fault faults[MAX_FAULTS];
static int nfaults;
static int refcount; // nvmlInit_v2 and nvmlShutdown
static int trace_fd = -1; // FAKENVML_TRACE

// The driver's accessors (machine.h), found at nvmlInit_v2.
static fakecuda_machine_fn drv_machine;
static fakecuda_machine_lock_fn drv_lock, drv_unlock;
static fakecuda_devices_fn drv_devices;
static fakecuda_capacity_fn drv_capacity;
static fakecuda_identity_fn drv_identity;

static struct nvmlDevice_st devices[MACHINE_DEVICES], mig_devices[MACHINE_DEVICES];

static long env_long(const char *name, long def) {
	const char *s = getenv(name);
	return s && *s ? strtol(s, NULL, 0) : def;
}

static void configure(void) {
	pid_offset = env_long("FAKENVML_PID_OFFSET", 0);
	const char *u = getenv("FAKENVML_USED");
	used_na = u && strcmp(u, "na") == 0;
	privileged = env_long("FAKENVML_PRIVILEGED", 0) != 0;
	every_call = (nvmlReturn_t)env_long("FAKENVML_ERROR", NVML_SUCCESS);
	const char *trace = getenv("FAKENVML_TRACE");
	if (trace && *trace) trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	nfaults = parse_faults(getenv("FAKENVML_FAIL"), faults);
	for (int i = 0; i < MACHINE_DEVICES; i++) {
		devices[i].index = mig_devices[i].index = i;
		mig_devices[i].mig = 1;
	}
}

// enter is the prologue of every call named fn: the configured error, or
// the fault injected into this call, if any.
static nvmlReturn_t enter(const char *fn) {
	pthread_once(&config_once, configure);
	if (trace_fd >= 0) {
		char line[80];
		int n = snprintf(line, sizeof line, "%s\n", fn);
		if (write(trace_fd, line, (size_t)n) != n) abort();
	}
	if (every_call != NVML_SUCCESS) return every_call;
	nvmlReturn_t r = NVML_SUCCESS;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nfaults; i++) {
		struct fault *f = &faults[i];
		if (strcmp(f->name, fn) == 0 && ++f->calls == f->n) r = (nvmlReturn_t)f->code;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

// ready also requires nvmlInit_v2: "It is the user's responsibility to call
// nvmlInit_v2() before calling any other methods".
static nvmlReturn_t ready(const char *fn) {
	nvmlReturn_t r = enter(fn);
	if (r != NVML_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	int n = refcount;
	pthread_mutex_unlock(&mu);
	return n > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static int ndevices(void) { return drv_devices(); }

static void identity(int dev, char *name, int len, unsigned char uuid[16]) { drv_identity(dev, name, len, uuid); }

// in_mig_mode: the fake driver names a MIG instance after its GPU and
// profile ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), as the driver does.
static int in_mig_mode(int dev) {
	char name[96];
	unsigned char u[16];
	identity(dev, name, sizeof name, u);
	const char *p = strstr(name, " MIG ");
	return p && strstr(p, "g.");
}

static int valid(nvmlDevice_t d) {
	if (d >= &devices[0] && d < &devices[MACHINE_DEVICES]) return d->index < ndevices();
	if (d >= &mig_devices[0] && d < &mig_devices[MACHINE_DEVICES]) return d->index < ndevices() && in_mig_mode(d->index);
	return 0;
}

// uuid_string writes dev's UUID as nvidia-smi prints it: "GPU-" (or "MIG-"
// for a MIG device handle) and the 16 bytes in hex, grouped 8-4-4-4-12.
static void uuid_string(int dev, int mig, char *out, size_t len) {
	char name[96];
	unsigned char u[16];
	identity(dev, name, sizeof name, u);
	snprintf(out, len, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 mig ? "MIG" : "GPU", u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
}

// ---- initialization and cleanup

nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags) {
	nvmlReturn_t r = enter("nvmlInitWithFlags");
	if (r != NVML_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	if (!drv_machine) {
		// The driver loaded in the process, however it was loaded
		// (linked, or dlopen'd with RTLD_LOCAL as memtrack does):
		// RTLD_NOLOAD opens nothing.
		void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
		if (drv) {
			drv_machine = (fakecuda_machine_fn)dlsym(drv, "fakecuda_machine");
			drv_lock = (fakecuda_machine_lock_fn)dlsym(drv, "fakecuda_machine_lock");
			drv_unlock = (fakecuda_machine_lock_fn)dlsym(drv, "fakecuda_machine_unlock");
			drv_devices = (fakecuda_devices_fn)dlsym(drv, "fakecuda_devices");
			drv_capacity = (fakecuda_capacity_fn)dlsym(drv, "fakecuda_capacity");
			drv_identity = (fakecuda_identity_fn)dlsym(drv, "fakecuda_identity");
		}
		if (!drv_machine || !drv_lock || !drv_unlock || !drv_devices || !drv_capacity || !drv_identity) {
			drv_machine = NULL;
			pthread_mutex_unlock(&mu);
			return NVML_ERROR_DRIVER_NOT_LOADED; // "if the NVIDIA driver is not running"
		}
	}
	pthread_mutex_unlock(&mu);
	drv_machine(); // configures the driver's machine
	pthread_mutex_lock(&mu);
	refcount++; // "A reference count of the number of initializations is maintained"
	pthread_mutex_unlock(&mu);
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t DECLDIR nvmlInit(void) { return nvmlInitWithFlags(0); }

// nvmlShutdown: "Complete shutdown will only occur when the reference count
// of all prior NVML initializations reaches zero"; UNINITIALIZED where
// none was made.
nvmlReturn_t DECLDIR nvmlShutdown(void) {
	nvmlReturn_t r = enter("nvmlShutdown");
	if (r != NVML_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	if (refcount == 0) r = NVML_ERROR_UNINITIALIZED;
	else refcount--;
	pthread_mutex_unlock(&mu);
	return r;
}

// ---- error names

const DECLDIR char *nvmlErrorString(nvmlReturn_t result) {
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_UNKNOWN: return "Unknown Error";
	default: return "Unknown Error";
	}
}

// ---- devices

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *count) {
	nvmlReturn_t r = ready("nvmlDeviceGetCount_v2");
	if (r != NVML_SUCCESS) return r;
	if (!count) return NVML_ERROR_INVALID_ARGUMENT;
	*count = (unsigned int)ndevices();
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
	nvmlReturn_t r = ready("nvmlDeviceGetHandleByIndex_v2");
	if (r != NVML_SUCCESS) return r;
	if (!device || index >= (unsigned int)ndevices()) return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

// nvmlDeviceGetHandleByUUID: "The UUID of the target GPU or MIG instance";
// NVML_ERROR_NOT_FOUND "if uuid does not match a valid device on the
// system". NVML's indices are its own: CUDA_VISIBLE_DEVICES renumbers CUDA's
// ordinals, never NVML's, so a device is found by its UUID.
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
	nvmlReturn_t r = ready("nvmlDeviceGetHandleByUUID");
	if (r != NVML_SUCCESS) return r;
	if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < ndevices(); i++) {
		char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
		uuid_string(i, 0, s, sizeof s);
		if (strcmp(s, uuid) == 0) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
		uuid_string(i, 1, s, sizeof s);
		if (in_mig_mode(i) && strcmp(s, uuid) == 0) {
			*device = &mig_devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
	nvmlReturn_t r = ready("nvmlDeviceGetUUID");
	if (r != NVML_SUCCESS) return r;
	if (!valid(device) || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
	char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	uuid_string(device->index, device->mig, s, sizeof s);
	if (length < strlen(s) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(uuid, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
	nvmlReturn_t r = ready("nvmlDeviceGetName");
	if (r != NVML_SUCCESS) return r;
	if (!valid(device) || !name) return NVML_ERROR_INVALID_ARGUMENT;
	char s[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	unsigned char u[16];
	identity(device->index, s, sizeof s, u);
	if (length < strlen(s) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(name, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
	nvmlReturn_t r = ready("nvmlDeviceGetMigMode");
	if (r != NVML_SUCCESS) return r;
	if (!valid(device) || device->mig || !currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
	*currentMode = *pendingMode = in_mig_mode(device->index) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
	return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
	nvmlReturn_t r = ready("nvmlDeviceIsMigDeviceHandle");
	if (r != NVML_SUCCESS) return r;
	if (!valid(device) || !isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
	*isMigDevice = (unsigned int)device->mig;
	return NVML_SUCCESS;
}

// ---- processes

// The process list, one model behind the three calls that read it, each
// with the layout of the nvml.h that introduced it (nvml.h of go-nvml
// v0.13.4-1, as compiled here, declares all three): the unversioned call
// fills nvmlProcessInfo_v1_t (pid, usedGpuMemory: 16 bytes), _v2
// nvmlProcessInfo_v2_t and _v3 nvmlProcessInfo_t (both pid, usedGpuMemory,
// gpuInstanceId, computeInstanceId: 24 bytes). RULES.md cites the headers.
//
// It lists the processes "with a compute context on a device": those with
// a context of the fake driver alive on it, whatever they allocated; a
// process before its first context is not listed. Its usedGpuMemory is "all
// of the memory used by the application": every byte the driver charges to
// it on the device, its contexts' memory and its pools' reservations
// included. Called with a count smaller than the list (0 among them, infos
// then allowed to be NULL), it answers NVML_ERROR_INSUFFICIENT_SIZE with the
// count needed, or NVML_SUCCESS where none run; the list is read afresh at
// every call, so it "might change in time" between two calls as processes
// come and go.
enum layout { LAYOUT_V1, LAYOUT_V2, LAYOUT_V3 };

static nvmlReturn_t running_processes(const char *fn, enum layout layout, nvmlDevice_t device, unsigned int *infoCount,
				      void *infos) {
	nvmlReturn_t r = ready(fn);
	if (r != NVML_SUCCESS) return r;
	if (!valid(device) || !infoCount) return NVML_ERROR_INVALID_ARGUMENT;
	if (*infoCount > 0 && !infos) return NVML_ERROR_INVALID_ARGUMENT;
	int dev = device->index;
	// "In MIG mode, if device handle is provided, the API returns aggregate
	// information, only if the caller has appropriate privileges."
	if (!device->mig && in_mig_mode(dev) && !privileged) return NVML_ERROR_NO_PERMISSION;
	struct machine *m = drv_machine();
	nvmlProcessInfo_t list[MACHINE_PROCS];
	unsigned int n = 0;
	drv_lock();
	for (int i = 0; i < MACHINE_PROCS; i++) {
		struct machine_proc *p = &m->procs[i];
		if (p->pid == 0 || p->contexts[dev] <= 0) continue;
		nvmlProcessInfo_t *e = &list[n++];
		memset(e, 0, sizeof *e);
		e->pid = (unsigned int)(p->pid + pid_offset);
		e->usedGpuMemory = used_na ? (unsigned long long)NVML_VALUE_NOT_AVAILABLE : p->used[dev];
		// "If MIG is enabled, stores a valid GPU instance ID"; otherwise
		// the invalid ID, 0xFFFFFFFF.
		e->gpuInstanceId = e->computeInstanceId = in_mig_mode(dev) ? 0 : 0xFFFFFFFFu;
	}
	drv_unlock();
	if (*infoCount < n) {
		*infoCount = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned int i = 0; i < n; i++) {
		switch (layout) {
		case LAYOUT_V1:
			((nvmlProcessInfo_v1_t *)infos)[i] =
				(nvmlProcessInfo_v1_t){.pid = list[i].pid, .usedGpuMemory = list[i].usedGpuMemory};
			break;
		case LAYOUT_V2:
			((nvmlProcessInfo_v2_t *)infos)[i] = (nvmlProcessInfo_v2_t){
				.pid = list[i].pid,
				.usedGpuMemory = list[i].usedGpuMemory,
				.gpuInstanceId = list[i].gpuInstanceId,
				.computeInstanceId = list[i].computeInstanceId,
			};
			break;
		case LAYOUT_V3:
			((nvmlProcessInfo_t *)infos)[i] = list[i];
			break;
		}
	}
	*infoCount = n;
	return NVML_SUCCESS;
}

typedef nvmlReturn_t (*processes_v1_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
typedef nvmlReturn_t (*processes_v2_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);
typedef nvmlReturn_t (*processes_v3_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);

static nvmlReturn_t processes_v1(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos) {
	return running_processes("nvmlDeviceGetComputeRunningProcesses", LAYOUT_V1, device, infoCount, infos);
}

static nvmlReturn_t processes_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos) {
	return running_processes("nvmlDeviceGetComputeRunningProcesses_v2", LAYOUT_V2, device, infoCount, infos);
}

static nvmlReturn_t processes_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
	return running_processes("nvmlDeviceGetComputeRunningProcesses_v3", LAYOUT_V3, device, infoCount, infos);
}

// hidden reports whether FAKENVML_HIDE names fn: a comma-separated list of
// full names. It is read at every lookup, before anything is configured,
// and uses no state of its own.
static int hidden(const char *fn) {
	const char *s = getenv("FAKENVML_HIDE");
	size_t len = strlen(fn);
	while (s && *s) {
		size_t n = strcspn(s, ",");
		if (n == len && strncmp(s, fn, n) == 0) return 1;
		s += n;
		if (*s == ',') s++;
	}
	return 0;
}

// The three are exported as GNU indirect functions: the dynamic loader asks
// the resolver for the function when a program looks the symbol up, and a
// resolver that returns NULL makes dlsym find nothing, as in a library
// without that symbol (an older driver's): FAKENVML_HIDE. Each resolver's
// type is checked against nvml.h's declaration of its call.
static processes_v1_fn resolve_v1(void) {
	return hidden("nvmlDeviceGetComputeRunningProcesses") ? NULL : processes_v1;
}
static processes_v2_fn resolve_v2(void) {
	return hidden("nvmlDeviceGetComputeRunningProcesses_v2") ? NULL : processes_v2;
}
static processes_v3_fn resolve_v3(void) {
	return hidden("nvmlDeviceGetComputeRunningProcesses_v3") ? NULL : processes_v3;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
							  nvmlProcessInfo_v1_t *infos) __attribute__((ifunc("resolve_v1")));
nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
							     nvmlProcessInfo_v2_t *infos) __attribute__((ifunc("resolve_v2")));
nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
							     nvmlProcessInfo_t *infos) __attribute__((ifunc("resolve_v3")));

// nvmlSystemGetProcessName: the process's name, "cropped to provided
// length"; NVML_ERROR_NOT_FOUND "if process doesn't exists". The fake reads
// the host's /proc: the first word of the command line, or the command's
// name where that is empty.
nvmlReturn_t DECLDIR nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
	nvmlReturn_t r = ready("nvmlSystemGetProcessName");
	if (r != NVML_SUCCESS) return r;
	if (!name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
	char path[64], buf[256];
	long host = (long)pid - pid_offset;
	size_t got = 0;
	snprintf(path, sizeof path, "/proc/%ld/cmdline", host);
	FILE *f = fopen(path, "r");
	if (f) {
		got = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
	}
	buf[got] = 0;
	if (got == 0 || buf[0] == 0) {
		snprintf(path, sizeof path, "/proc/%ld/comm", host);
		f = fopen(path, "r");
		if (!f) return NVML_ERROR_NOT_FOUND;
		got = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[got] = 0;
		buf[strcspn(buf, "\n")] = 0;
	}
	snprintf(name, length, "%s", buf);
	return NVML_SUCCESS;
}
