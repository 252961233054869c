// fakecuda is a stand-in for the NVIDIA driver (libcuda.so.1) for memtrack's
// tests on machines without a GPU. It is test equipment, never part of the
// library, and a model of the driver's documented behaviour: RULES.md lists
// each rule it follows with its source. scripts/test-cuda.sh builds it with
//
//	gcc -shared -fPIC -I<dir of cuda.h> -o libcuda.so.1 fakecuda.c fakecuda_stream.c fakecuda_proc.c
//		fakecuda_graph.c fakecuda_vmm.c -lpthread
//
// It exports every cu* symbol that github.com/mumax/3/cuda/cu references, plus
// the primary-context, context-stack and error-name calls memtrack makes, and
// finds each by name and version as the driver does (cuGetProcAddress, in
// fakecuda_proc.c, which can also make it an older driver, or one without
// some calls).
// cuMemAlloc maps whole pages of the allocation granularity
// (FAKECUDA_GRANULARITY, 2 MiB by default): the device's used memory grows
// by the size rounded up to it, and a freed range's addresses go to the
// next allocation that fits in them, whatever its size, the last freed
// first, as an H200 did (RULES.md).
//
// Including cuda.h gives each function the signature and the versioned name
// (cuMemAlloc_v2, ...) the real driver has. Init, devices, primary contexts
// (retained and released, counted), contexts of one's own (cuCtxCreate,
// cuCtxDestroy), each thread's context stack (push, pop, set, get), error
// names and the memory calls work; device memory is host memory. A context
// that is not alive (a primary context retained by nobody, a destroyed one,
// a pointer the fake never gave out) is refused where the driver refuses it.
// Streams, events, host functions, memory pools and stream capture are in
// fakecuda_stream.c, graphs and graph memory in fakecuda_graph.c, virtual
// memory management (reserve, create, map) in fakecuda_vmm.c, the version
// and cuGetProcAddress in fakecuda_proc.c, all built with it.
// Everything else returns CUDA_ERROR_NOT_SUPPORTED.
//
// It counts the calls of each entry point, every call that passes its
// prologue (the calls FAKECUDA_FAIL counts), per process:
// fakecuda_calls(name), which a test finds with dlsym, returns the count of
// the base name (cuMemAlloc for cuMemAlloc_v2), so that it can tell how
// many driver calls an operation takes.
//
// It is configured by environment variables, read once, on the first call:
//
//	FAKECUDA_DEVICES=n         the number of devices (default 1); 0: cuInit
//	                           fails with CUDA_ERROR_NO_DEVICE, as the driver does
//	FAKECUDA_CAPACITY=b[,b..]  each device's memory in bytes (default 4 GiB);
//	                           the last value repeats for later devices
//	FAKECUDA_NAME=s            every device's name (default "memtrack fakecuda
//	                           N"): a real GPU's name, such as "NVIDIA H200",
//	                           makes the tests take the branches they take on
//	                           a real GPU, where they cannot tell the fake
//	FAKECUDA_CONTEXT_BYTES=b   memory a context takes on its device while it
//	                           lives (default 0), as a real one does
//	FAKECUDA_FAIL_ALLOC=n      the n-th cuMemAlloc of the process fails with
//	                           CUDA_ERROR_OUT_OF_MEMORY
//	FAKECUDA_FAIL_FREE=n       the n-th cuMemFree of the process fails with
//	                           CUDA_ERROR_INVALID_VALUE and frees nothing
//	FAKECUDA_FAIL=f:n:code[,..] the n-th call of the process to the driver
//	                           function f (its name without _v2, such as
//	                           cuCtxSetCurrent) fails with the CUresult code
//	                           and does nothing
//	FAKECUDA_ERROR=code        every call returns this CUresult
//	FAKECUDA_VERSION=v         the driver is CUDA version v (fakecuda_proc.c)
//	FAKECUDA_HIDE=f[,..]       the driver has no call f (fakecuda_proc.c)
//	FAKECUDA_FREE_SYNC=none    cuMemFree of a cuMemAlloc pointer returns at
//	                           once; by default it first waits until every
//	                           stream of the device has executed what was
//	                           enqueued on it, as an H200's waited (RULES.md)
//	FAKECUDA_MACHINE=path      the machine's state (machine.h) is the file
//	                           path, mapped shared: every process started
//	                           with the same path, devices and capacities
//	                           shares one set of GPUs, sees the others'
//	                           memory in cuMemGetInfo and is listed with its
//	                           own by the fake NVML (testdata/fakenvml); by
//	                           default the process is alone on its machine
//
// A sticky error (one that cuda.h says leaves the process unusable, such as
// CUDA_ERROR_ILLEGAL_ADDRESS), once injected, is what every later call
// returns, except cuGetErrorName and cuGetErrorString, as with the driver.
#include <cuda.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "machine.h"

