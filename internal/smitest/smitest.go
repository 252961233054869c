//go:build rocm

package smitest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
	uint32_t process_id, pasid;
	uint64_t vram_usage, sdma_usage;
	uint32_t cu_occupancy;
} smitest_process_info; // rsmi_process_info_t

typedef int (*smitest_list_fn)(smitest_process_info *procs, uint32_t *n);
typedef int (*smitest_gpus_fn)(uint32_t pid, uint32_t *dv, uint32_t *n);

// smitest_find returns call name of the library loaded as lib, or NULL.
static void *smitest_find(const char *lib, const char *name) {
	void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
	if (!h) return NULL;
	void *f = dlsym(h, name);
	dlclose(h); // NOLOAD took a reference; the process keeps the library
	return f;
}

static int smitest_list(void *f, smitest_process_info *procs, uint32_t *n) { return ((smitest_list_fn)f)(procs, n); }
static int smitest_gpus(void *f, uint32_t pid, uint32_t *dv, uint32_t *n) { return ((smitest_gpus_fn)f)(pid, dv, n); }
*/
import "C"

import (
	"unsafe"

	"github.com/memtrack/memtrack/internal/rocmsmi"
)

// find returns the call name of the rocm_smi the process loaded, or nil.
func find(name string) unsafe.Pointer {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	for _, lib := range rocmsmi.Libraries {
		cl := C.CString(lib)
		f := C.smitest_find(cl, cn)
		C.free(unsafe.Pointer(cl))
		if f != nil {
			return f
		}
	}
	return nil
}

// List calls rsmi_compute_process_info_get with room for capacity entries
// (none: a NULL buffer, for capacity < 0) and returns the PIDs written, the
// count it set and its status; ok is false where no rocm_smi is loaded.
func List(capacity int) (pids []uint32, n uint32, status rocmsmi.Status, ok bool) {
	f := find("rsmi_compute_process_info_get")
	if f == nil {
		return nil, 0, 0, false
	}
	var buf []C.smitest_process_info
	var p *C.smitest_process_info
	cn := C.uint32_t(0)
	if capacity >= 0 {
		buf = make([]C.smitest_process_info, capacity+1) // never empty, for &buf[0]
		p, cn = &buf[0], C.uint32_t(capacity)
	}
	s := rocmsmi.Status(C.smitest_list(f, p, &cn))
	for i := 0; p != nil && i < min(int(cn), capacity); i++ {
		pids = append(pids, uint32(buf[i].process_id))
	}
	return pids, uint32(cn), s, true
}

// GPUs calls rsmi_compute_process_gpus_get for pid with room for capacity
// device indices (a NULL buffer for capacity < 0) and returns the indices
// written, the count it set and its status.
func GPUs(pid uint32, capacity int) (devices []uint32, n uint32, status rocmsmi.Status, ok bool) {
	f := find("rsmi_compute_process_gpus_get")
	if f == nil {
		return nil, 0, 0, false
	}
	var buf []C.uint32_t
	var p *C.uint32_t
	cn := C.uint32_t(0)
	if capacity >= 0 {
		buf = make([]C.uint32_t, capacity+1)
		p, cn = &buf[0], C.uint32_t(capacity)
	}
	s := rocmsmi.Status(C.smitest_gpus(f, C.uint32_t(pid), p, &cn))
	for i := 0; p != nil && i < min(int(cn), capacity); i++ {
		devices = append(devices, uint32(buf[i]))
	}
	return devices, uint32(cn), s, true
}
