// fakecuda is a stand-in for the NVIDIA driver (libcuda.so.1) for memtrack's
// tests on machines without a GPU. It is test equipment, never part of the
// library: scripts/test-cuda.sh builds it with
//
//	gcc -shared -fPIC -I<dir of cuda.h> -o libcuda.so.1 fakecuda.c fakecuda_stream.c -lpthread
//
// It exports every cu* symbol that github.com/mumax/3/cuda/cu references, plus
// cuDevicePrimaryCtxRetain. Including cuda.h gives each function the
// signature and the versioned name (cuMemAlloc_v2, ...) the real driver has.
// Init, devices, primary contexts, the current context of each thread and
// the memory calls work; device memory is host memory. Streams, events,
// host functions and memory pools are in fakecuda_stream.c, built with it.
// Everything else returns CUDA_ERROR_NOT_SUPPORTED.
//
// It is configured by environment variables, read once, on the first call:
//
//	FAKECUDA_DEVICES=n         the number of devices (default 1); 0: cuInit
//	                           fails with CUDA_ERROR_NO_DEVICE, as the driver does
//	FAKECUDA_CAPACITY=b[,b..]  each device's memory in bytes (default 4 GiB);
//	                           the last value repeats for later devices
//	FAKECUDA_CONTEXT_BYTES=b   memory a primary context takes on its device
//	                           once retained (default 0), as a real one does
//	FAKECUDA_FAIL_ALLOC=n      the n-th cuMemAlloc of the process fails with
//	                           CUDA_ERROR_OUT_OF_MEMORY
//	FAKECUDA_FAIL_FREE=n       the n-th cuMemFree of the process fails with
//	                           CUDA_ERROR_INVALID_VALUE and frees nothing
//	FAKECUDA_ERROR=code        every call returns this CUresult
#include <cuda.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16

struct CUctx_st {
	int device;
};

struct alloc {
	struct alloc *next;
	void *mem;
	size_t size;
	int device;
};

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static int ndevices = 1;
static size_t capacity[MAX_DEVICES];
static size_t context_bytes;
static long fail_alloc, fail_free;
static CUresult every_call = CUDA_SUCCESS;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static long nallocs, nfrees;
static size_t used[MAX_DEVICES];
static int retained[MAX_DEVICES];
static struct CUctx_st contexts[MAX_DEVICES];
static struct alloc *live;

static __thread CUcontext current;

static long env_long(const char *name, long def) {
	const char *s = getenv(name);
	return s && *s ? strtol(s, NULL, 0) : def;
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
	}
	context_bytes = (size_t)env_long("FAKECUDA_CONTEXT_BYTES", 0);
	fail_alloc = env_long("FAKECUDA_FAIL_ALLOC", 0);
	fail_free = env_long("FAKECUDA_FAIL_FREE", 0);
	every_call = (CUresult)env_long("FAKECUDA_ERROR", CUDA_SUCCESS);
}

// enter is the prologue of every call: the configured error, if any.
static CUresult enter(void) {
	pthread_once(&config_once, configure);
	return every_call;
}

// ready also requires cuInit.
static CUresult ready(void) {
	CUresult r = enter();
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	int ok = initialized;
	pthread_mutex_unlock(&mu);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// on_device also requires an output pointer and a device that exists.
static CUresult on_device(CUdevice dev, const void *out) {
	CUresult r = ready();
	if (r != CUDA_SUCCESS) return r;
	if (!out) return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= ndevices) return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

// in_context also requires a current context; it returns its device.
static CUresult in_context(int *device) {
	CUresult r = ready();
	if (r != CUDA_SUCCESS) return r;
	if (current == NULL) return CUDA_ERROR_INVALID_CONTEXT;
	*device = current->device;
	return CUDA_SUCCESS;
}

// ---- shared with fakecuda_stream.c (streams, events, memory pools)

CUresult fakecuda_pool_free_now(CUdeviceptr dptr);

CUresult fakecuda_ready(void) { return ready(); }
CUresult fakecuda_in_context(int *device) { return in_context(device); }
CUresult fakecuda_on_device(CUdevice dev, const void *out) { return on_device(dev, out); }

// fakecuda_take takes n bytes of device dev's memory for a pool, or fails
// with CUDA_ERROR_OUT_OF_MEMORY; fakecuda_give gives them back.
CUresult fakecuda_take(int dev, size_t n) {
	pthread_mutex_lock(&mu);
	CUresult r = n > capacity[dev] - used[dev] ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS) used[dev] += n;
	pthread_mutex_unlock(&mu);
	return r;
}

void fakecuda_give(int dev, size_t n) {
	pthread_mutex_lock(&mu);
	used[dev] -= n;
	pthread_mutex_unlock(&mu);
}