#define MAX_DEVICES MACHINE_DEVICES
#define MAX_CREATED 64
#define STACK_DEPTH 32

struct CUctx_st {
	int device;
	int primary; // a device's primary context: alive while retained
	int alive;   // a created context: alive until destroyed
};

struct alloc {
	struct alloc *next;
	void *mem;
	size_t size;
	size_t extent;  // the range's addresses: at least the size rounded up to the granularity
	size_t charged; // the device memory it takes: its size rounded up to the granularity
	int device;
};


static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static int ndevices = 1;
static size_t capacity[MAX_DEVICES];
static size_t context_bytes;
static const char *device_name;
static struct alloc *unmapped; // freed ranges, the last freed first
static long fail_alloc, fail_free;
static int free_sync = 1; // FAKECUDA_FREE_SYNC
static CUresult every_call = CUDA_SUCCESS;
static struct fault faults[MAX_FAULTS];
static int nfaults;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static CUresult poisoned = CUDA_SUCCESS; // the sticky error, once one happened
static long nallocs, nfrees;
static int retained[MAX_DEVICES];
static struct CUctx_st contexts[MAX_DEVICES];
static struct CUctx_st created[MAX_CREATED];
static struct alloc *live;

// Each thread's context stack; the current context is its top.
static __thread CUcontext stack[STACK_DEPTH];
static __thread int depth;

static CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

// From fakecuda_proc.c.
extern int fakecuda_gated;
void fakecuda_absent(const char *fn, void *variant);
void fakecuda_proc_configure(void);
int fakecuda_version(void);

static long env_long(const char *name, long def) {
	const char *s = getenv(name);
	return s && *s ? strtol(s, NULL, 0) : def;
}

// ---- the machine: every process's device memory, as the driver keeps it

static struct machine *mach;
static struct machine_proc *self; // this process's slot in mach
static int mach_fd = -1;          // FAKECUDA_MACHINE's file, kept open: its record locks say who lives

// slot_lock_offset is the byte of the machine's file whose record lock the
// process of slot i holds while it lives: the kernel releases it when the
// process exits, however it exits, as the driver frees an exited process's
// memory.
static off_t slot_lock_offset(int i) { return (off_t)sizeof(struct machine) + i; }

// reap frees the slots of processes that exited; mach->mu is held.
static void reap(void) {
	if (mach_fd < 0) return;
	for (int i = 0; i < MACHINE_PROCS; i++) {
		struct machine_proc *p = &mach->procs[i];
		if (p->pid == 0 || p == self) continue;
		struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_lock_offset(i), .l_len = 1};
		if (fcntl(mach_fd, F_GETLK, &fl) == 0 && fl.l_type == F_UNLCK) memset(p, 0, sizeof *p);
	}
}

static void machine_lock(void) {
	if (pthread_mutex_lock(&mach->mu) == EOWNERDEAD) pthread_mutex_consistent(&mach->mu);
	reap();
}

static void machine_unlock(void) { pthread_mutex_unlock(&mach->mu); }

static void die(const char *what, const char *path) {
	fprintf(stderr, "fakecuda: FAKECUDA_MACHINE=%s: %s: %s\n", path, what, strerror(errno));
	abort();
}

