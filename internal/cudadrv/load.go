//go:build cuda

package cudadrv

// Loading the driver at run time (loader.c): no cuda.h to build, no
// libcuda to start. The library links only the dynamic loader's calls.

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "loader.h"
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// Library is the driver's library as the dynamic loader is asked for it:
// the name the NVIDIA driver installs, found through LD_LIBRARY_PATH, then
// the loader's cache and its default directories (ld.so(8)).
const Library = "libcuda.so.1"

// Driver describes the driver loaded.
type Driver struct {
	Path     string // the file the dynamic loader loaded
	Version  int    // the CUDA version it supports (cuDriverGetVersion: 12040 for 12.4), or 0 where it did not say
	Resolver string // how its calls were found: "cuGetProcAddress_v2", "cuGetProcAddress" or "dlsym"
}

// String names the driver by its CUDA version and its file.
func (d Driver) String() string {
	return fmt.Sprintf("CUDA %s at %s", versionString(d.Version), d.Path)
}

// versionString writes a CUDA version as 12.4, or "of unknown version".
func versionString(v int) string {
	if v <= 0 {
		return "of unknown version"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// LoadError is why the driver cannot be used: its library does not load,
// or lacks a call memtrack cannot do without.
type LoadError struct {
	Library string         // the library asked for (Library)
	Driver  Driver         // the library loaded, where it loaded
	Reason  string         // the dynamic loader's message, where it did not load
	Missing []MissingError // the essential calls it lacks, where it loaded
}

func (e *LoadError) Error() string {
	if e.Driver.Path == "" {
		return fmt.Sprintf("the CUDA driver's library %s did not load (searched LD_LIBRARY_PATH=%q, then the system's library path): %s",
			e.Library, os.Getenv("LD_LIBRARY_PATH"), e.Reason)
	}
	calls := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		calls[i] = m.reason()
	}
	return fmt.Sprintf("the CUDA driver (%v) lacks calls that memtrack needs: %s", e.Driver, strings.Join(calls, "; "))
}

// MissingError is a call that the driver loaded does not have.
type MissingError struct {
	Call    string // the call's base name, such as "cuMemAllocAsync"
	Version int    // the CUDA version of the signature memtrack declares
	Driver  Driver
	Why     string // what the driver or the dynamic loader answered
	// Essential is true for a call without which the backend is
	// unavailable, false for one that a feature needs.
	Essential bool
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("the CUDA driver (%v) has no %s", e.Driver, e.reason())
}

func (e *MissingError) reason() string {
	return fmt.Sprintf("%s of CUDA %s (%s)", e.Call, versionString(e.Version), e.Why)
}

// load is the driver loaded once per process: the library, the table of
// calls, and the optional calls it lacks.
var load struct {
	once    sync.Once
	driver  Driver
	err     error
	missing map[string]*MissingError
	table   []Entry
}

// Entry is a call of the driver table (driver.h) as [Load] resolved it.
type Entry struct {
	Name      string // the base name, such as "cuMemAlloc"
	Suffix    string // the ending of the versioned name the library exports, such as "_v2", or ""
	Version   int    // the CUDA version of the signature memtrack declares, which it asks the driver for
	Essential bool   // without it the driver is unusable ([LoadError]); otherwise a feature is off
	// Missing says why the driver has no such call, or is nil where the
	// call resolved.
	Missing *MissingError
}

// Table returns every call of the driver table, in the table's order, as
// Load resolved them: what memtrack asks each driver for, and what the
// driver loaded answered. It is nil where the library did not load.
func Table() []Entry {
	Load()
	return load.table
}

// Load opens the driver's library and fills the table of calls, once per
// process; later calls return what the first found. Where the library does
// not load, or lacks an essential call, the error is a *LoadError, and no
// other function of the package may be called. An optional call the driver
// lacks turns off what needs it (MemPools, UUIDs).
func Load() (Driver, error) {
	load.once.Do(func() {
		name := C.CString(Library)
		defer C.free(unsafe.Pointer(name))
		var d C.memtrack_driver
		if C.memtrack_cuda_open(name, &d) == 0 {
			load.err = &LoadError{Library: Library, Reason: C.GoString(&d.error[0])}
			return
		}
		load.driver = Driver{Path: C.GoString(&d.path[0]), Version: int(d.version), Resolver: resolverNames[d.resolver]}
		var n C.int
		entries := C.memtrack_cuda_table(&n)
		load.missing = make(map[string]*MissingError)
		var essential []MissingError
		missing := make(map[string]*MissingError)
		for _, m := range Fill(unsafe.Pointer(entries), int(n)) {
			missing[m.Call] = &m
			if m.Essential {
				essential = append(essential, m)
			} else {
				load.missing[m.Call] = &m
			}
		}
		for _, e := range unsafe.Slice(entries, int(n)) {
			name := C.GoString(e.name)
			load.table = append(load.table, Entry{
				Name: name, Suffix: C.GoString(e.suffix), Version: int(e.version),
				Essential: e.need == C.MEMTRACK_ESSENTIAL, Missing: missing[name],
			})
		}
		if len(essential) > 0 {
			load.err = &LoadError{Library: Library, Driver: load.driver, Missing: essential}
		}
	})
	return load.driver, load.err
}

var resolverNames = map[C.int]string{
	C.MEMTRACK_BY_DLSYM:   "dlsym",
	C.MEMTRACK_BY_PROC:    "cuGetProcAddress",
	C.MEMTRACK_BY_PROC_V2: "cuGetProcAddress_v2",
}

// Fill resolves each call of a table of driver calls (driver.h): entries
// points to n memtrack_cuda_entry, made by MEMTRACK_CUDA_ENTRY from a list
// such as MEMTRACK_CUDA_CALLS; each entry's slot gets its entry point, or
// NULL where the driver lacks it. Load fills the package's own table with
// it; internal/cudatest fills its own after Load succeeded.
func Fill(entries unsafe.Pointer, n int) []MissingError {
	var missing []MissingError
	for _, e := range unsafe.Slice((*C.struct_memtrack_cuda_entry)(entries), n) {
		l := C.memtrack_cuda_lookup(e.name, e.suffix, e.version)
		*e.slot = l.fn
		if l.outcome != C.MEMTRACK_FOUND {
			missing = append(missing, MissingError{
				Call: C.GoString(e.name), Version: int(e.version), Driver: load.driver,
				Why: lookupWhy(l, int(e.version)), Essential: e.need == C.MEMTRACK_ESSENTIAL,
			})
		}
	}
	return missing
}

// lookupWhy says why a lookup found nothing.
func lookupWhy(l C.memtrack_lookup, version int) string {
	switch l.outcome {
	case C.MEMTRACK_NEWER:
		return fmt.Sprintf("it needs a driver of CUDA %s or later", versionString(version))
	case C.MEMTRACK_PROC_RESULT:
		name := Name(Result(l.result))
		if name == "" {
			name = "CUresult"
		}
		return fmt.Sprintf("cuGetProcAddress answered %s (%d)", name, int(l.result))
	case C.MEMTRACK_PROC_STATUS:
		switch l.status {
		case 1:
			return "cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND"
		case 2:
			return "cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT"
		}
		return fmt.Sprintf("cuGetProcAddress_v2 found none (symbolStatus %d)", int(l.status))
	case C.MEMTRACK_PROC_NULL:
		return "cuGetProcAddress found none"
	}
	return "dlsym: " + C.GoString(&l.dlerror[0])
}

// missingCall returns the *MissingError of the first of calls the driver
// lacks, or nil.
func missingCall(calls ...string) error {
	for _, c := range calls {
		if m := load.missing[c]; m != nil {
			return m
		}
	}
	return nil
}

// MemPools fails, with a *MissingError, where the driver lacks a call of
// stream-ordered allocation and its memory pools (CUDA 11.2):
// AllocAsync, FreeAsync, MemPool, PoolGet, PoolResetHighs,
// PoolSetReleaseThreshold and PoolTrimTo then answer
// CUDA_ERROR_NOT_SUPPORTED.
func MemPools() error {
	return missingCall("cuMemAllocAsync", "cuMemFreeAsync", "cuDeviceGetMemPool",
		"cuMemPoolGetAttribute", "cuMemPoolSetAttribute", "cuMemPoolTrimTo")
}

// UUIDs fails, with a *MissingError, where the driver lacks
// cuDeviceGetUuid_v2 (CUDA 11.4): DeviceInfo then gives no UUID.
func UUIDs() error { return missingCall("cuDeviceGetUuid") }
