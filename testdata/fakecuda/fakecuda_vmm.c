// fakecuda_vmm.c is the fake driver's virtual memory management (CUDA
// 10.2): address space reserved (cuMemAddressReserve, cuMemAddressFree),
// physical memory created and released (cuMemCreate, cuMemRelease), mapped
// and unmapped (cuMemMap, cuMemUnmap), made accessible (cuMemSetAccess,
// cuMemGetAccess), in granules (cuMemGetAllocationGranularity). It is built
// with fakecuda.c; RULES.md, "Virtual memory management", lists each rule
// with its source.
//
// Address space is host address space, reserved with mmap(PROT_NONE), so
// that a reservation takes no memory and its addresses are the process's
// own; a mapping made accessible is made readable and writable for the
// host too (mprotect), so that the stream operations of fakecuda_stream.c
// (cuMemsetD8Async) can write it; an unmap puts fresh PROT_NONE pages in
// its place. Physical memory is charged to the device, and to this
// process on the machine (machine.h), from cuMemCreate until it is freed:
// cuMemGetInfo and the fake NVML's per-process figure count it, and
// address space alone neither.
//
// Its environment variables, read once:
//
//	FAKECUDA_VMM=v[,v..]            whether each device supports virtual
//	                                memory management
//	                                (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
//	                                default 1); the last value repeats for
//	                                later devices. A device without it
//	                                answers cuMemCreate and
//	                                cuMemGetAllocationGranularity with
//	                                CUDA_ERROR_NOT_SUPPORTED
//	FAKECUDA_GRANULARITY=m[,r]      the minimum and recommended
//	                                granularity of every device, in bytes
//	                                (default 2 MiB and 2 MiB)
//	FAKECUDA_VMM_ADDRESS_FREE=r     what cuMemAddressFree does with a range
//	                                still mapped, which the documents do not
//	                                say: "refuse" (default), it fails with
//	                                CUDA_ERROR_INVALID_VALUE and changes
//	                                nothing; "unmap", it unmaps what is mapped
//	                                there, as cuMemUnmap would, and frees the
//	                                range; "defer", it succeeds, and the range
//	                                is freed when its last mapping is unmapped
//	FAKECUDA_VMM_ALIGN=r            the alignment of a reservation asked for
//	                                with alignment 0 ("zero for default
//	                                alignment"), which the documents do not
//	                                give: "granularity" (default), the
//	                                minimum granularity; "page", the host's
//	                                page size
//	FAKECUDA_VMM_CAPTURE=r          whether the calls that reserve, create,
//	                                map, unmap, release or free are
//	                                "potentially unsafe" during stream
//	                                capture, as cuMemAlloc is
//	                                (cuThreadExchangeStreamCaptureMode names
//	                                cuMemAlloc as an example and lists no
//	                                others): "allowed" (default), they are
//	                                not; "unsafe", they are, and fail with
//	                                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
//	                                where cuMemAlloc would, invalidating the
//	                                captures concerned
#include <cuda.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "machine.h"

// From fakecuda.c and fakecuda_stream.c.
CUresult fakecuda_ready(const char *fn);
CUresult fakecuda_take(int dev, size_t n);
void fakecuda_give(int dev, size_t n);
int fakecuda_devices(void);
CUresult fakecuda_unsafe_call(void);

#define MAX_DEVICES MACHINE_DEVICES

// handle is physical memory made by cuMemCreate: alive until it is
// released and no mapping of it is left.
struct handle {
	struct handle *next;
	CUmemGenericAllocationHandle id; // what cuMemCreate returned
	int device;
	size_t size;
	int released; // cuMemRelease was called: the handle is no longer valid
	int mappings; // the mappings of it
};

// reservation is a range reserved by cuMemAddressReserve.
struct reservation {
	struct reservation *next;
	uintptr_t base;
	size_t size;
	int freed; // FAKECUDA_VMM_ADDRESS_FREE=defer: freed once its last mapping goes
};

// mapping is a range mapped by cuMemMap, with the access of each device.
struct mapping {
	struct mapping *next;
	uintptr_t ptr;
	size_t size;
	size_t tail; // the bytes past its reservation's end, host address space the fake took for it
	struct handle *h;
	struct reservation *res;
	unsigned long long access[MAX_DEVICES]; // CUmemAccess_flags per device
};

enum { FREE_REFUSE, FREE_UNMAP, FREE_DEFER };

static pthread_once_t vconfig_once = PTHREAD_ONCE_INIT;
static int vmm[MAX_DEVICES];
static size_t gran_min = (size_t)2 << 20, gran_rec = (size_t)2 << 20;
static int free_mapped = FREE_REFUSE;
static int align_page, capture_unsafe;
static size_t host_page;