// machine_setup maps the machine (FAKECUDA_MACHINE's file, or memory of
// the process's own) and takes a slot in it for this process.
static void machine_setup(void) {
	const char *path = getenv("FAKECUDA_MACHINE");
	void *p;
	if (path && *path) {
		mach_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (mach_fd < 0) die("open", path);
		if (flock(mach_fd, LOCK_EX) != 0) die("flock", path);
		struct stat st;
		if (fstat(mach_fd, &st) != 0) die("fstat", path);
		if ((size_t)st.st_size < sizeof *mach && ftruncate(mach_fd, sizeof *mach) != 0) die("ftruncate", path);
		p = mmap(NULL, sizeof *mach, PROT_READ | PROT_WRITE, MAP_SHARED, mach_fd, 0);
		if (p == MAP_FAILED) die("mmap", path);
	} else {
		p = mmap(NULL, sizeof *mach, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) die("mmap", "(none)");
	}
	mach = p;
	if (mach->magic != MACHINE_MAGIC) {
		pthread_mutexattr_t a;
		pthread_mutexattr_init(&a);
		pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
		pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
		pthread_mutex_init(&mach->mu, &a);
		pthread_mutexattr_destroy(&a);
		mach->version = MACHINE_VERSION;
		__atomic_store_n(&mach->magic, MACHINE_MAGIC, __ATOMIC_RELEASE);
	} else if (mach->version != MACHINE_VERSION) {
		errno = EINVAL;
		die("written by another version of the fake driver", path);
	}
	if (mach_fd >= 0) flock(mach_fd, LOCK_UN);
	machine_lock();
	for (int i = 0; i < MACHINE_PROCS && !self; i++) {
		if (mach->procs[i].pid != 0) continue;
		if (mach_fd >= 0) {
			struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_lock_offset(i), .l_len = 1};
			if (fcntl(mach_fd, F_SETLK, &fl) != 0) continue; // a process still exiting holds it
		}
		self = &mach->procs[i];
		memset(self, 0, sizeof *self);
		self->pid = (int)getpid();
	}
	machine_unlock();
	if (!self) {
		errno = ENOSPC;
		die("more processes than the machine has slots for", path ? path : "(none)");
	}
}

// in_use returns the memory in use on device dev, by every process;
// mach->mu is held.
static size_t in_use(int dev) {
	size_t n = 0;
	for (int i = 0; i < MACHINE_PROCS; i++) n += mach->procs[i].used[dev];
	return n;
}

// charge charges n bytes of device dev to this process, or fails with
// CUDA_ERROR_OUT_OF_MEMORY where the device, with every process's memory,
// has not that much free; uncharge gives them back.
static CUresult charge(int dev, size_t n) {
	machine_lock();
	size_t u = in_use(dev);
	CUresult r = u > capacity[dev] || n > capacity[dev] - u ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS) self->used[dev] += n;
	machine_unlock();
	return r;
}

static void uncharge(int dev, size_t n) {
	machine_lock();
	self->used[dev] -= n;
	machine_unlock();
}

// count_context counts a context of this process on dev coming (+1) or
// going (-1): NVML lists a process on a device while it has one there.
static void count_context(int dev, int delta) {
	machine_lock();
	self->contexts[dev] += delta;
	machine_unlock();
}

static void configure(void) {
	ndevices = (int)env_long("FAKECUDA_DEVICES", 1);
	if (ndevices < 0) ndevices = 0;
	if (ndevices > MAX_DEVICES) ndevices = MAX_DEVICES;
	size_t c = (size_t)4 << 30;
	const char *s = getenv("FAKECUDA_CAPACITY");
	for (int i = 0; i < MAX_DEVICES; i++) {
		if (s && *s) {
			char *end;
			c = strtoull(s, &end, 0);
			s = *end == ',' ? end + 1 : NULL;
		}
		capacity[i] = c;
		contexts[i].device = i;
		contexts[i].primary = 1;
	}
	context_bytes = (size_t)env_long("FAKECUDA_CONTEXT_BYTES", 0);
	device_name = getenv("FAKECUDA_NAME");
	if (device_name && !*device_name) device_name = NULL;
	fail_alloc = env_long("FAKECUDA_FAIL_ALLOC", 0);
	fail_free = env_long("FAKECUDA_FAIL_FREE", 0);
	const char *fs = getenv("FAKECUDA_FREE_SYNC");
	free_sync = !(fs && strcmp(fs, "none") == 0);
	every_call = (CUresult)env_long("FAKECUDA_ERROR", CUDA_SUCCESS);
	nfaults = parse_faults(getenv("FAKECUDA_FAIL"), faults);
	fakecuda_proc_configure();
	machine_setup();
}

