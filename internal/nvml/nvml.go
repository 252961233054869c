//go:build cuda

package nvml

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>

#include "library.h"

// cgo calls no function pointer: these call the library's.
static nvmlReturn_t nvml_init(void) { return memtrack_nvml.nvmlInit_v2(); }
static nvmlReturn_t nvml_shutdown(void) { return memtrack_nvml.nvmlShutdown(); }
static const char *nvml_error_string(nvmlReturn_t r) { return memtrack_nvml.nvmlErrorString(r); }
static nvmlReturn_t nvml_handle(const char *uuid, nvmlDevice_t *h) { return memtrack_nvml.nvmlDeviceGetHandleByUUID(uuid, h); }
static nvmlReturn_t nvml_process_name(unsigned int pid, char *name, unsigned int len) {
	return memtrack_nvml.nvmlSystemGetProcessName(pid, name, len);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// LibraryName is the library Open loads.
const LibraryName = "libnvidia-ml.so.1"

// ErrUnavailable is matched by the error of [Open] where NVML cannot be
// used at all: the library is missing, lacks a call (or all three calls
// that list processes), or does not initialise.
var ErrUnavailable = errors.New("NVML is unavailable")

// ErrValueNotAvailable is matched by the error of [Lib.Processes] where
// NVML lists the processes but gives no memory for them
// (NVML_VALUE_NOT_AVAILABLE, as under Windows WDDM).
var ErrValueNotAvailable = errors.New("NVML reports no per-process memory (NVML_VALUE_NOT_AVAILABLE)")

// Return is an nvmlReturn_t, the status of an NVML call.
type Return int32

// The results the package tells apart (nvml.h's values).
const (
	success          Return = C.NVML_SUCCESS
	uninitialized    Return = C.NVML_ERROR_UNINITIALIZED
	insufficientSize Return = C.NVML_ERROR_INSUFFICIENT_SIZE
)

// Error is a failed NVML call: the function and its nvmlReturn_t.
type Error struct {
	Op   string // the NVML function, as nvml.h names it
	Code Return // its result
	text string // nvmlErrorString's description of Code
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (nvmlReturn_t %d)", e.Op, e.text, int32(e.Code))
}

// callError returns the *Error of op's result r, described by the library.
func callError(op string, r C.nvmlReturn_t) *Error {
	return &Error{Op: op, Code: Return(r), text: C.GoString(C.nvml_error_string(r))}
}

// Process is one process that NVML lists on a device.
type Process struct {
	PID int // the process's ID as the driver knows it (the host's)
	// Name is the process's name as nvmlSystemGetProcessName gives it, or
	// "" where NVML cannot tell (the process exited after the list was
	// read, or the caller may not see it).
	Name string
	// Used is the device memory the driver attributes to the process
	// (usedGpuMemory: "all of the memory used by the application"), valid
	// where UsedKnown.
	Used      uint64
	UsedKnown bool
}

// Lib is an initialised NVML. Its methods may be called from any
// goroutine.
type Lib struct {
	mu      sync.Mutex
	handles map[string]C.nvmlDevice_t // by UUID
	closed  bool
}

// library is NVML's library, opened once per process: the calls are the
// library's whatever Lib uses them.
var library struct {
	once sync.Once
	err  error
	// processCall is the call that lists a device's processes: the
	// newest the library has of nvmlDeviceGetComputeRunningProcesses_v3,
	// _v2 and the unversioned one.
	processCall string
}

// Open loads NVML (once per process) and initialises it (nvmlInit_v2).
// It lists processes with the newest call the library has of
// nvmlDeviceGetComputeRunningProcesses_v3, _v2 and the unversioned one
// (doc.go). Where it cannot, the error matches [ErrUnavailable] and says
// why: the dynamic loader's message where the library is missing or lacks
// a call, the three calls where it has none of them, the [*Error] of the
// initialisation otherwise.
func Open() (*Lib, error) {
	library.once.Do(func() {
		name := C.CString(LibraryName)
		defer C.free(unsafe.Pointer(name))
		var path, msg [1024]C.char
		var call *C.char
		if C.memtrack_nvml_open(name, &path[0], C.size_t(len(path)), &msg[0], C.size_t(len(msg)), &call) == 0 {
			where := LibraryName
			if p := C.GoString(&path[0]); p != "" {
				where += " at " + p
			}
			library.err = fmt.Errorf("%w: %s: %s", ErrUnavailable, where, C.GoString(&msg[0]))
			return
		}
		library.processCall = C.GoString(call)
	})
	if library.err != nil {
		return nil, library.err
	}
	if r := C.nvml_init(); r != C.NVML_SUCCESS {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, callError("nvmlInit_v2", r))
	}
	return &Lib{handles: make(map[string]C.nvmlDevice_t)}, nil
}

