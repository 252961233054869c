//go:build rocm

package hipdrv

// Loading the runtime at run time (loader.c): no AMD header to build, no
// libamdhip64 to start. The library links only the dynamic loader's calls.

// #cgo LDFLAGS: -ldl
// #include "loader.h"
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// Libraries are the names the dynamic loader is asked for, in order: the
// major-versioned names ROCm 7, 6 and 5 install, then the development
// link's name. Each is found through LD_LIBRARY_PATH, then the loader's
// cache and its default directories (ld.so(8)).
var Libraries = [...]string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}

// Runtime describes the HIP runtime loaded.
type Runtime struct {
	Library string // the name it was loaded by, one of Libraries
	Path    string // the file the dynamic loader loaded
	// Version is hipRuntimeGetVersion's answer, in hip_version.h's
	// encoding (major*10000000 + minor*100000 + patch: 50221153 for
	// 5.2.21153), or 0 where the runtime did not say.
	Version int
	// Resolver is how its calls were found: "hipGetProcAddress" (ROCm 6.2
	// and later) or "dlsym".
	Resolver string
	// ResolverNote says why a runtime that has hipGetProcAddress had its
	// calls found by dlsym (hipGetProcAddress initialises the runtime, and
	// fails as hipInit does where it cannot), or "".
	ResolverNote string
}

// API returns the runtime's version as hipGetProcAddress and the table of
// calls write it, 100*major + minor (502 for 5.2), or 0 where unknown.
func (r Runtime) API() int { return apiVersion(r.Version) }

func apiVersion(v int) int {
	if v <= 0 {
		return 0
	}
	return v/10000000*100 + v/100000%100
}

// String names the runtime by its version and its file.
func (r Runtime) String() string {
	if r.Version <= 0 {
		return "HIP of unknown version at " + r.Path
	}
	return fmt.Sprintf("HIP %d.%d.%d at %s", r.Version/10000000, r.Version/100000%100, r.Version%100000, r.Path)
}

// apiString writes a table version (502) as 5.2.
func apiString(v int) string { return fmt.Sprintf("%d.%d", v/100, v%100) }

// Attempt is one library name the dynamic loader was asked for, and why it
// did not load it.
type Attempt struct {
	Name   string
	Reason string // dlerror's message
}

// LoadError is why the runtime cannot be used: no library loads, or the
// one that loads lacks a call memtrack cannot do without.
type LoadError struct {
	Tried   []Attempt      // where no library loaded: each name, with the loader's reason
	Runtime Runtime        // the library loaded, where one loaded
	Missing []MissingError // the essential calls it lacks, where one loaded
}

func (e *LoadError) Error() string {
	if e.Runtime.Path == "" {
		reasons := make([]string, len(e.Tried))
		for i, a := range e.Tried {
			reasons[i] = a.Reason
		}
		return fmt.Sprintf("the HIP runtime did not load (searched LD_LIBRARY_PATH=%q, then the system's library path): %s",
			os.Getenv("LD_LIBRARY_PATH"), strings.Join(reasons, "; "))
	}
	calls := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		calls[i] = m.reason()
	}
	return fmt.Sprintf("the HIP runtime (%v) lacks calls that memtrack needs: %s", e.Runtime, strings.Join(calls, "; "))
}

// MissingError is a call that the runtime loaded does not have.
type MissingError struct {
	Call string // the call, such as "hipMallocAsync"
	// Version is the first ROCm release that exports the call, as
	// 100*major + minor (502 for 5.2).
	Version int
	Runtime Runtime
	Why     string // what hipGetProcAddress or the dynamic loader answered
	// Essential is true for a call without which the backend is
	// unavailable, false for one that a feature needs.
	Essential bool
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("the HIP runtime (%v) has no %s", e.Runtime, e.reason())
}

func (e *MissingError) reason() string {
	return fmt.Sprintf("%s of ROCm %s (%s)", e.Call, apiString(e.Version), e.Why)
}

// load is the runtime loaded once per process: the library, the table of
// calls, and the optional calls it lacks.
var load struct {
	once    sync.Once
	runtime Runtime
	err     error
	missing map[string]*MissingError
}

// Load opens the runtime's library and fills the table of calls, once per
// process; later calls return what the first found. Where no library
// loads, or the one that loads lacks an essential call, the error is a
// *LoadError, and no other function of the package may be called. An
// optional call the runtime lacks turns off what needs it (MemPools,
// UUIDs, GraphMem, Captures, StreamDevices).
func Load() (Runtime, error) {
	load.once.Do(func() {
		var rt C.memtrack_hip_runtime
		if C.memtrack_hip_open(&rt) == 0 {
			e := &LoadError{}
			for i, name := range Libraries {
				e.Tried = append(e.Tried, Attempt{Name: name, Reason: C.GoString(&rt.tried[i][0])})
			}
			load.err = e
			return
		}
		load.runtime = Runtime{
			Library: Libraries[rt.name], Path: C.GoString(&rt.path[0]), Version: int(rt.version), Resolver: "dlsym",
		}
		switch {
		case rt.resolver == C.MEMTRACK_HIP_BY_PROC:
			load.runtime.Resolver = "hipGetProcAddress"
		case rt.proc_result != 0:
			load.runtime.ResolverNote = fmt.Sprintf("hipGetProcAddress answered %s", describe(Result(rt.proc_result)))
		case rt.proc_present != 0 && load.runtime.API() < 602:
			load.runtime.ResolverNote = fmt.Sprintf("the runtime exports hipGetProcAddress but reports HIP %s, before ROCm 6.2",
				apiString(load.runtime.API()))
		}
		var n C.int
		entries := C.memtrack_hip_table(&n)
		load.missing = make(map[string]*MissingError)
		var essential []MissingError
		for _, m := range Fill(unsafe.Pointer(entries), int(n)) {
			if m.Essential {
				essential = append(essential, m)
			} else {
				load.missing[m.Call] = &m
			}
		}
		if len(essential) > 0 {
			load.err = &LoadError{Runtime: load.runtime, Missing: essential}
		}
	})
	return load.runtime, load.err
}