// sticky reports whether cuda.h says that r leaves the process in an
// inconsistent state where every later call fails with it: the codes of the
// 11.8 header by name, and those later headers add by number (226
// CUDA_ERROR_CONTAINED, 721 CUDA_ERROR_TENSOR_MEMORY_LEAK).
static int sticky(CUresult r) {
	switch ((int)r) {
	case 226:
	case 721:
	case CUDA_ERROR_EXTERNAL_DEVICE:
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_MPS_CLIENT_TERMINATED:
		return 1;
	default:
		return 0;
	}
}

// ---- the calls of each entry point

// The counts of calls, by the address of the name each entry point passes
// to its prologue: one slot per address, taken on the first call, counted
// without a lock. Names are string literals, so an entry point always
// passes the same address; fakecuda_calls sums the slots of one name.
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

// fakecuda_calls returns how many calls the process made to the entry
// points of base name name (cuMemAlloc for cuMemAlloc_v2) so far.
unsigned long fakecuda_calls(const char *name) {
	unsigned long n = 0;
	for (size_t k = 0; k < CALL_SLOTS; k++) {
		const char *cur = __atomic_load_n(&call_counts[k].name, __ATOMIC_ACQUIRE);
		if (cur && strcmp(cur, name) == 0) n += __atomic_load_n(&call_counts[k].calls, __ATOMIC_RELAXED);
	}
	return n;
}

// enter is the prologue of every call named fn: it counts the call, stops
// the process if the driver configured has no fn (fakecuda_proc.c), and
// returns the configured error, the sticky error, or the fault injected
// into this call, if any.
static CUresult enter(const char *fn) {
	pthread_once(&config_once, configure);
	count_call(fn);
	if (fakecuda_gated) fakecuda_absent(fn, NULL);
	if (every_call != CUDA_SUCCESS) return every_call;
	// Without faults nothing below can happen: no lock on the fast path.
	if (nfaults == 0) return CUDA_SUCCESS;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&mu);
	if (poisoned != CUDA_SUCCESS) {
		r = poisoned;
	} else {
		for (int i = 0; i < nfaults; i++) {
			struct fault *f = &faults[i];
			if (strcmp(f->name, fn) == 0 && ++f->calls == f->n) {
				r = (CUresult)f->code;
				if (sticky(r)) poisoned = r;
			}
		}
	}
	pthread_mutex_unlock(&mu);
	return r;
}