// vmu guards the lists.
static pthread_mutex_t vmu = PTHREAD_MUTEX_INITIALIZER;
static struct handle *handles;
static struct reservation *reservations;
static struct mapping *mappings;
static CUmemGenericAllocationHandle last_id;

static void vconfigure(void) {
	const char *s = getenv("FAKECUDA_VMM");
	int v = 1;
	for (int i = 0; i < MAX_DEVICES; i++) {
		if (s && *s) {
			char *end;
			v = (int)strtol(s, &end, 0) != 0;
			s = *end == ',' ? end + 1 : NULL;
		}
		vmm[i] = v;
	}
	if ((s = getenv("FAKECUDA_GRANULARITY")) && *s) {
		char *end;
		unsigned long long m = strtoull(s, &end, 0);
		if (m > 0) gran_min = gran_rec = (size_t)m;
		if (*end == ',' && (m = strtoull(end + 1, NULL, 0)) > 0) gran_rec = (size_t)m;
	}
	if ((s = getenv("FAKECUDA_VMM_ADDRESS_FREE"))) {
		if (strcmp(s, "unmap") == 0) free_mapped = FREE_UNMAP;
		if (strcmp(s, "defer") == 0) free_mapped = FREE_DEFER;
	}
	align_page = (s = getenv("FAKECUDA_VMM_ALIGN")) && strcmp(s, "page") == 0;
	capture_unsafe = (s = getenv("FAKECUDA_VMM_CAPTURE")) && strcmp(s, "unsafe") == 0;
	host_page = (size_t)sysconf(_SC_PAGESIZE);
}

// vready is the prologue of every call here: fakecuda.c's (counted, the
// configured errors and faults, cuInit).
static CUresult vready(const char *fn) {
	pthread_once(&vconfig_once, vconfigure);
	return fakecuda_ready(fn);
}

// unsafe is the check of a call that FAKECUDA_VMM_CAPTURE=unsafe makes
// potentially unsafe during stream capture.
static CUresult unsafe(void) { return capture_unsafe ? fakecuda_unsafe_call() : CUDA_SUCCESS; }

// fakecuda_vmm_supported answers CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
// for device dev (cuDeviceGetAttribute, fakecuda_stream.c).
int fakecuda_vmm_supported(int dev) {
	pthread_once(&vconfig_once, vconfigure);
	return dev >= 0 && dev < MAX_DEVICES && vmm[dev];
}

// fakecuda_granularity returns the devices' minimum allocation granularity
// (FAKECUDA_GRANULARITY), the page in which cuMemAlloc maps memory too
// (fakecuda.c).
size_t fakecuda_granularity(void) {
	pthread_once(&vconfig_once, vconfigure);
	return gran_min;
}

static int any_vmm(void) {
	for (int i = 0; i < fakecuda_devices(); i++)
		if (vmm[i]) return 1;
	return 0;
}

// device_prop returns the device of prop, a device's pinned memory with no
// shareable handle, or -1 where prop is not one the fake makes.
static int device_prop(const CUmemAllocationProp *prop) {
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return -1;
	if (prop->location.id < 0 || prop->location.id >= fakecuda_devices()) return -1;
	return prop->location.id;
}

// ---- lookups (vmu held)

static struct handle *valid_handle(CUmemGenericAllocationHandle id) {
	for (struct handle *h = handles; h; h = h->next)
		if (h->id == id && !h->released) return h;
	return NULL;
}

static struct reservation *reservation_of(uintptr_t ptr, size_t size) {
	for (struct reservation *r = reservations; r; r = r->next)
		if (ptr >= r->base && ptr - r->base < r->size && size <= r->size - (ptr - r->base)) return r;
	return NULL;
}

// reservation_at returns the reservation in which ptr lies, or NULL.
static struct reservation *reservation_at(uintptr_t ptr) {
	for (struct reservation *r = reservations; r; r = r->next)
		if (ptr >= r->base && ptr - r->base < r->size) return r;
	return NULL;
}

// covered reports whether [ptr, ptr+size) is made of whole mappings, back
// to back, every byte mapped: what cuMemSetAccess ("a fully mapped address
// range containing all allocations") takes.
static int covered(uintptr_t ptr, size_t size) {
	if (size == 0) return 0;
	uintptr_t at = ptr, end = ptr + size;
	while (at < end) {
		struct mapping *m = NULL;
		for (struct mapping *x = mappings; x && !m; x = x->next)
			if (x->ptr == at) m = x;
		if (!m || m->size > end - at) return 0;
		at += m->size;
	}
	return 1;
}

