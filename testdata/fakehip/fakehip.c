// fakehip is a stand-in for AMD's HIP runtime (libamdhip64) for memtrack's
// tests on machines without an AMD GPU. It is test equipment, never part of
// the library, and a model of the runtime's documented behaviour: RULES.md
// lists each rule it follows with its source. scripts/test-rocm.sh builds
// it against AMD's hip_runtime_api.h (Debian's libamdhip64-dev) with
//
//	gcc -shared -fPIC -I<dir of hip/> -o libamdhip64.so.6 fakehip.c fakehip_stream.c fakehip_proc.c -lpthread -ldl
//
// and once more with -DFAKEHIP_ABI=502 as libamdhip64.so.5, a runtime of
// ROCm 5.2 that lacks the calls later releases added. This file holds the
// configuration, the devices and each thread's current device, the
// runtime's initialisation, the memory calls and the machine the processes
// share (machine.h); streams, events, pools and graph memory are in
// fakehip_stream.c, the version and hipGetProcAddress in fakehip_proc.c.
//
// It counts the calls of each entry point, every call that passes its
// prologue, per process: fakehip_calls(name), which a test finds with
// dlsym, so that a test can tell how many runtime calls an operation takes.
//
// It is configured by environment variables, read once, on the first call:
//
//	FAKEHIP_DEVICES=n          the number of devices (default 1); 0: a
//	                           machine without an AMD GPU, where the runtime
//	                           cannot initialise (FAKEHIP_NOGPU_INIT)
//	FAKEHIP_CAPACITY=b[,b..]   each device's memory in bytes (default 4 GiB);
//	                           the last value repeats for later devices
//	FAKEHIP_NAME=s             every device's name (default "memtrack
//	                           fakehip N"): a real GPU's name, such as "AMD
//	                           Instinct MI300X", makes tests take the
//	                           branches they take on a real GPU
//	FAKEHIP_PCI_BUS=b          the PCI bus of device 0 (default 0xc1); device
//	                           i is at 0000:(b+i):00.0
//	FAKEHIP_CONTEXT_BYTES=b    memory the runtime takes on each device when
//	                           it initialises (default 0), as a real one does
//	FAKEHIP_MEMINFO=r          what hipMemGetInfo's free memory counts:
//	                           device (default): every process's memory;
//	                           process: this process's only (RULES.md)
//	FAKEHIP_NOGPU_INIT=r       what the runtime answers where it cannot
//	                           initialise (FAKEHIP_DEVICES=0): invalid-device
//	                           (default, as AMD's runtime answers), or
//	                           no-device, or success (hipInit then succeeds
//	                           and every device call fails)
//	FAKEHIP_ERROR=code         every call returns this hipError_t
//	FAKEHIP_FAIL=f:n:code[,..] the n-th call of the process to f fails with
//	                           the hipError_t code and does nothing
//	FAKEHIP_MACHINE=path       the machine's state (machine.h) is the file
//	                           path, mapped shared: every process started
//	                           with the same path and devices shares one set
//	                           of GPUs, sees the others' memory in
//	                           hipMemGetInfo and is listed with its own by
//	                           the fake SMI library; by default the process
//	                           is alone on its machine
//	FAKEHIP_VERSION, FAKEHIP_HIDE, FAKEHIP_PROC_VERSION: fakehip_proc.c
//	FAKEHIP_POOLS, FAKEHIP_POOL_FREE, FAKEHIP_POOL_GRANULE,
//	FAKEHIP_HIGH_RESET, FAKEHIP_TRIM_OBSERVED: fakehip_stream.c
#include "fakehip_api.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "machine.h"

#define MAX_FAULTS 16

// The outcomes of the runtime's initialisation.
enum { INIT_NONE, INIT_OK, INIT_FAILED };

struct fault {
	char name[64];
	long n, calls;
	int code;
};

struct alloc {
	struct alloc *next;
	uintptr_t ptr;
	size_t size;
	int device;
};

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static struct machine_devices devs;
static const char *device_name;
static size_t context_bytes;
static int meminfo_process; // FAKEHIP_MEMINFO=process
static hipError_t nogpu_init = hipErrorInvalidDevice;
static hipError_t every_call = hipSuccess;
static struct fault faults[MAX_FAULTS];
static int nfaults;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int init_state; // INIT_*, under mu
static struct alloc *live;
static uintptr_t next_address = 0x7e0000000000ull;