// ready also requires cuInit.
static CUresult ready(const char *fn) {
	CUresult r = enter(fn);
	if (r != CUDA_SUCCESS) return r;
	return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// on_device also requires an output pointer and a device that exists.
static CUresult on_device(const char *fn, CUdevice dev, const void *out) {
	CUresult r = ready(fn);
	if (r != CUDA_SUCCESS) return r;
	if (!out) return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= ndevices) return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

// known reports whether ctx is a context the fake gave out; alive whether it
// may be used now. They take no lock: the checks of every call stay cheap,
// as the driver's are, and a context dies only through calls that the
// tests order themselves.
static int known(CUcontext ctx) {
	return (ctx >= &contexts[0] && ctx < &contexts[ndevices]) ||
	       (ctx >= &created[0] && ctx < &created[MAX_CREATED]);
}

static int alive(CUcontext ctx) {
	return known(ctx) && (ctx->primary ? __atomic_load_n(&retained[ctx->device], __ATOMIC_ACQUIRE) > 0
					   : __atomic_load_n(&ctx->alive, __ATOMIC_ACQUIRE));
}

// in_context also requires a current context that is alive; it returns its
// device.
static CUresult in_context(const char *fn, int *device) {
	CUresult r = ready(fn);
	if (r != CUDA_SUCCESS) return r;
	CUcontext ctx = current();
	if (ctx == NULL) return CUDA_ERROR_INVALID_CONTEXT;
	if (!alive(ctx)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	*device = ctx->device;
	return CUDA_SUCCESS;
}

// usable checks a context given to a call: one the fake gave out and alive.
static CUresult usable(CUcontext ctx) {
	if (!known(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
	return alive(ctx) ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

// ---- shared with fakecuda_stream.c (streams, events, memory pools) and
// fakecuda_proc.c (the version, cuGetProcAddress)

CUresult fakecuda_pool_free_now(CUdeviceptr dptr);
void fakecuda_device_drain(int dev);
CUresult fakecuda_unsafe_call(void);
void fakecuda_stream_check(const char *fn, CUstream h);
size_t fakecuda_granularity(void); // fakecuda_vmm.c

CUresult fakecuda_enter(const char *fn) { return enter(fn); }
CUresult fakecuda_ready(const char *fn) { return ready(fn); }
CUcontext fakecuda_current(void) { return current(); }

// fakecuda_poisoned returns the sticky error the process met, or 0.
CUresult fakecuda_poisoned(void) {
	pthread_mutex_lock(&mu);
	CUresult r = poisoned;
	pthread_mutex_unlock(&mu);
	return r;
}
int fakecuda_context_device(CUcontext ctx) { return ctx->device; }
CUresult fakecuda_in_context(const char *fn, int *device) { return in_context(fn, device); }
CUresult fakecuda_on_device(const char *fn, CUdevice dev, const void *out) { return on_device(fn, dev, out); }

// fakecuda_take takes n bytes of device dev's memory for a pool, or fails
// with CUDA_ERROR_OUT_OF_MEMORY; fakecuda_give gives them back.
CUresult fakecuda_take(int dev, size_t n) { return charge(dev, n); }

void fakecuda_give(int dev, size_t n) { uncharge(dev, n); }

// ---- shared with the fake NVML (machine.h)

struct machine *fakecuda_machine(void) {
	pthread_once(&config_once, configure);
	return mach;
}
void fakecuda_machine_lock(void) { machine_lock(); }
void fakecuda_machine_unlock(void) { machine_unlock(); }
int fakecuda_devices(void) {
	pthread_once(&config_once, configure);
	return ndevices;
}
unsigned long long fakecuda_capacity(int dev) { return capacity[dev]; }

#define UNSUPPORTED(fn)                          \
	do {                                     \
		CUresult r_ = enter(fn);         \
		if (r_ != CUDA_SUCCESS)          \
			return r_;               \
		return CUDA_ERROR_NOT_SUPPORTED; \
	} while (0)

// UNSUPPORTED_ON is UNSUPPORTED for a call on a stream, whose handle is
// checked first, as every call on a stream checks it
// (fakecuda_stream_check: a destroyed stream's stops the process).
#define UNSUPPORTED_ON(fn, stream)                   \
	do {                                         \
		fakecuda_stream_check(fn, stream);   \
		UNSUPPORTED(fn);                     \
	} while (0)

// ---- error names

// The names and descriptions of the codes memtrack's tests meet; the driver
// knows them all. Unknown codes get CUDA_ERROR_INVALID_VALUE, as from it.
static const struct {
	CUresult code;
	const char *name, *text;
} names[] = {
	{CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	{CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{CUDA_ERROR_EXTERNAL_DEVICE, "CUDA_ERROR_EXTERNAL_DEVICE", "unspecified error in an external device"},
	{CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	{CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	{CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
	{CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult lookup(CUresult code, const char **name, const char **text) {
	pthread_once(&config_once, configure);
	if (every_call != CUDA_SUCCESS) return every_call;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (names[i].code == code) {
			if (name) *name = names[i].name;
			if (text) *text = names[i].text;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
	pthread_once(&config_once, configure);
	count_call("cuGetErrorName");
	if (fakecuda_gated) fakecuda_absent("cuGetErrorName", NULL);
	if (!pStr) return CUDA_ERROR_INVALID_VALUE;
	return lookup(error, pStr, NULL);
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
	pthread_once(&config_once, configure);
	count_call("cuGetErrorString");
	if (fakecuda_gated) fakecuda_absent("cuGetErrorString", NULL);
	if (!pStr) return CUDA_ERROR_INVALID_VALUE;
	return lookup(error, NULL, pStr);
}

// ---- init, devices

CUresult CUDAAPI cuInit(unsigned int flags) {
	CUresult r = enter("cuInit");
	if (r != CUDA_SUCCESS) return r;
	if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
	if (ndevices == 0) return CUDA_ERROR_NO_DEVICE;
	__atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *version) {
	CUresult r = enter("cuDriverGetVersion");
	if (r != CUDA_SUCCESS) return r;
	if (!version) return CUDA_ERROR_INVALID_VALUE;
	*version = fakecuda_version(); // FAKECUDA_VERSION (fakecuda_proc.c)
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
	CUresult r = ready("cuDeviceGetCount");
	if (r != CUDA_SUCCESS) return r;
	if (!count) return CUDA_ERROR_INVALID_VALUE;
	*count = ndevices;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
	CUresult r = on_device("cuDeviceGet", ordinal, device);
	if (r != CUDA_SUCCESS) return r;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
	CUresult r = on_device("cuDeviceGetName", dev, name);
	if (r != CUDA_SUCCESS) return r;
	if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
	if (device_name)
		snprintf(name, (size_t)len, "%s", device_name);
	else
		snprintf(name, (size_t)len, "memtrack fakecuda %d", dev);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
	CUresult r = on_device("cuDeviceTotalMem", dev, bytes);
	if (r != CUDA_SUCCESS) return r;
	*bytes = capacity[dev];
	return CUDA_SUCCESS;
}

// ---- contexts

// take_context_memory charges a new context's memory to dev; mu is held.
static CUresult take_context_memory(int dev) {
	CUresult r = charge(dev, context_bytes);
	if (r == CUDA_SUCCESS) count_context(dev, 1);
	return r;
}

// give_context_memory gives a context's memory back as it is destroyed.
static void give_context_memory(int dev) {
	uncharge(dev, context_bytes);
	count_context(dev, -1);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
	CUresult r = on_device("cuDevicePrimaryCtxRetain", dev, pctx);
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	if (retained[dev] == 0 && (r = take_context_memory(dev)) != CUDA_SUCCESS) {
		pthread_mutex_unlock(&mu);
		return r;
	}
	__atomic_add_fetch(&retained[dev], 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mu);
	*pctx = &contexts[dev];
	return CUDA_SUCCESS;
}

// cuDevicePrimaryCtxRelease: the last release destroys the primary context
// (and frees its memory); the fake keeps the allocations made in it.
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
	int unused;
	CUresult r = on_device("cuDevicePrimaryCtxRelease", dev, &unused);
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	if (retained[dev] == 0) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (__atomic_sub_fetch(&retained[dev], 1, __ATOMIC_RELEASE) == 0) give_context_memory(dev);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
	CUresult r = on_device("cuCtxCreate", dev, pctx);
	if (r != CUDA_SUCCESS) return r;
	if (depth == STACK_DEPTH) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	struct CUctx_st *c = NULL;
	for (int i = 0; i < MAX_CREATED && !c; i++) {
		if (!created[i].alive) c = &created[i];
	}
	if (!c) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if ((r = take_context_memory(dev)) != CUDA_SUCCESS) {
		pthread_mutex_unlock(&mu);
		return r;
	}
	c->device = dev;
	c->primary = 0;
	__atomic_store_n(&c->alive, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mu);
	stack[depth++] = c; // a new context is pushed onto the caller's stack
	*pctx = c;
	return CUDA_SUCCESS;
}

// cuCtxDestroy destroys a context of one's own and pops it off the calling
// thread's stack where it is current. Unlike the driver, it does not check
// other threads' stacks.
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
	CUresult r = ready("cuCtxDestroy");
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	if (!known(ctx) || ctx->primary || !ctx->alive) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	__atomic_store_n(&ctx->alive, 0, __ATOMIC_RELEASE);
	give_context_memory(ctx->device);
	pthread_mutex_unlock(&mu);
	if (current() == ctx) depth--;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
	CUresult r = ready("cuCtxPushCurrent");
	if (r != CUDA_SUCCESS) return r;
	if ((r = usable(ctx)) != CUDA_SUCCESS) return r;
	if (depth == STACK_DEPTH) return CUDA_ERROR_OUT_OF_MEMORY;
	stack[depth++] = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) {
	CUresult r = ready("cuCtxPopCurrent");
	if (r != CUDA_SUCCESS) return r;
	if (depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext ctx = stack[--depth];
	if (pctx) *pctx = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
	CUresult r = ready("cuCtxGetCurrent");
	if (r != CUDA_SUCCESS) return r;
	if (!pctx) return CUDA_ERROR_INVALID_VALUE;
	*pctx = current();
	return CUDA_SUCCESS;
}

// cuCtxSetCurrent replaces the top of the calling thread's stack (NULL pops
// it), and refuses a context the fake never gave out or that is not alive:
// a primary context must be retained first.
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
	CUresult r = ready("cuCtxSetCurrent");
	if (r != CUDA_SUCCESS) return r;
	if (ctx == NULL) {
		if (depth > 0) depth--;
		return CUDA_SUCCESS;
	}
	if ((r = usable(ctx)) != CUDA_SUCCESS) return r;
	if (depth == 0) depth = 1;
	stack[depth - 1] = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
	int dev;
	CUresult r = in_context("cuCtxGetDevice", &dev);
	if (r != CUDA_SUCCESS) return r;
	if (!device) return CUDA_ERROR_INVALID_VALUE;
	*device = dev;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
	int dev;
	return in_context("cuCtxSynchronize", &dev);
}

// ---- memory

// cuMemAlloc and cuMemFree are potentially unsafe during stream capture
// (cuThreadExchangeStreamCaptureMode): where the thread's capture mode
// prohibits them, they fail and invalidate the captures concerned.
//
// cuMemAlloc maps whole pages of the allocation granularity: the device's
// used memory grows by the size rounded up to it (an H200's cuMemGetInfo:
// 1 B, 4 KiB and 1 MiB took 2 MiB, 2 MiB + 1 B and 3 MiB 4 MiB), and it
// hands a freed range's addresses out again to the next allocation that
// fits in them, whatever its size, the last freed first (an H200 gave the
// next allocation the address just freed); the memory taken is the
// allocation's own size rounded up, whatever the range. Host memory stands
// for device memory; malloc maps large blocks lazily, so untouched
// gigabytes cost no RAM.
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
	int dev;
	CUresult r = in_context("cuMemAlloc", &dev);
	if (r != CUDA_SUCCESS) return r;
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
	size_t page = fakecuda_granularity();
	if (bytesize > SIZE_MAX - page) return CUDA_ERROR_OUT_OF_MEMORY;
	size_t extent = (bytesize + page - 1) / page * page;
	struct alloc *a = malloc(sizeof *a);
	if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	long n = ++nallocs;
	if (n == fail_alloc || charge(dev, extent) != CUDA_SUCCESS) {
		pthread_mutex_unlock(&mu);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->mem = NULL;
	a->extent = extent;
	for (struct alloc **q = &unmapped; *q; q = &(*q)->next) {
		if ((*q)->extent >= bytesize) {
			struct alloc *u = *q;
			*q = u->next;
			a->mem = u->mem;
			a->extent = u->extent; // the range's pages, at least the size's
			free(u);
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	if (!a->mem && !(a->mem = malloc(extent))) {
		uncharge(dev, extent);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->charged = extent;
	a->size = bytesize;
	a->device = dev;
	pthread_mutex_lock(&mu);
	a->next = live;
	live = a;
	pthread_mutex_unlock(&mu);
	*dptr = (CUdeviceptr)(uintptr_t)a->mem;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
	int dev;
	CUresult r = in_context("cuMemFree", &dev);
	if (r != CUDA_SUCCESS) return r;
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	// A pointer of cuMemAlloc's: the free waits for the device's streams
	// ("For all other pointers, this API may perform implicit
	// synchronization"; an H200's cuMemFree waited for a stream that a
	// host function held back, RULES.md). A pointer of the stream-ordered
	// allocator's does not ("will not perform any implicit
	// synchronization").
	pthread_mutex_lock(&mu);
	struct alloc *q = live;
	while (q && (CUdeviceptr)(uintptr_t)q->mem != dptr) q = q->next;
	int of = q ? q->device : -1;
	pthread_mutex_unlock(&mu);
	if (of >= 0 && free_sync) fakecuda_device_drain(of);
	pthread_mutex_lock(&mu);
	long n = ++nfrees;
	struct alloc **p = &live;
	while (*p && (CUdeviceptr)(uintptr_t)(*p)->mem != dptr) p = &(*p)->next;
	if (n != fail_free && *p == NULL) {
		pthread_mutex_unlock(&mu);
		return fakecuda_pool_free_now(dptr); // fakecuda_stream.c
	}
	if (n == fail_free || *p == NULL) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct alloc *a = *p;
	*p = a->next;
	uncharge(a->device, a->charged);
	// The range's pages go back to the device; its addresses to the next
	// allocation that fits.
	a->next = unmapped;
	unmapped = a;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t *freep, size_t *totalp) {
	int dev;
	CUresult r = in_context("cuMemGetInfo", &dev);
	if (r != CUDA_SUCCESS) return r;
	if (!freep || !totalp) return CUDA_ERROR_INVALID_VALUE;
	machine_lock();
	size_t u = in_use(dev);
	machine_unlock();
	*freep = u < capacity[dev] ? capacity[dev] - u : 0;
	*totalp = capacity[dev];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
	int dev;
	CUresult r = in_context("cuMemGetAddressRange", &dev);
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	for (struct alloc *a = live; a; a = a->next) {
		CUdeviceptr base = (CUdeviceptr)(uintptr_t)a->mem;
		if (dptr >= base && dptr < base + a->size) {
			if (pbase) *pbase = base;
			if (psize) *psize = a->size;
			pthread_mutex_unlock(&mu);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mu);
	return CUDA_ERROR_NOT_FOUND;
}

// ---- not supported: the rest of what mumax's cu references

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) { UNSUPPORTED("cuCtxDisablePeerAccess"); }
CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) { UNSUPPORTED("cuCtxEnablePeerAccess"); }
CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) { UNSUPPORTED("cuCtxGetApiVersion"); }
CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) { UNSUPPORTED("cuDeviceCanAccessPeer"); }
CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction f) { UNSUPPORTED("cuFuncGetAttribute"); }
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
				CUstream stream, void **params, void **extra) { UNSUPPORTED_ON("cuLaunchKernel", stream); }
CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize) { UNSUPPORTED("cuMemAllocHost"); }
CUresult CUDAAPI cuMemFreeHost(void *p) { UNSUPPORTED("cuMemFreeHost"); }
CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { UNSUPPORTED("cuMemcpy"); }
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { UNSUPPORTED_ON("cuMemcpyAsync", s); }
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) { UNSUPPORTED("cuMemcpyDtoD"); }
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { UNSUPPORTED_ON("cuMemcpyDtoDAsync", s); }
CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) { UNSUPPORTED("cuMemcpyDtoH"); }
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) { UNSUPPORTED_ON("cuMemcpyDtoHAsync", s); }
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) { UNSUPPORTED("cuMemcpyHtoD"); }
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) { UNSUPPORTED_ON("cuMemcpyHtoDAsync", s); }
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) { UNSUPPORTED("cuMemcpyPeer"); }
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
				   CUstream s) { UNSUPPORTED_ON("cuMemcpyPeerAsync", s); }
CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char uc, size_t n) { UNSUPPORTED("cuMemsetD8"); }
CUresult CUDAAPI cuMemsetD32(CUdeviceptr dst, unsigned int ui, size_t n) { UNSUPPORTED("cuMemsetD32"); }
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s) { UNSUPPORTED_ON("cuMemsetD32Async", s); }
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name) { UNSUPPORTED("cuModuleGetFunction"); }
CUresult CUDAAPI cuModuleLoad(CUmodule *mod, const char *fname) { UNSUPPORTED("cuModuleLoad"); }
CUresult CUDAAPI cuModuleLoadData(CUmodule *mod, const void *image) { UNSUPPORTED("cuModuleLoadData"); }
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) { UNSUPPORTED("cuPointerGetAttribute"); }

