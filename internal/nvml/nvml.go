//go:build cuda

package nvml

import (
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// LibraryName is the library go-nvml loads.
const LibraryName = "libnvidia-ml.so.1"

// ErrUnavailable is matched by the error of [Open] where NVML cannot be
// used at all: the library is missing or does not initialise.
var ErrUnavailable = errors.New("NVML is unavailable")

// ErrValueNotAvailable is matched by the error of [Lib.Processes] where
// NVML lists the processes but gives no memory for them
// (NVML_VALUE_NOT_AVAILABLE, as under Windows WDDM).
var ErrValueNotAvailable = errors.New("NVML reports no per-process memory (NVML_VALUE_NOT_AVAILABLE)")

// Error is a failed NVML call: the function and its nvmlReturn_t.
type Error struct {
	Op   string        // the NVML function, as nvml.h names it
	Code gonvml.Return // its result
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (nvmlReturn_t %d)", e.Op, gonvml.ErrorString(e.Code), int32(e.Code))
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
	n gonvml.Interface

	mu      sync.Mutex
	handles map[string]gonvml.Device // by UUID
	closed  bool
}

// Open loads NVML and initialises it (nvmlInit_v2). Where it cannot, the
// error matches [ErrUnavailable] and says why: the loader's message where
// the library is missing, the [*Error] of the initialisation otherwise.
func Open() (*Lib, error) {
	return New(gonvml.New())
}

// New initialises NVML through n, go-nvml's interface to it (the loaded
// library, or a mock).
func New(n gonvml.Interface) (*Lib, error) {
	if r := n.Init(); r != gonvml.SUCCESS {
		if r == gonvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, loadError())
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, &Error{Op: "nvmlInit_v2", Code: r})
	}
	return &Lib{n: n, handles: make(map[string]gonvml.Device)}, nil
}

// loadError asks the loader why the library does not load, as go-nvml
// does not say.
func loadError() string {
	lib := dl.New(LibraryName, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := lib.Open(); err != nil {
		return err.Error()
	}
	lib.Close()
	return LibraryName + " loads, but go-nvml could not open it"
}

// Close shuts NVML down (nvmlShutdown), once; later calls do nothing.
func (l *Lib) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if r := l.n.Shutdown(); r != gonvml.SUCCESS {
		return &Error{Op: "nvmlShutdown", Code: r}
	}
	return nil
}

// handle returns the device (or MIG device) handle of uuid, looked up once.
func (l *Lib) handle(uuid string) (gonvml.Device, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, &Error{Op: "nvmlDeviceGetHandleByUUID", Code: gonvml.ERROR_UNINITIALIZED}
	}
	if h, ok := l.handles[uuid]; ok {
		return h, nil
	}
	h, r := l.n.DeviceGetHandleByUUID(uuid)
	if r != gonvml.SUCCESS {
		return nil, &Error{Op: "nvmlDeviceGetHandleByUUID", Code: r}
	}
	l.handles[uuid] = h
	return h, nil
}

// Processes returns the compute processes on the device of uuid ("GPU-…"
// or "MIG-…", as nvidia-smi -L prints it), as NVML lists them now, in its
// order. Where NVML gives no memory for some process, the list is returned
// with an error matching [ErrValueNotAvailable].
func (l *Lib) Processes(uuid string) ([]Process, error) {
	h, err := l.handle(uuid)
	if err != nil {
		return nil, err
	}
	infos, r := h.GetComputeRunningProcesses()
	if r != gonvml.SUCCESS {
		return nil, &Error{Op: "nvmlDeviceGetComputeRunningProcesses_v3", Code: r}
	}
	out := make([]Process, len(infos))
	err = nil
	for i, p := range infos {
		out[i] = Process{PID: int(p.Pid), Used: p.UsedGpuMemory, UsedKnown: p.UsedGpuMemory != notAvailable}
		if !out[i].UsedKnown {
			err = ErrValueNotAvailable
		}
		if name, r := l.n.SystemGetProcessName(int(p.Pid)); r == gonvml.SUCCESS {
			out[i].Name = name
		}
	}
	return out, err
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE, (-1), as an unsigned long long.
const notAvailable = ^uint64(0)