#define UNSUPPORTED                           \
	do {                                  \
		CUresult r_ = enter();        \
		if (r_ != CUDA_SUCCESS)       \
			return r_;            \
		return CUDA_ERROR_NOT_SUPPORTED; \
	} while (0)

// ---- init, devices, contexts

CUresult CUDAAPI cuInit(unsigned int flags) {
	CUresult r = enter();
	if (r != CUDA_SUCCESS) return r;
	if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
	if (ndevices == 0) return CUDA_ERROR_NO_DEVICE;
	pthread_mutex_lock(&mu);
	initialized = 1;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *version) {
	CUresult r = enter();
	if (r != CUDA_SUCCESS) return r;
	if (!version) return CUDA_ERROR_INVALID_VALUE;
	*version = CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
	CUresult r = ready();
	if (r != CUDA_SUCCESS) return r;
	if (!count) return CUDA_ERROR_INVALID_VALUE;
	*count = ndevices;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
	CUresult r = on_device(ordinal, device);
	if (r != CUDA_SUCCESS) return r;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
	CUresult r = on_device(dev, name);
	if (r != CUDA_SUCCESS) return r;
	if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "memtrack fakecuda %d", dev);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
	CUresult r = on_device(dev, bytes);
	if (r != CUDA_SUCCESS) return r;
	*bytes = capacity[dev];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
	CUresult r = on_device(dev, pctx);
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&mu);
	if (retained[dev] == 0) {
		if (used[dev] + context_bytes > capacity[dev]) {
			pthread_mutex_unlock(&mu);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		used[dev] += context_bytes;
	}
	retained[dev]++;
	pthread_mutex_unlock(&mu);
	*pctx = &contexts[dev];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
	CUresult r = ready();
	if (r != CUDA_SUCCESS) return r;
	if (!pctx) return CUDA_ERROR_INVALID_VALUE;
	*pctx = current;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
	CUresult r = ready();
	if (r != CUDA_SUCCESS) return r;
	if (ctx != NULL && (ctx < &contexts[0] || ctx >= &contexts[ndevices])) return CUDA_ERROR_INVALID_CONTEXT;
	current = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
	int dev;
	CUresult r = in_context(&dev);
	if (r != CUDA_SUCCESS) return r;
	if (!device) return CUDA_ERROR_INVALID_VALUE;
	*device = dev;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
	int dev;
	return in_context(&dev);
}

// ---- memory

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
	int dev;
	CUresult r = in_context(&dev);
	if (r != CUDA_SUCCESS) return r;
	if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
	struct alloc *a = malloc(sizeof *a);
	if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	long n = ++nallocs;
	if (n == fail_alloc || bytesize > capacity[dev] - used[dev]) {
		pthread_mutex_unlock(&mu);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	used[dev] += bytesize;
	pthread_mutex_unlock(&mu);
	// Host memory stands for device memory; malloc maps large blocks lazily,
	// so untouched gigabytes cost no RAM.
	a->mem = malloc(bytesize);
	if (!a->mem) {
		pthread_mutex_lock(&mu);
		used[dev] -= bytesize;
		pthread_mutex_unlock(&mu);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
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
	CUresult r = in_context(&dev);
	if (r != CUDA_SUCCESS) return r;
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
	used[a->device] -= a->size;
	pthread_mutex_unlock(&mu);
	free(a->mem);
	free(a);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t *freep, size_t *totalp) {
	int dev;
	CUresult r = in_context(&dev);
	if (r != CUDA_SUCCESS) return r;
	if (!freep || !totalp) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	*freep = capacity[dev] - used[dev];
	*totalp = capacity[dev];
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
	int dev;
	CUresult r = in_context(&dev);
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

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { UNSUPPORTED; }
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { UNSUPPORTED; }
CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) { UNSUPPORTED; }
CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) { UNSUPPORTED; }
CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) { UNSUPPORTED; }
CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) { UNSUPPORTED; }
CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction f) { UNSUPPORTED; }
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
				CUstream stream, void **params, void **extra) { UNSUPPORTED; }
CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize) { UNSUPPORTED; }
CUresult CUDAAPI cuMemFreeHost(void *p) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) { UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
				   CUstream s) { UNSUPPORTED; }
CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char uc, size_t n) { UNSUPPORTED; }
CUresult CUDAAPI cuMemsetD32(CUdeviceptr dst, unsigned int ui, size_t n) { UNSUPPORTED; }
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s) { UNSUPPORTED; }
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name) { UNSUPPORTED; }
CUresult CUDAAPI cuModuleLoad(CUmodule *mod, const char *fname) { UNSUPPORTED; }
CUresult CUDAAPI cuModuleLoadData(CUmodule *mod, const void *image) { UNSUPPORTED; }
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) { UNSUPPORTED; }