// ---- device identity, for memtrack's Device.Info

// cuDeviceGetUuid_v2 gives device n the UUID whose bytes spell "memtrack",
// then 0x80 0x00, then n in the last byte: nvidia-smi would print device 1
// as GPU-6d656d74-7261-636b-8000-000000000001. (cuDeviceGetName is above.)
static void uuid_of(int dev, unsigned char b[16]) {
	static const char prefix[10] = {'m', 'e', 'm', 't', 'r', 'a', 'c', 'k', (char)0x80, 0};
	memset(b, 0, 16);
	memcpy(b, prefix, sizeof prefix);
	b[15] = (unsigned char)dev;
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
	CUresult r = on_device("cuDeviceGetUuid", dev, uuid);
	if (r != CUDA_SUCCESS) return r;
	uuid_of(dev, (unsigned char *)uuid->bytes);
	return CUDA_SUCCESS;
}

// fakecuda_identity gives the fake NVML (machine.h) the name and UUID that
// cuDeviceGetName and cuDeviceGetUuid_v2 give device dev, bypassing the
// configured faults: NVML reads the GPU, not the CUDA driver's calls.
void fakecuda_identity(int dev, char *name, int len, unsigned char uuid[16]) {
	pthread_once(&config_once, configure);
	if (device_name)
		snprintf(name, (size_t)len, "%s", device_name);
	else
		snprintf(name, (size_t)len, "memtrack fakecuda %d", dev);
	uuid_of(dev, uuid);
}