// Close shuts NVML down (nvmlShutdown), once; later calls do nothing.
func (l *Lib) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if r := C.nvml_shutdown(); r != C.NVML_SUCCESS {
		return callError("nvmlShutdown", r)
	}
	return nil
}

// Reader reads the processes on devices through an NVML that it opens on
// its first reading and keeps for the life of the process, as the CUDA
// backend keeps its devices' primary contexts: NVML is never opened on an
// allocation path, only where per-process figures are read. The zero
// Reader is ready to use.
type Reader struct {
	once sync.Once
	lib  *Lib
	err  error
}

// Processes returns [Lib.Processes] of the device of uuid, opening NVML
// first where it is the first reading; the error of [Open] where NVML
// cannot be used, and on every reading after.
func (r *Reader) Processes(uuid string) ([]Process, error) {
	r.once.Do(func() { r.lib, r.err = Open() })
	if r.err != nil {
		return nil, r.err
	}
	list, err := r.lib.Processes(uuid)
	if err != nil {
		return nil, fmt.Errorf("NVML on %s: %w", uuid, err)
	}
	return list, nil
}

// handle returns the device (or MIG device) handle of uuid, looked up once.
func (l *Lib) handle(uuid string) (C.nvmlDevice_t, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, callError("nvmlDeviceGetHandleByUUID", C.nvmlReturn_t(uninitialized))
	}
	if h, ok := l.handles[uuid]; ok {
		return h, nil
	}
	s := C.CString(uuid)
	defer C.free(unsafe.Pointer(s))
	var h C.nvmlDevice_t
	if r := C.nvml_handle(s, &h); r != C.NVML_SUCCESS {
		return nil, callError("nvmlDeviceGetHandleByUUID", r)
	}
	l.handles[uuid] = h
	return h, nil
}

// Processes returns the compute processes on the device of uuid ("GPU-…"
// or "MIG-…", as nvidia-smi -L prints it), as NVML lists them now, in its
// order. Where NVML gives no memory for some process, the list is returned
// with an error matching [ErrValueNotAvailable]. Where the list cannot be
// read, the [*Error] names the call that failed: the process call Open
// found, or nvmlDeviceGetHandleByUUID.
func (l *Lib) Processes(uuid string) ([]Process, error) {
	h, err := l.handle(uuid)
	if err != nil {
		return nil, err
	}
	infos, err := runningProcesses(h)
	if err != nil {
		return nil, err
	}
	out := make([]Process, len(infos))
	err = nil
	for i, p := range infos {
		out[i] = Process{PID: int(p.pid), Used: uint64(p.used), UsedKnown: uint64(p.used) != notAvailable}
		if !out[i].UsedKnown {
			err = ErrValueNotAvailable
		}
		out[i].Name = processName(p.pid)
	}
	return out, err
}

// runningProcesses reads the device's list with the process call the
// library has: its length first ("call this function with *infoCount = 0.
// The return code will be NVML_ERROR_INSUFFICIENT_SIZE, or NVML_SUCCESS if
// none are running"), then the list, again with room for what NVML reports
// while it answers NVML_ERROR_INSUFFICIENT_SIZE: "the number of elements
// might change in time". An error names the call.
func runningProcesses(h C.nvmlDevice_t) ([]C.memtrack_nvml_process, error) {
	var infos []C.memtrack_nvml_process
	for {
		n := C.uint(len(infos))
		var p *C.memtrack_nvml_process
		if len(infos) > 0 {
			p = &infos[0]
		}
		r := C.memtrack_nvml_processes(h, &n, p)
		switch Return(r) {
		case success:
			return infos[:min(int(n), len(infos))], nil
		case insufficientSize:
			infos = make([]C.memtrack_nvml_process, max(int(n), len(infos))+2)
		default:
			return nil, callError(library.processCall, r)
		}
	}
}

// processName returns nvmlSystemGetProcessName's name of pid, or "" where
// NVML cannot tell.
func processName(pid C.uint) string {
	var name [256]C.char // the name is "cropped to provided length"
	if C.nvml_process_name(pid, &name[0], C.uint(len(name))) != C.NVML_SUCCESS {
		return ""
	}
	name[len(name)-1] = 0
	return C.GoString(&name[0])
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE, (-1), as an unsigned long long.
const notAvailable = ^uint64(0)