// Fill resolves each call of a table of runtime calls (runtime.h): entries
// points to n memtrack_hip_entry, made by MEMTRACK_HIP_ENTRY from a list
// such as MEMTRACK_HIP_CALLS; each entry's slot gets its entry point, or
// NULL where the runtime lacks it. Load fills the package's own table with
// it; internal/hiptest fills its own after Load succeeded.
func Fill(entries unsafe.Pointer, n int) []MissingError {
	var missing []MissingError
	for _, e := range unsafe.Slice((*C.struct_memtrack_hip_entry)(entries), n) {
		l := C.memtrack_hip_find(e.name, e.version)
		*e.slot = l.fn
		if l.outcome != C.MEMTRACK_HIP_FOUND {
			missing = append(missing, MissingError{
				Call: C.GoString(e.name), Version: int(e.version), Runtime: load.runtime,
				Why: lookupWhy(l), Essential: e.need == C.MEMTRACK_HIP_ESSENTIAL,
			})
		}
	}
	return missing
}

// lookupWhy says why a lookup found nothing.
func lookupWhy(l C.memtrack_hip_lookup) string {
	switch l.outcome {
	case C.MEMTRACK_HIP_PROC_STATUS:
		switch l.status {
		case C.HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND:
			return fmt.Sprintf("hipGetProcAddress answered %s: HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND", describe(Result(l.result)))
		case C.HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
			return fmt.Sprintf("hipGetProcAddress answered %s: HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT", describe(Result(l.result)))
		}
		return fmt.Sprintf("hipGetProcAddress answered %s (symbolStatus %d)", describe(Result(l.result)), int(l.status))
	case C.MEMTRACK_HIP_PROC_NULL:
		return "hipGetProcAddress found none"
	}
	return "dlsym: " + C.GoString(&l.dlerror[0])
}

// describe writes a result as its name and number: hipErrorNoDevice (100).
func describe(r Result) string {
	name := Name(r)
	if name == "" {
		name = "hipError_t"
	}
	return fmt.Sprintf("%s (%d)", name, int(r))
}

// missingCall returns the *MissingError of the first of calls the runtime
// lacks, or nil.
func missingCall(calls ...string) error {
	for _, c := range calls {
		if m := load.missing[c]; m != nil {
			return m
		}
	}
	return nil
}

// MemPools fails, with a *MissingError, where the runtime lacks a call of
// stream-ordered allocation and its memory pools (ROCm 5.2): AllocAsync,
// FreeAsync, MemPool, PoolGet, PoolResetHighs, PoolSetReleaseThreshold
// and PoolTrimTo then answer hipErrorNotSupported.
func MemPools() error {
	return missingCall("hipMallocAsync", "hipFreeAsync", "hipDeviceGetMemPool",
		"hipMemPoolGetAttribute", "hipMemPoolSetAttribute", "hipMemPoolTrimTo")
}

// UUIDs fails, with a *MissingError, where the runtime lacks
// hipDeviceGetUuid (ROCm 5.2): DeviceInfo then gives no UUID, and the PCI
// bus ID alone identifies the device.
func UUIDs() error { return missingCall("hipDeviceGetUuid") }

// GraphMem fails, with a *MissingError, where the runtime lacks a call of
// graph memory (ROCm 5.3): GraphGet, GraphResetHighs and GraphTrim then
// answer hipErrorNotSupported.
func GraphMem() error {
	return missingCall("hipDeviceGetGraphMemAttribute", "hipDeviceSetGraphMemAttribute", "hipDeviceGraphMemTrim")
}

// Captures fails, with a *MissingError, where the runtime lacks
// hipStreamGetCaptureInfo (ROCm 5.1): a stream's capture is then asked with
// hipStreamIsCapturing (ROCm 4.3), which gives no capture ID, and where
// that is missing too, not asked at all (a capturing stream is then not
// told apart).
func Captures() error { return missingCall("hipStreamGetCaptureInfo") }

// StreamDevices fails, with a *MissingError, where the runtime lacks
// hipStreamGetDevice (ROCm 5.6): a stream of another device than the one an
// operation names is then not told apart, and the operation runs with the
// named device current.
func StreamDevices() error { return missingCall("hipStreamGetDevice") }

// CallInfo is one runtime call of the package's table.
type CallInfo struct {
	Name string
	// Version is the first ROCm release that exports the call, as
	// 100*major + minor.
	Version   int
	Essential bool
	Found     bool // the runtime loaded has it (after Load)
}

// Calls returns the runtime calls the package makes, in the table's order,
// each with the release it came in and whether the runtime loaded has it:
// what a diagnosis of a runtime prints, and what the checks against AMD's
// own libraries compare with the release each call came in. Before Load,
// or where no library loaded, no call is found.
func Calls() []CallInfo {
	var n C.int
	entries := unsafe.Slice(C.memtrack_hip_table(&n), int(n))
	out := make([]CallInfo, len(entries))
	for i, e := range entries {
		out[i] = CallInfo{
			Name: C.GoString(e.name), Version: int(e.version), Essential: e.need == C.MEMTRACK_HIP_ESSENTIAL,
			Found: *e.slot != nil,
		}
	}
	return out
}
