// fakehip_proc.c is the fake runtime's version and its entry points by name
// (hipGetProcAddress), built with fakehip.c. RULES.md lists the rules with
// their sources. Its environment variables, read once (by fakehip.c's
// configuration):
//
//	FAKEHIP_VERSION=v     what hipRuntimeGetVersion answers (HIP_VERSION's
//	                      encoding, major*10000000 + minor*100000 + patch;
//	                      default 50221153 in the build of FAKEHIP_ABI=502,
//	                      60443483 in the default build). A call of a later
//	                      release than v is absent, as from a runtime of
//	                      that version: hipGetProcAddress does not return it,
//	                      and calling its exported symbol anyway aborts the
//	                      process, naming it. Below 6.2, hipGetProcAddress
//	                      itself is absent. The build decides which symbols
//	                      dlsym finds (FAKEHIP_ABI, fakehip_api.h).
//	FAKEHIP_HIDE=f[,f..]  the calls f are absent likewise, whatever the
//	                      version: a runtime built without them. Only
//	                      hipGetProcAddress hides them; dlsym finds every
//	                      symbol the library exports.
//	FAKEHIP_PROC_VERSION=r what hipGetProcAddress does with a hipVersion
//	                      below the release a call came with: ignore
//	                      (default; it returns the call, the version
//	                      selecting only between variants of one name) or
//	                      check (hipErrorInvalidValue with
//	                      HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
#include "fakehip_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Calls of the fake that only its tests' helpers (internal/hiptest) make.
hipError_t hipStreamCreate(hipStream_t *stream);
hipError_t hipStreamDestroy(hipStream_t stream);
hipError_t hipStreamQuery(hipStream_t stream);
hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback, void *userData, unsigned int flags);
hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph);
hipError_t hipGraphDestroy(hipGraph_t graph);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipDeviceSynchronize(void);

// The fake's entry points, each with the first ROCm release whose
// libamdhip64 exports it (100*major + minor; 401 for those ROCm 4.1
// exported already): RULES.md says how each was found.
static const struct proc {
	const char *name;
	int version;
	void *fn;
} procs[] = {
	{"hipInit", 401, (void *)hipInit},
	{"hipRuntimeGetVersion", 401, (void *)hipRuntimeGetVersion},
	{"hipGetErrorName", 401, (void *)hipGetErrorName},
	{"hipGetErrorString", 401, (void *)hipGetErrorString},
	{"hipGetDeviceCount", 401, (void *)hipGetDeviceCount},
	{"hipGetDevice", 401, (void *)hipGetDevice},
	{"hipSetDevice", 401, (void *)hipSetDevice},
	{"hipDeviceGetName", 401, (void *)hipDeviceGetName},
	{"hipDeviceGetPCIBusId", 401, (void *)hipDeviceGetPCIBusId},
	{"hipDeviceGetAttribute", 401, (void *)hipDeviceGetAttribute},
	{"hipDeviceSynchronize", 401, (void *)hipDeviceSynchronize},
	{"hipMalloc", 401, (void *)hipMalloc},
	{"hipFree", 401, (void *)hipFree},
	{"hipMemGetInfo", 401, (void *)hipMemGetInfo},
	{"hipStreamCreate", 401, (void *)hipStreamCreate},
	{"hipStreamDestroy", 401, (void *)hipStreamDestroy},
	{"hipStreamQuery", 401, (void *)hipStreamQuery},
	{"hipStreamSynchronize", 401, (void *)hipStreamSynchronize},
	{"hipStreamAddCallback", 401, (void *)hipStreamAddCallback},
	{"hipEventCreateWithFlags", 401, (void *)hipEventCreateWithFlags},
	{"hipEventRecord", 401, (void *)hipEventRecord},
	{"hipEventQuery", 401, (void *)hipEventQuery},
	{"hipEventSynchronize", 401, (void *)hipEventSynchronize},
	{"hipEventDestroy", 401, (void *)hipEventDestroy},
	{"hipStreamIsCapturing", 403, (void *)hipStreamIsCapturing},
	{"hipStreamBeginCapture", 403, (void *)hipStreamBeginCapture},
	{"hipStreamEndCapture", 403, (void *)hipStreamEndCapture},
	{"hipGraphDestroy", 403, (void *)hipGraphDestroy},
	{"hipStreamGetCaptureInfo", 501, (void *)hipStreamGetCaptureInfo},
	{"hipDeviceGetUuid", 502, (void *)hipDeviceGetUuid},
	{"hipThreadExchangeStreamCaptureMode", 502, (void *)hipThreadExchangeStreamCaptureMode},
	{"hipMallocAsync", 502, (void *)hipMallocAsync},
	{"hipFreeAsync", 502, (void *)hipFreeAsync},
	{"hipDeviceGetMemPool", 502, (void *)hipDeviceGetMemPool},
	{"hipMemPoolGetAttribute", 502, (void *)hipMemPoolGetAttribute},
	{"hipMemPoolSetAttribute", 502, (void *)hipMemPoolSetAttribute},
	{"hipMemPoolTrimTo", 502, (void *)hipMemPoolTrimTo},
#if FAKEHIP_ABI >= 503
	{"hipDeviceGetGraphMemAttribute", 503, (void *)hipDeviceGetGraphMemAttribute},
	{"hipDeviceSetGraphMemAttribute", 503, (void *)hipDeviceSetGraphMemAttribute},
	{"hipDeviceGraphMemTrim", 503, (void *)hipDeviceGraphMemTrim},
#endif
#if FAKEHIP_ABI >= 506
	{"hipStreamGetDevice", 506, (void *)hipStreamGetDevice},
#endif
#if FAKEHIP_ABI >= 602
	{"hipGetProcAddress", 602, (void *)hipGetProcAddress},
#endif
};