// Each thread's current device: "HIP maintains an default device for each
// thread using thread-local-storage" (hipGetDevice); device 0 until
// hipSetDevice.
static __thread int current_device;

// ---- the machine: every process's device memory, as the kernel keeps it

static struct machine *mach;
static struct machine_proc *self;
static int mach_fd = -1;

static void die(const char *what) {
	fprintf(stderr, "fakehip: FAKEHIP_MACHINE=%s: %s: %s\n", getenv("FAKEHIP_MACHINE") ? getenv("FAKEHIP_MACHINE") : "(none)",
		what, strerror(errno));
	abort();
}

static void lock_machine(void) { machine_lock(mach, mach_fd, self); }
static void unlock_machine(void) { machine_unlock(mach); }

static void machine_setup(void) {
	const char *what = NULL;
	mach = machine_map(getenv("FAKEHIP_MACHINE"), &mach_fd, &what);
	if (!mach) die(what);
	lock_machine();
	for (int i = 0; i < MACHINE_PROCS && !self; i++) {
		if (mach->procs[i].pid != 0) continue;
		if (mach_fd >= 0) {
			struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = machine_lock_slot(i), .l_len = 1};
			if (fcntl(mach_fd, F_SETLK, &fl) != 0) continue; // a process still exiting holds it
		}
		self = &mach->procs[i];
		memset(self, 0, sizeof *self);
		self->pid = (int)getpid();
	}
	unlock_machine();
	if (!self) {
		errno = ENOSPC;
		die("more processes than the machine has slots for");
	}
}

// in_use returns the memory in use on device dev, by every process;
// mach->mu is held.
static unsigned long long in_use(int dev) {
	unsigned long long n = 0;
	for (int i = 0; i < MACHINE_PROCS; i++) n += mach->procs[i].used[dev];
	return n;
}

hipError_t fakehip_charge(int dev, size_t n) {
	lock_machine();
	unsigned long long u = in_use(dev);
	hipError_t r = u > devs.capacity[dev] || n > devs.capacity[dev] - u ? hipErrorOutOfMemory : hipSuccess;
	if (r == hipSuccess) self->used[dev] += n;
	unlock_machine();
	return r;
}

void fakehip_uncharge(int dev, size_t n) {
	lock_machine();
	self->used[dev] -= n;
	unlock_machine();
}

void fakehip_note_queue(int dev) {
	if (__atomic_load_n(&self->queues[dev], __ATOMIC_RELAXED)) return;
	lock_machine();
	self->queues[dev] = 1;
	unlock_machine();
}

struct machine *fakehip_machine(void);
int fakehip_machine_fd(void);

// ---- configuration

static long env_long(const char *name, long def) {
	const char *s = getenv(name);
	return s && *s ? strtol(s, NULL, 0) : def;
}

static void parse_faults(const char *s) {
	while (s && *s && nfaults < MAX_FAULTS) {
		struct fault *f = &faults[nfaults];
		size_t n = strcspn(s, ":");
		if (n == 0 || n >= sizeof f->name || s[n] != ':') break;
		memcpy(f->name, s, n);
		f->name[n] = 0;
		char *end;
		f->n = strtol(s + n + 1, &end, 0);
		if (*end != ':') break;
		f->code = (int)strtol(end + 1, &end, 0);
		nfaults++;
		s = *end == ',' ? end + 1 : NULL;
	}
}

static void configure(void) {
	machine_config(&devs);
	device_name = getenv("FAKEHIP_NAME");
	if (device_name && !*device_name) device_name = NULL;
	context_bytes = (size_t)env_long("FAKEHIP_CONTEXT_BYTES", 0);
	const char *s = getenv("FAKEHIP_MEMINFO");
	meminfo_process = s && strcmp(s, "process") == 0;
	s = getenv("FAKEHIP_NOGPU_INIT");
	if (s && strcmp(s, "no-device") == 0) nogpu_init = hipErrorNoDevice;
	if (s && strcmp(s, "success") == 0) nogpu_init = hipSuccess;
	every_call = (hipError_t)env_long("FAKEHIP_ERROR", hipSuccess);
	parse_faults(getenv("FAKEHIP_FAIL"));
	fakehip_proc_configure();
	fakehip_stream_configure();
	machine_setup();
}

