// fakecuda_proc.c is the fake driver's version and its entry points by name
// (cuGetProcAddress), built with fakecuda.c. RULES.md lists the rules with
// their sources. Its environment variables, read once (by fakecuda.c's
// configuration):
//
//	FAKECUDA_VERSION=v    the CUDA version the driver reports
//	                      (cuDriverGetVersion, 1000*major + 10*minor;
//	                      default 12080). A call introduced after v is
//	                      absent, as from a driver of that version:
//	                      cuGetProcAddress does not return it, and calling
//	                      its exported symbol anyway aborts the process,
//	                      naming it (a program that looked it up with dlsym
//	                      would have found nothing). cuGetProcAddress
//	                      itself is absent before 11030, cuGetProcAddress_v2
//	                      before 12000.
//	FAKECUDA_HIDE=f[,f..] the calls of base names f are absent likewise,
//	                      whatever the version: a driver built without
//	                      them. Only cuGetProcAddress hides them; dlsym
//	                      finds every symbol the library exports.
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CUDA_VERSION >= 12000
// cuda.h 12.x maps cuGetProcAddress to cuGetProcAddress_v2 and declares
// the 11.3 form for the driver's own build only.
#undef cuGetProcAddress
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#else
// CUDA 12.0's form, as cuda.h 12.x declares it.
typedef enum CUdriverProcAddressQueryResult_enum {
	CU_GET_PROC_ADDRESS_SUCCESS = 0,
	CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
	CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus);
#endif

// From fakecuda.c.
CUresult fakecuda_enter(const char *fn);