#define NPROCS (sizeof procs / sizeof procs[0])
#define MAX_HIDDEN 16

static int version = FAKEHIP_ABI == 502 ? 50221153 : FAKEHIP_ABI / 100 * 10000000 + FAKEHIP_ABI % 100 * 100000 + 43483;
static char hidden[MAX_HIDDEN][64];
static int nhidden;
static int proc_check; // FAKEHIP_PROC_VERSION=check
int fakehip_gated;

static int is_hidden(const char *name) {
	for (int i = 0; i < nhidden; i++) {
		if (strcmp(hidden[i], name) == 0) return 1;
	}
	return 0;
}

int fakehip_version(void) { return version; }
int fakehip_api(void) { return version / 10000000 * 100 + version / 100000 % 100; }

// present reports whether the runtime configured has p.
static int present(const struct proc *p) { return p->version <= fakehip_api() && !is_hidden(p->name); }

void fakehip_proc_configure(void) {
	const char *s = getenv("FAKEHIP_VERSION");
	if (s && *s) version = atoi(s);
	s = getenv("FAKEHIP_PROC_VERSION");
	proc_check = s && strcmp(s, "check") == 0;
	for (s = getenv("FAKEHIP_HIDE"); s && *s && nhidden < MAX_HIDDEN;) {
		size_t n = strcspn(s, ",");
		if (n > 0 && n < sizeof hidden[0]) {
			memcpy(hidden[nhidden], s, n);
			hidden[nhidden++][n] = 0;
		}
		s += n;
		if (*s == ',') s++;
	}
	for (size_t i = 0; i < NPROCS; i++) {
		if (!present(&procs[i])) fakehip_gated = 1;
	}
}

// fakehip_absent aborts the process where the runtime configured has no
// fn: a program that looked it up with dlsym in that runtime would have
// found nothing, and one that used hipGetProcAddress would have had NULL.
void fakehip_absent(const char *fn) {
	for (size_t i = 0; i < NPROCS; i++) {
		const struct proc *p = &procs[i];
		if (strcmp(p->name, fn) != 0 || present(p)) continue;
		fprintf(stderr, "fakehip: %s called, but this runtime (FAKEHIP_VERSION=%d, FAKEHIP_HIDE=%s) has none: it %s\n", fn,
			version, getenv("FAKEHIP_HIDE") ? getenv("FAKEHIP_HIDE") : "", is_hidden(fn) ? "is hidden" : "is newer than the runtime");
		abort();
	}
}

#if FAKEHIP_ABI >= 602
// hipGetProcAddress "Gets the pointer of requested HIP driver function":
// hipSuccess "if the returned pfn is addressed to the pointer of found
// driver function", else hipErrorInvalidValue with symbolStatus saying
// why; "Currently only default flag is supported"; it initialises the
// runtime as "Most HIP APIs" do, so it fails as hipInit does where the
// runtime cannot initialise.
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
			     hipDriverProcAddressQueryResult *symbolStatus) {
	hipError_t r = fakehip_ready("hipGetProcAddress");
	if (r != hipSuccess) return r;
	if (!symbol || !*symbol || !pfn) return hipErrorInvalidValue;
	*pfn = NULL;
	if (flags != FAKEHIP_PROC_DEFAULT) return hipErrorInvalidValue;
	hipDriverProcAddressQueryResult status = HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	for (size_t i = 0; i < NPROCS; i++) {
		const struct proc *p = &procs[i];
		if (strcmp(p->name, symbol) != 0 || !present(p)) continue;
		if (proc_check && hipVersion < p->version) {
			status = HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
			break;
		}
		*pfn = p->fn;
		status = HIP_GET_PROC_ADDRESS_SUCCESS;
		break;
	}
	if (symbolStatus) *symbolStatus = status;
	return *pfn ? hipSuccess : hipErrorInvalidValue;
}
#endif