// ---- the calls of each entry point

// The counts of calls, by the address of the name each entry point passes
// to its prologue: one slot per address, taken on the first call.
#define CALL_SLOTS 512
static struct {
	const char *name;
	unsigned long calls;
} call_counts[CALL_SLOTS];

static void count_call(const char *fn) {
	size_t h = (size_t)(((uintptr_t)fn >> 3) * 0x9E3779B97F4A7C15ull >> 40);
	for (size_t i = 0; i < CALL_SLOTS; i++) {
		size_t k = (h + i) % CALL_SLOTS;
		const char *cur = __atomic_load_n(&call_counts[k].name, __ATOMIC_ACQUIRE);
		if (!cur && __atomic_compare_exchange_n(&call_counts[k].name, &cur, fn, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			cur = fn;
		if (cur == fn) {
			__atomic_add_fetch(&call_counts[k].calls, 1, __ATOMIC_RELAXED);
			return;
		}
	}
}

// fakehip_calls returns how many calls the process made to the entry
// point name so far.
unsigned long fakehip_calls(const char *name) {
	unsigned long n = 0;
	for (size_t k = 0; k < CALL_SLOTS; k++) {
		const char *cur = __atomic_load_n(&call_counts[k].name, __ATOMIC_ACQUIRE);
		if (cur && strcmp(cur, name) == 0) n += __atomic_load_n(&call_counts[k].calls, __ATOMIC_RELAXED);
	}
	return n;
}

// fakehip_enter is the prologue of every call named fn: it counts the
// call, stops the process if the runtime configured has no fn
// (fakehip_proc.c), and returns the configured error or the fault injected
// into this call, if any.
hipError_t fakehip_enter(const char *fn) {
	pthread_once(&config_once, configure);
	count_call(fn);
	if (fakehip_gated) fakehip_absent(fn);
	if (every_call != hipSuccess) return every_call;
	if (nfaults == 0) return hipSuccess;
	hipError_t r = hipSuccess;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nfaults; i++) {
		if (strcmp(faults[i].name, fn) == 0 && ++faults[i].calls == faults[i].n) r = (hipError_t)faults[i].code;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

// initialise is the runtime's initialisation, which "Most HIP APIs
// implicitly" do (hipInit): once, it finds the devices, or fails where
// there are none; the kernel then lists the process as a compute process
// and the runtime holds FAKEHIP_CONTEXT_BYTES on each device.
static hipError_t initialise(void) {
	int st = __atomic_load_n(&init_state, __ATOMIC_ACQUIRE);
	if (st == INIT_NONE) {
		pthread_mutex_lock(&mu);
		if (init_state == INIT_NONE) {
			int ok = devs.n > 0;
			if (ok) {
				lock_machine();
				self->kfd = 1;
				unlock_machine();
				for (int d = 0; d < devs.n && context_bytes > 0; d++) {
					if (fakehip_charge(d, context_bytes) != hipSuccess) ok = 0;
				}
			}
			__atomic_store_n(&init_state, ok ? INIT_OK : INIT_FAILED, __ATOMIC_RELEASE);
		}
		st = init_state;
		pthread_mutex_unlock(&mu);
	}
	if (st == INIT_OK) return hipSuccess;
	return nogpu_init == hipSuccess ? hipErrorInvalidDevice : nogpu_init;
}

// fakehip_ready is fakehip_enter, then the implicit initialisation.
hipError_t fakehip_ready(const char *fn) {
	hipError_t r = fakehip_enter(fn);
	return r != hipSuccess ? r : initialise();
}

// on_device is fakehip_ready, then a device that exists.
static hipError_t on_device(const char *fn, int dev) {
	hipError_t r = fakehip_ready(fn);
	if (r != hipSuccess) return r;
	return dev < 0 || dev >= devs.n ? hipErrorInvalidDevice : hipSuccess;
}

int fakehip_current_device(void) { return current_device; }
int fakehip_devices(void) {
	pthread_once(&config_once, configure);
	return devs.n;
}

uintptr_t fakehip_address(size_t n) {
	size_t step = (n + 0xfff) & ~(size_t)0xfff;
	return __atomic_fetch_add(&next_address, step ? step : 0x1000, __ATOMIC_RELAXED);
}

// ---- shared with the fake SMI library (machine.h)

struct machine *fakehip_machine(void) {
	pthread_once(&config_once, configure);
	return mach;
}

int fakehip_machine_fd(void) {
	pthread_once(&config_once, configure);
	return mach_fd;
}

// ---- initialisation, devices and identity

hipError_t hipInit(unsigned int flags) {
	hipError_t r = fakehip_enter("hipInit");
	if (r != hipSuccess) return r;
	if (flags != 0) return hipErrorInvalidValue;
	r = initialise();
	return r != hipSuccess && nogpu_init == hipSuccess ? hipSuccess : r;
}

hipError_t hipGetDeviceCount(int *count) {
	hipError_t r = fakehip_enter("hipGetDeviceCount");
	if (r != hipSuccess) return r;
	if (!count) return hipErrorInvalidValue;
	initialise();
	*count = devs.n;
	return devs.n > 0 ? hipSuccess : hipErrorNoDevice;
}

hipError_t hipGetDevice(int *device) {
	hipError_t r = fakehip_ready("hipGetDevice");
	if (r != hipSuccess) return r;
	if (!device) return hipErrorInvalidValue;
	*device = current_device;
	return hipSuccess;
}

hipError_t hipSetDevice(int device) {
	hipError_t r = on_device("hipSetDevice", device);
	if (r != hipSuccess) return r;
	current_device = device;
	return hipSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device) {
	hipError_t r = on_device("hipDeviceGetName", device);
	if (r != hipSuccess) return r;
	if (!name || len <= 0) return hipErrorInvalidValue;
	if (device_name) {
		snprintf(name, (size_t)len, "%s", device_name);
	} else {
		snprintf(name, (size_t)len, "memtrack fakehip %d", device);
	}
	return hipSuccess;
}

// hipDeviceGetUuid: 16 characters, the hexadecimal digits of the device's
// unique ID, as AMD's runtime fills them (RULES.md).
hipError_t hipDeviceGetUuid(hipUUID *uuid, hipDevice_t device) {
	hipError_t r = on_device("hipDeviceGetUuid", device);
	if (r != hipSuccess) return r;
	if (!uuid) return hipErrorInvalidValue;
	char s[17];
	snprintf(s, sizeof s, "%016llx", 0x6d656d7472616b00ull + (unsigned long long)devs.bus[device]);
	memcpy(uuid->bytes, s, 16);
	return hipSuccess;
}

// hipDeviceGetPCIBusId: domain:bus:device.function, hexadecimal, "%04x:%02x:%02x.%01x"
// as AMD's runtime writes it; a len of 12 or less is too short for the 13
// characters with the NUL.
hipError_t hipDeviceGetPCIBusId(char *pciBusId, int len, int device) {
	hipError_t r = on_device("hipDeviceGetPCIBusId", device);
	if (r != hipSuccess) return r;
	if (!pciBusId || len <= 12) return hipErrorInvalidValue;
	snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.%01x", devs.domain[device], devs.bus[device], devs.dev[device], devs.fn[device]);
	return hipSuccess;
}

// The pool attribute is answered by fakehip_stream.c.
int fakehip_pools_supported(void);

hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId) {
	hipError_t r = on_device("hipDeviceGetAttribute", deviceId);
	if (r != hipSuccess) return r;
	if (!pi) return hipErrorInvalidValue;
	switch (attr) {
	case hipDeviceAttributeMemoryPoolsSupported:
		*pi = fakehip_pools_supported();
		return hipSuccess;
	default:
		return hipErrorInvalidValue; // an attribute the fake does not model
	}
}

hipError_t hipRuntimeGetVersion(int *runtimeVersion) {
	hipError_t r = fakehip_enter("hipRuntimeGetVersion");
	if (r != hipSuccess) return r;
	if (!runtimeVersion) return hipErrorInvalidValue;
	*runtimeVersion = fakehip_version();
	return hipSuccess;
}

// ---- errors

static const struct {
	hipError_t code;
	const char *name, *text;
} errors[] = {
	{hipSuccess, "hipSuccess", "no error"},
	{hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
	{hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
	{hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
	{hipErrorInvalidDevicePointer, "hipErrorInvalidDevicePointer", "invalid device pointer"},
	{hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
	{hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
	{hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
	{hipErrorNotReady, "hipErrorNotReady", "device not ready"},
	{hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
	{hipErrorStreamCaptureUnsupported, "hipErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
	{hipErrorStreamCaptureInvalidated, "hipErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"},
	{hipErrorIllegalAddress, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
	{hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

const char *hipGetErrorName(hipError_t hip_error) {
	fakehip_enter("hipGetErrorName");
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
		if (errors[i].code == hip_error) return errors[i].name;
	}
	return "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t hipError) {
	fakehip_enter("hipGetErrorString");
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
		if (errors[i].code == hipError) return errors[i].text;
	}
	return "unknown error";
}

// ---- device memory

// hipMalloc allocates on the calling thread's device: "If size is 0, no
// memory is allocated, *ptr returns nullptr, and hipSuccess is returned";
// hipErrorOutOfMemory where the device, with every process's memory, has
// not that much free, taking nothing.
hipError_t hipMalloc(void **ptr, size_t size) {
	hipError_t r = fakehip_ready("hipMalloc");
	if (r != hipSuccess) return r;
	if (!ptr) return hipErrorInvalidValue;
	if (size == 0) {
		*ptr = NULL;
		return hipSuccess;
	}
	int dev = current_device;
	r = fakehip_charge(dev, size);
	if (r != hipSuccess) return r;
	struct alloc *a = malloc(sizeof *a);
	if (!a) {
		fakehip_uncharge(dev, size);
		return hipErrorOutOfMemory;
	}
	*a = (struct alloc){.ptr = fakehip_address(size), .size = size, .device = dev};
	pthread_mutex_lock(&mu);
	a->next = live;
	live = a;
	pthread_mutex_unlock(&mu);
	*ptr = (void *)a->ptr;
	return hipSuccess;
}

// hipFree "performs an implicit hipDeviceSynchronize() call. If pointer is
// NULL, the hip runtime is initialized and hipSuccess is returned"; an
// address it did not give out is hipErrorInvalidDevicePointer. A
// stream-ordered allocation may be freed by it too (fakehip_stream.c).
hipError_t hipFree(void *ptr) {
	hipError_t r = fakehip_ready("hipFree");
	if (r != hipSuccess) return r;
	fakehip_sync_device(current_device);
	if (!ptr) return hipSuccess;
	pthread_mutex_lock(&mu);
	struct alloc **pp = &live;
	while (*pp && (*pp)->ptr != (uintptr_t)ptr) pp = &(*pp)->next;
	struct alloc *a = *pp;
	if (a) *pp = a->next;
	pthread_mutex_unlock(&mu);
	if (!a) return fakehip_pool_free_now((uintptr_t)ptr);
	fakehip_uncharge(a->device, a->size);
	free(a);
	return hipSuccess;
}

// hipMemGetInfo: the free and total memory of the current device. "On
// ROCM, this function gets the actual free memory left on the current
// device, so supports the cases while running multi-workload (such as
// multiple processes...)" (ROCm 6.x); ROCm 5.x's header warned instead that
// "the free memory only accounts for memory allocated by this process and
// may be optimistic" (FAKEHIP_MEMINFO=process).
hipError_t hipMemGetInfo(size_t *free, size_t *total) {
	hipError_t r = fakehip_ready("hipMemGetInfo");
	if (r != hipSuccess) return r;
	if (!free && !total) return hipSuccess;
	int dev = current_device;
	lock_machine();
	unsigned long long used = meminfo_process ? self->used[dev] : in_use(dev);
	unlock_machine();
	unsigned long long cap = devs.capacity[dev];
	if (free) *free = used > cap ? 0 : (size_t)(cap - used);
	if (total) *total = (size_t)cap;
	return hipSuccess;
}