// The fake's entry points: each base name with the CUDA version that
// introduced the variant the fake exports (cudaTypedefs.h's
// PFN_<name>_v<version>), which cuda.h's #defines name (cuMemAlloc is
// cuMemAlloc_v2). A name with two variants has a row for each.
static const struct proc {
	const char *name;
	int version;
	void *fn;
} procs[] = {
	{"cuGetErrorString", 6000, (void *)cuGetErrorString},
	{"cuGetErrorName", 6000, (void *)cuGetErrorName},
	{"cuInit", 2000, (void *)cuInit},
	{"cuDriverGetVersion", 2020, (void *)cuDriverGetVersion},
	{"cuGetProcAddress", 11030, (void *)cuGetProcAddress},
	{"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2},
	{"cuDeviceGet", 2000, (void *)cuDeviceGet},
	{"cuDeviceGetCount", 2000, (void *)cuDeviceGetCount},
	{"cuDeviceGetName", 2000, (void *)cuDeviceGetName},
	{"cuDeviceGetUuid", 11040, (void *)cuDeviceGetUuid_v2},
	{"cuDeviceTotalMem", 3020, (void *)cuDeviceTotalMem},
	{"cuDeviceGetAttribute", 2000, (void *)cuDeviceGetAttribute},
	{"cuDeviceCanAccessPeer", 4000, (void *)cuDeviceCanAccessPeer},
	{"cuDevicePrimaryCtxRetain", 7000, (void *)cuDevicePrimaryCtxRetain},
	{"cuDevicePrimaryCtxRelease", 11000, (void *)cuDevicePrimaryCtxRelease},
	{"cuCtxCreate", 3020, (void *)cuCtxCreate},
	{"cuCtxDestroy", 4000, (void *)cuCtxDestroy},
	{"cuCtxPushCurrent", 4000, (void *)cuCtxPushCurrent},
	{"cuCtxPopCurrent", 4000, (void *)cuCtxPopCurrent},
	{"cuCtxSetCurrent", 4000, (void *)cuCtxSetCurrent},
	{"cuCtxGetCurrent", 4000, (void *)cuCtxGetCurrent},
	{"cuCtxGetDevice", 2000, (void *)cuCtxGetDevice},
	{"cuCtxSynchronize", 2000, (void *)cuCtxSynchronize},
	{"cuCtxGetApiVersion", 3020, (void *)cuCtxGetApiVersion},
	{"cuCtxEnablePeerAccess", 4000, (void *)cuCtxEnablePeerAccess},
	{"cuCtxDisablePeerAccess", 4000, (void *)cuCtxDisablePeerAccess},
	{"cuModuleLoad", 2000, (void *)cuModuleLoad},
	{"cuModuleLoadData", 2000, (void *)cuModuleLoadData},
	{"cuModuleGetFunction", 2000, (void *)cuModuleGetFunction},
	{"cuFuncGetAttribute", 2020, (void *)cuFuncGetAttribute},
	{"cuLaunchKernel", 4000, (void *)cuLaunchKernel},
	{"cuMemGetInfo", 3020, (void *)cuMemGetInfo},
	{"cuMemAlloc", 3020, (void *)cuMemAlloc},
	{"cuMemFree", 3020, (void *)cuMemFree},
	{"cuMemGetAddressRange", 3020, (void *)cuMemGetAddressRange},
	{"cuMemAllocHost", 3020, (void *)cuMemAllocHost},
	{"cuMemFreeHost", 2000, (void *)cuMemFreeHost},
	{"cuMemcpy", 4000, (void *)cuMemcpy},
	{"cuMemcpyAsync", 4000, (void *)cuMemcpyAsync},
	{"cuMemcpyPeer", 4000, (void *)cuMemcpyPeer},
	{"cuMemcpyPeerAsync", 4000, (void *)cuMemcpyPeerAsync},
	{"cuMemcpyHtoD", 3020, (void *)cuMemcpyHtoD},
	{"cuMemcpyDtoH", 3020, (void *)cuMemcpyDtoH},
	{"cuMemcpyDtoD", 3020, (void *)cuMemcpyDtoD},
	{"cuMemcpyHtoDAsync", 3020, (void *)cuMemcpyHtoDAsync},
	{"cuMemcpyDtoHAsync", 3020, (void *)cuMemcpyDtoHAsync},
	{"cuMemcpyDtoDAsync", 3020, (void *)cuMemcpyDtoDAsync},
	{"cuMemsetD8", 3020, (void *)cuMemsetD8},
	{"cuMemsetD32", 3020, (void *)cuMemsetD32},
	{"cuMemsetD8Async", 3020, (void *)cuMemsetD8Async},
	{"cuMemsetD32Async", 3020, (void *)cuMemsetD32Async},
	{"cuPointerGetAttribute", 4000, (void *)cuPointerGetAttribute},
	{"cuStreamCreate", 2000, (void *)cuStreamCreate},
	{"cuStreamDestroy", 4000, (void *)cuStreamDestroy},
	{"cuStreamSynchronize", 2000, (void *)cuStreamSynchronize},
	{"cuStreamQuery", 2000, (void *)cuStreamQuery},
	{"cuStreamGetCtx", 9020, (void *)cuStreamGetCtx},
	{"cuStreamWaitEvent", 3020, (void *)cuStreamWaitEvent},
	{"cuLaunchHostFunc", 10000, (void *)cuLaunchHostFunc},
	{"cuStreamBeginCapture", 10010, (void *)cuStreamBeginCapture},
	{"cuStreamEndCapture", 10000, (void *)cuStreamEndCapture},
	{"cuStreamIsCapturing", 10000, (void *)cuStreamIsCapturing},
	{"cuStreamGetCaptureInfo", 10010, (void *)cuStreamGetCaptureInfo},
	{"cuStreamGetCaptureInfo", 11030, (void *)cuStreamGetCaptureInfo_v2},
	{"cuThreadExchangeStreamCaptureMode", 10010, (void *)cuThreadExchangeStreamCaptureMode},
	{"cuGraphGetNodes", 10000, (void *)cuGraphGetNodes},
	{"cuGraphDestroy", 10000, (void *)cuGraphDestroy},
	{"cuGraphInstantiateWithFlags", 11040, (void *)cuGraphInstantiateWithFlags},
	{"cuGraphUpload", 11010, (void *)cuGraphUpload},
	{"cuGraphLaunch", 10000, (void *)cuGraphLaunch},
	{"cuGraphExecDestroy", 10000, (void *)cuGraphExecDestroy},
	{"cuMemGetAllocationGranularity", 10020, (void *)cuMemGetAllocationGranularity},
	{"cuDeviceGraphMemTrim", 11040, (void *)cuDeviceGraphMemTrim},
	{"cuDeviceGetGraphMemAttribute", 11040, (void *)cuDeviceGetGraphMemAttribute},
	{"cuDeviceSetGraphMemAttribute", 11040, (void *)cuDeviceSetGraphMemAttribute},
	{"cuEventCreate", 2000, (void *)cuEventCreate},
	{"cuEventRecord", 2000, (void *)cuEventRecord},
	{"cuEventQuery", 2000, (void *)cuEventQuery},
	{"cuEventSynchronize", 2000, (void *)cuEventSynchronize},
	{"cuEventDestroy", 4000, (void *)cuEventDestroy},
	{"cuDeviceGetDefaultMemPool", 11020, (void *)cuDeviceGetDefaultMemPool},
	{"cuDeviceGetMemPool", 11020, (void *)cuDeviceGetMemPool},
	{"cuDeviceSetMemPool", 11020, (void *)cuDeviceSetMemPool},
	{"cuMemPoolCreate", 11020, (void *)cuMemPoolCreate},
	{"cuMemPoolDestroy", 11020, (void *)cuMemPoolDestroy},
	{"cuMemPoolGetAttribute", 11020, (void *)cuMemPoolGetAttribute},
	{"cuMemPoolSetAttribute", 11020, (void *)cuMemPoolSetAttribute},
	{"cuMemPoolTrimTo", 11020, (void *)cuMemPoolTrimTo},
	{"cuMemAllocAsync", 11020, (void *)cuMemAllocAsync},
	{"cuMemAllocFromPoolAsync", 11020, (void *)cuMemAllocFromPoolAsync},
	{"cuMemFreeAsync", 11020, (void *)cuMemFreeAsync},
	{"cuMemAddressReserve", 10020, (void *)cuMemAddressReserve},
	{"cuMemAddressFree", 10020, (void *)cuMemAddressFree},
	{"cuMemCreate", 10020, (void *)cuMemCreate},
	{"cuMemRelease", 10020, (void *)cuMemRelease},
	{"cuMemMap", 10020, (void *)cuMemMap},
	{"cuMemUnmap", 10020, (void *)cuMemUnmap},
	{"cuMemSetAccess", 10020, (void *)cuMemSetAccess},
	{"cuMemGetAccess", 10020, (void *)cuMemGetAccess},
	{"cuMemGetAllocationGranularity", 10020, (void *)cuMemGetAllocationGranularity},
};

#define NPROCS (sizeof procs / sizeof procs[0])
#define MAX_HIDDEN 16

static int version = 12080;
static char hidden[MAX_HIDDEN][64];
static int nhidden;
int fakecuda_gated; // some call is absent: the exported symbols check (fakecuda_absent)

static int is_hidden(const char *name) {
	for (int i = 0; i < nhidden; i++) {
		if (strcmp(hidden[i], name) == 0) return 1;
	}
	return 0;
}

// present reports whether the driver configured has p.
static int present(const struct proc *p) { return p->version <= version && !is_hidden(p->name); }

// fakecuda_proc_configure reads FAKECUDA_VERSION and FAKECUDA_HIDE; fakecuda.c
// calls it as it configures.
void fakecuda_proc_configure(void) {
	const char *s = getenv("FAKECUDA_VERSION");
	if (s && *s) version = atoi(s);
	for (s = getenv("FAKECUDA_HIDE"); s && *s && nhidden < MAX_HIDDEN;) {
		size_t n = strcspn(s, ",");
		if (n > 0 && n < sizeof hidden[0]) {
			memcpy(hidden[nhidden], s, n);
			hidden[nhidden++][n] = 0;
		}
		s += n;
		if (*s == ',') s++;
	}
	for (size_t i = 0; i < NPROCS; i++) {
		if (!present(&procs[i])) fakecuda_gated = 1;
	}
}

int fakecuda_version(void) { return version; }

// fakecuda_absent aborts the process where the exported symbol called is
// one the driver configured has not: variant of fn (a base name), or, for
// NULL, every variant of fn. A program that looked it up with dlsym of that
// driver would have found nothing, and one that used cuGetProcAddress
// would have had NULL. fakecuda.c calls it at every call's entry where
// fakecuda_gated.
void fakecuda_absent(const char *fn, void *variant) {
	int rows = 0, absent = 0;
	for (size_t i = 0; i < NPROCS; i++) {
		const struct proc *p = &procs[i];
		if (strcmp(p->name, fn) != 0 || (variant && p->fn != variant)) continue;
		rows++;
		if (!present(p)) absent++;
	}
	if (rows == 0 || absent < rows) return;
	fprintf(stderr, "fakecuda: %s called, but this driver (FAKECUDA_VERSION=%d, FAKECUDA_HIDE=%s) has none: it %s\n", fn,
		version, getenv("FAKECUDA_HIDE") ? getenv("FAKECUDA_HIDE") : "",
		is_hidden(fn) ? "is hidden" : "is newer than the driver");
	abort();
}

// lookup is what both forms of cuGetProcAddress share: it enters the call
// (named by the form's variant), refuses a NULL argument and a version
// above the driver's (CUDA_ERROR_INVALID_VALUE, "If the specified CUDA
// version is greater than the driver version"), and finds the newest variant
// of symbol at or below cudaVersion, which it stores in *pfn (NULL for
// none); *status says what was found.
static CUresult lookup(void *variant, const char *symbol, void **pfn, int cudaVersion,
		       CUdriverProcAddressQueryResult *status) {
	if (fakecuda_gated) fakecuda_absent("cuGetProcAddress", variant);
	CUresult r = fakecuda_enter("cuGetProcAddress");
	if (r != CUDA_SUCCESS) return r;
	if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	if (cudaVersion > version) return CUDA_ERROR_INVALID_VALUE;
	const struct proc *best = NULL;
	int known = 0;
	for (size_t i = 0; i < NPROCS; i++) {
		const struct proc *p = &procs[i];
		if (strcmp(p->name, symbol) != 0 || !present(p)) continue;
		known = 1;
		if (p->version <= cudaVersion && (!best || p->version > best->version)) best = p;
	}
	*status = best    ? CU_GET_PROC_ADDRESS_SUCCESS
		  : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
			  : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (best) *pfn = best->fn;
	return CUDA_SUCCESS;
}

// cuGetProcAddress, the CUDA 11.3 form: the variant of symbol for
// cudaVersion, or CUDA_ERROR_NOT_FOUND where there is none ("not supported
// on the platform, no ABI compatible driver function exists for the
// specified cudaVersion or if the driver symbol is invalid", cuda.h 11.8).
// A version above the driver's is CUDA_ERROR_INVALID_VALUE, as the 12.x
// reference states for both forms. Flags select per-thread default-stream
// variants, which the fake has none of: "If a per-thread version is not
// found, the API will return the legacy version".
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
	CUdriverProcAddressQueryResult status;
	CUresult r = lookup((void *)cuGetProcAddress, symbol, pfn, cudaVersion, &status);
	return r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_ERROR_NOT_FOUND : r;
}

// cuGetProcAddress_v2, the CUDA 12.0 form: "The API will return
// CUDA_SUCCESS and set the returned pfn to NULL if the requested driver
// function is not supported on the platform, no ABI compatible driver
// function exists for the specified cudaVersion or if the driver symbol is
// invalid", with symbolStatus CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND ("Symbol
// was not found in search") or CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
// ("Symbol was found but version supplied was not sufficient").
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus) {
	CUdriverProcAddressQueryResult status;
	CUresult r = lookup((void *)cuGetProcAddress_v2, symbol, pfn, cudaVersion, &status);
	if (r == CUDA_SUCCESS && symbolStatus) *symbolStatus = status;
	return r;
}