// unmap_one removes m, puts fresh PROT_NONE pages in its place, and frees
// its handle's memory where the handle is released and m was its last
// mapping, and its reservation where that was freed (defer) and m was the
// last mapping in it.
static void unmap_one(struct mapping *m) {
	for (struct mapping **p = &mappings; *p; p = &(*p)->next) {
		if (*p == m) {
			*p = m->next;
			break;
		}
	}
	mmap((void *)m->ptr, m->size - m->tail, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (m->tail) munmap((void *)(m->ptr + m->size - m->tail), m->tail); // not the reservation's: given back
	struct handle *h = m->h;
	if (--h->mappings == 0 && h->released) {
		fakecuda_give(h->device, h->size);
		for (struct handle **p = &handles; *p; p = &(*p)->next) {
			if (*p == h) {
				*p = h->next;
				break;
			}
		}
		free(h);
	}
	struct reservation *r = m->res;
	free(m);
	if (r->freed) {
		for (struct mapping *x = mappings; x; x = x->next)
			if (x->res == r) return;
		for (struct reservation **p = &reservations; *p; p = &(*p)->next) {
			if (*p == r) {
				*p = r->next;
				break;
			}
		}
		munmap((void *)r->base, r->size);
		free(r);
	}
}

// ---- the calls

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option) {
	CUresult r = vready("cuMemGetAllocationGranularity");
	if (r != CUDA_SUCCESS) return r;
	if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
	int dev = device_prop(prop);
	if (dev < 0) return CUDA_ERROR_INVALID_VALUE;
	if (!vmm[dev]) return CUDA_ERROR_NOT_SUPPORTED;
	switch (option) {
	case CU_MEM_ALLOC_GRANULARITY_MINIMUM:
		*granularity = gran_min;
		return CUDA_SUCCESS;
	case CU_MEM_ALLOC_GRANULARITY_RECOMMENDED:
		*granularity = gran_rec;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

// cuMemAddressReserve reserves host address space (PROT_NONE, no memory)
// at an alignment of at least the one asked for; the address given is a
// hint, which the fake does not take.
CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
	CUresult r = vready("cuMemAddressReserve");
	if (r != CUDA_SUCCESS) return r;
	if ((r = unsafe()) != CUDA_SUCCESS) return r;
	// The reference asks for a size of whole host pages; an H200 refused
	// one of whole pages off the granularity (2 MiB + 4 KiB: RULES.md).
	if (!ptr || size == 0 || size % gran_min != 0 || addr % host_page != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
	if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE; // a power of two, or 0
	if (!any_vmm()) return CUDA_ERROR_NOT_SUPPORTED;
	if (alignment == 0) alignment = align_page ? host_page : gran_min;
	if (alignment < host_page) alignment = host_page;
	struct reservation *res = malloc(sizeof *res);
	if (!res) return CUDA_ERROR_OUT_OF_MEMORY;
	// Map size + alignment, then give back the head and the tail around
	// the aligned range.
	size_t span = size + alignment;
	if (span < size) {
		free(res);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		free(res);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uintptr_t start = (uintptr_t)p, base = (start + alignment - 1) / alignment * alignment;
	if (base > start) munmap(p, base - start);
	if (start + span > base + size) munmap((void *)(base + size), start + span - (base + size));
	res->base = base;
	res->size = size;
	res->freed = 0;
	pthread_mutex_lock(&vmu);
	res->next = reservations;
	reservations = res;
	pthread_mutex_unlock(&vmu);
	*ptr = (CUdeviceptr)base;
	return CUDA_SUCCESS;
}

// cuMemAddressFree frees a reservation: "The size must match what was given
// to memAddressReserve and the ptr given must match what was returned". A
// range still mapped is FAKECUDA_VMM_ADDRESS_FREE's question.
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
	CUresult r = vready("cuMemAddressFree");
	if (r != CUDA_SUCCESS) return r;
	if ((r = unsafe()) != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&vmu);
	struct reservation **p = &reservations;
	while (*p && ((*p)->base != (uintptr_t)ptr || (*p)->freed)) p = &(*p)->next;
	struct reservation *res = *p;
	if (!res || res->size != size) {
		pthread_mutex_unlock(&vmu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	int mapped = 0;
	for (struct mapping *m = mappings; m; m = m->next) mapped += m->res == res;
	if (mapped > 0 && free_mapped == FREE_REFUSE) {
		pthread_mutex_unlock(&vmu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (mapped > 0 && free_mapped == FREE_DEFER) {
		res->freed = 1; // unmap_one frees it with its last mapping
		pthread_mutex_unlock(&vmu);
		return CUDA_SUCCESS;
	}
	for (struct mapping *m = mappings, *next; m; m = next) {
		next = m->next;
		if (m->res == res) unmap_one(m);
	}
	*p = res->next;
	munmap((void *)res->base, res->size);
	free(res);
	pthread_mutex_unlock(&vmu);
	return CUDA_SUCCESS;
}

// cuMemCreate creates physical memory on the device of prop, charged to
// the device and to the process until it is freed: "This creates a memory
// allocation on the target device ... The created allocation will not have
// any device or host mappings".
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags) {
	CUresult r = vready("cuMemCreate");
	if (r != CUDA_SUCCESS) return r;
	if ((r = unsafe()) != CUDA_SUCCESS) return r;
	if (!handle || !prop || flags != 0 || size == 0 || size % gran_min != 0) return CUDA_ERROR_INVALID_VALUE;
	if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
	    (prop->location.id < 0 || prop->location.id >= fakecuda_devices()))
		return CUDA_ERROR_INVALID_DEVICE;
	int dev = device_prop(prop);
	if (dev < 0 || prop->win32HandleMetaData) return CUDA_ERROR_INVALID_VALUE;
	if (!vmm[dev] || prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
	struct handle *h = calloc(1, sizeof *h);
	if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
	if ((r = fakecuda_take(dev, size)) != CUDA_SUCCESS) {
		free(h);
		return r;
	}
	h->device = dev;
	h->size = size;
	pthread_mutex_lock(&vmu);
	h->id = ++last_id;
	h->next = handles;
	handles = h;
	pthread_mutex_unlock(&vmu);
	*handle = h->id;
	return CUDA_SUCCESS;
}

// cuMemRelease: "The memory allocation will be freed when all outstanding
// mappings to the memory are unmapped"; "If handle is not a valid handle
// the behavior is undefined", and the fake stops the process, naming it.
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
	CUresult r = vready("cuMemRelease");
	if (r != CUDA_SUCCESS) return r;
	if ((r = unsafe()) != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&vmu);
	struct handle *h = valid_handle(handle);
	if (!h) {
		fprintf(stderr, "fakecuda: cuMemRelease of %llu, which is no valid handle (never made, or released already): "
				"\"the behavior is undefined\" (cuMemRelease)\n", (unsigned long long)handle);
		abort();
	}
	h->released = 1;
	if (h->mappings == 0) {
		fakecuda_give(h->device, h->size);
		for (struct handle **p = &handles; *p; p = &(*p)->next) {
			if (*p == h) {
				*p = h->next;
				break;
			}
		}
		free(h);
	}
	pthread_mutex_unlock(&vmu);
	return CUDA_SUCCESS;
}

// cuMemMap maps a handle into a reservation: ptr and offset multiples of
// the minimum granularity, offset 0 ("currently must be zero"), ptr within
// a reservation and the range "not currently mapped", the handle valid;
// the mapping has no access until cuMemSetAccess. A size off the
// granularity is CUDA_ERROR_NOT_SUPPORTED, and a range that runs past the
// end of its reservation is mapped, as an H200 answered (RULES.md); the
// fake takes the host's address space past the end for it, and refuses it
// (CUDA_ERROR_INVALID_VALUE) where that space is another's.
CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			  unsigned long long flags) {
	CUresult r = vready("cuMemMap");
	if (r != CUDA_SUCCESS) return r;
	if ((r = unsafe()) != CUDA_SUCCESS) return r;
	if (flags != 0 || offset != 0 || size == 0 || ptr % gran_min != 0) return CUDA_ERROR_INVALID_VALUE;
	if (size % gran_min != 0) return CUDA_ERROR_NOT_SUPPORTED;
	struct mapping *m = calloc(1, sizeof *m);
	if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&vmu);
	struct handle *h = valid_handle(handle);
	struct reservation *res = reservation_at((uintptr_t)ptr);
	int overlap = 0;
	for (struct mapping *x = mappings; x && !overlap; x = x->next)
		overlap = x->ptr < (uintptr_t)ptr + size && (uintptr_t)ptr < x->ptr + x->size;
	if (!h || !res || res->freed || overlap || offset + size > h->size || (uintptr_t)ptr + size < (uintptr_t)ptr) {
		pthread_mutex_unlock(&vmu);
		free(m);
		return CUDA_ERROR_INVALID_VALUE;
	}
	uintptr_t end = res->base + res->size;
	if ((uintptr_t)ptr + size > end) {
		// Past the reservation's end: the host's address space there, if
		// nothing holds it (another reservation or any other mapping).
		m->tail = (uintptr_t)ptr + size - end;
		void *t = mmap((void *)end, m->tail, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (t != (void *)end) {
			if (t != MAP_FAILED) munmap(t, m->tail); // a kernel that took the flag as a hint
			pthread_mutex_unlock(&vmu);
			free(m);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	m->ptr = (uintptr_t)ptr;
	m->size = size;
	m->h = h;
	m->res = res;
	h->mappings++;
	m->next = mappings;
	mappings = m;
	pthread_mutex_unlock(&vmu);
	return CUDA_SUCCESS;
}

// cuMemUnmap unmaps whole mappings, never part of one ("cuMemUnmap cannot
// unmap a sub-range of an address range mapped by cuMemCreate / cuMemMap");
// a range over several, back to back (NVIDIA's samples) or with address
// space never mapped between or around them, or with none, in a
// reservation, is unmapped, as an H200 answered (RULES.md). "Any backing
// memory allocations will be freed if there are no existing mappings and
// there are no unreleased memory handles", and the range is "converted to
// an address reservation", whose next mapping starts with no access.
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
	CUresult r = vready("cuMemUnmap");
	if (r != CUDA_SUCCESS) return r;
	if ((r = unsafe()) != CUDA_SUCCESS) return r;
	uintptr_t at = (uintptr_t)ptr;
	pthread_mutex_lock(&vmu);
	int cut = size == 0 || at + size < at, inside = 0;
	for (struct mapping *m = mappings; m && !cut; m = m->next) {
		if (m->ptr >= at + size || m->ptr + m->size <= at) continue;
		cut = m->ptr < at || m->ptr + m->size > at + size; // part of a mapping
		inside++;
	}
	if (cut || (!inside && !reservation_of(at, size))) {
		pthread_mutex_unlock(&vmu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (struct mapping *m = mappings, *next; m; m = next) {
		next = m->next;
		if (m->ptr >= at && m->ptr - at < size) unmap_one(m);
	}
	pthread_mutex_unlock(&vmu);
	return CUDA_SUCCESS;
}

// cuMemSetAccess sets the access of each device given, over "a fully mapped
// address range containing all allocations" (whole mappings). The host's
// pages follow the widest access any device has.
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
	CUresult r = vready("cuMemSetAccess");
	if (r != CUDA_SUCCESS) return r;
	if ((r = unsafe()) != CUDA_SUCCESS) return r;
	if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
		if (desc[i].location.id < 0 || desc[i].location.id >= fakecuda_devices()) return CUDA_ERROR_INVALID_DEVICE;
		switch (desc[i].flags) {
		case CU_MEM_ACCESS_FLAGS_PROT_NONE:
		case CU_MEM_ACCESS_FLAGS_PROT_READ:
		case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
			break;
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	pthread_mutex_lock(&vmu);
	if (!covered((uintptr_t)ptr, size)) {
		pthread_mutex_unlock(&vmu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (struct mapping *m = mappings; m; m = m->next) {
		if (m->ptr < (uintptr_t)ptr || m->ptr - (uintptr_t)ptr >= size) continue;
		unsigned long long widest = 0;
		for (size_t i = 0; i < count; i++) m->access[desc[i].location.id] = desc[i].flags;
		for (int d = 0; d < MAX_DEVICES; d++) widest |= m->access[d];
		int prot = widest == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
			   : widest == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
									: PROT_NONE;
		mprotect((void *)m->ptr, m->size, prot);
	}
	pthread_mutex_unlock(&vmu);
	return CUDA_SUCCESS;
}

// cuMemGetAccess returns the access of a device to the mapping of ptr:
// CU_MEM_ACCESS_FLAGS_PROT_NONE until cuMemSetAccess gives it, "as all
// mappings start with no accessibility setup".
CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr) {
	CUresult r = vready("cuMemGetAccess");
	if (r != CUDA_SUCCESS) return r;
	if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
	if (location->id < 0 || location->id >= fakecuda_devices()) return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&vmu);
	for (struct mapping *m = mappings; m; m = m->next) {
		if ((uintptr_t)ptr >= m->ptr && (uintptr_t)ptr - m->ptr < m->size) {
			*flags = m->access[location->id];
			pthread_mutex_unlock(&vmu);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&vmu);
	return CUDA_ERROR_INVALID_VALUE;
}
