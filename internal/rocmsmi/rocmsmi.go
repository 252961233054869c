//go:build rocm

package rocmsmi

/*
#cgo LDFLAGS: -ldl
#include "library.h"

// cgo calls no function pointer: these call the library's.
static rsmi_status_t rsmi_init_(void) { return memtrack_rsmi.rsmi_init(0); }
static rsmi_status_t rsmi_shut_down_(void) { return memtrack_rsmi.rsmi_shut_down(); }
static const char *rsmi_text(rsmi_status_t s) {
	const char *t = NULL;
	if (memtrack_rsmi.rsmi_status_string(s, &t) != RSMI_STATUS_SUCCESS) t = NULL;
	return t;
}
static rsmi_status_t rsmi_version(rsmi_version_t *v) { return memtrack_rsmi.rsmi_version_get(v); }
static rsmi_status_t rsmi_devices(uint32_t *n) { return memtrack_rsmi.rsmi_num_monitor_devices(n); }
static rsmi_status_t rsmi_pci(uint32_t dv, uint64_t *bdf) { return memtrack_rsmi.rsmi_dev_pci_id_get(dv, bdf); }
static rsmi_status_t rsmi_list(rsmi_process_info_t *p, uint32_t *n) { return memtrack_rsmi.rsmi_compute_process_info_get(p, n); }
static rsmi_status_t rsmi_by_pid(uint32_t pid, rsmi_process_info_t *p) { return memtrack_rsmi.rsmi_compute_process_info_by_pid_get(pid, p); }
static rsmi_status_t rsmi_gpus(uint32_t pid, uint32_t *dv, uint32_t *n) { return memtrack_rsmi.rsmi_compute_process_gpus_get(pid, dv, n); }
static int rsmi_has_by_device(void) { return memtrack_rsmi.rsmi_compute_process_info_by_device_get != NULL; }
static rsmi_status_t rsmi_by_device(uint32_t pid, uint32_t dv, rsmi_process_info_t *p) {
	return memtrack_rsmi.rsmi_compute_process_info_by_device_get(pid, dv, p);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// Libraries are the names the dynamic loader is asked for, in order: the
// major-versioned names of AMD's ROCm releases (7, 6, 5), Debian's (1),
// then the development link's name.
var Libraries = [...]string{"librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5", "librocm_smi64.so.1", "librocm_smi64.so"}

// ErrUnavailable is matched by the error of [Open] where rocm_smi cannot
// be used at all: no library loads, the one that loads lacks a call, or it
// does not initialise (a machine without an AMD GPU, or without the amdgpu
// driver).
var ErrUnavailable = errors.New("the ROCm SMI library is unavailable")

// ErrNoDevice is matched by the error of [Lib.Usage] where rocm_smi has no
// device at the PCI address asked.
var ErrNoDevice = errors.New("the ROCm SMI library has no device at that PCI address")

// Status is an rsmi_status_t, the status of a rocm_smi call.
type Status int

// The statuses the package tells apart (rocm_smi.h's values).
const (
	Success          Status = C.RSMI_STATUS_SUCCESS
	InitError        Status = C.RSMI_STATUS_INIT_ERROR
	NotFound         Status = C.RSMI_STATUS_NOT_FOUND
	InsufficientSize Status = C.RSMI_STATUS_INSUFFICIENT_SIZE
)

// Error is a failed rocm_smi call: the function and its status.
type Error struct {
	Op   string // the rocm_smi function
	Code Status
	text string // rsmi_status_string's description of Code
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (rsmi_status_t %d)", e.Op, e.text, int(e.Code))
}

func callError(op string, s C.rsmi_status_t) *Error {
	text := "no description"
	if t := C.rsmi_text(s); t != nil {
		text = C.GoString(t)
	}
	return &Error{Op: op, Code: Status(s), text: text}
}

// Library describes the rocm_smi library loaded.
type Library struct {
	Name    string // the name it was loaded by, one of Libraries
	Path    string // the file the dynamic loader loaded
	Version string // rsmi_version_get's major.minor.patch, the library's own version
	// PerDevice is true where the library has
	// rsmi_compute_process_info_by_device_get (ROCm 5.7): a process's
	// memory on each device. Without it, a process's figure is known on a
	// device only where the process uses that device alone (Process).
	PerDevice bool
}

// Process is one compute process on a device, as rocm_smi lists it.
type Process struct {
	PID int // the process's ID as the kernel knows it (the host's)
	// Name is the process's name (/proc/PID/comm), or "" where this
	// process may not read it, or the process exited after the list was
	// read.
	Name string
	// Used is the device memory (VRAM) the kernel attributes to the
	// process on the device, valid where UsedKnown: rocm_smi without
	// PerDevice gives only a process's sum over its devices, which is the
	// device's figure only where the process uses that device alone.
	Used      uint64
	UsedKnown bool
}

// Usage is what rocm_smi says of a device's compute processes.
type Usage struct {
	Processes []Process // every compute process on the device, this one included, in rocm_smi's order
	// Self is this process's entry (os.Getpid), where SelfFound. In a
	// container with a PID namespace of its own, the kernel's PIDs are the
	// host's, and the process is not found under its own.
	Self      Process
	SelfFound bool
}

// library is rocm_smi's library, opened once per process.
var library struct {
	once sync.Once
	lib  Library
	err  error
}

// Lib is an initialised rocm_smi. Its methods may be called from any
// goroutine.
type Lib struct {
	mu      sync.Mutex
	devices map[[4]uint32]uint32 // rocm_smi's device index, by PCI domain, bus, device, function
	closed  bool
}

// Open loads rocm_smi (once per process) and initialises it (rsmi_init).
// Where it cannot, the error matches [ErrUnavailable] and says why: each
// library name with the dynamic loader's reason where none loads, the call
// missing where one lacks it, the [*Error] of the initialisation otherwise.
func Open() (*Lib, error) {
	library.once.Do(func() {
		var o C.memtrack_rsmi_opened
		C.memtrack_rsmi_open(&o)
		if o.name < 0 {
			reasons := make([]string, len(Libraries))
			for i := range Libraries {
				reasons[i] = C.GoString(&o.tried[i][0])
			}
			library.err = fmt.Errorf("%w: no library loaded (searched LD_LIBRARY_PATH=%q, then the system's library path): %s",
				ErrUnavailable, os.Getenv("LD_LIBRARY_PATH"), strings.Join(reasons, "; "))
			return
		}
		library.lib = Library{Name: Libraries[o.name], Path: C.GoString(&o.path[0])}
		if o.loaded == 0 {
			library.err = fmt.Errorf("%w: %s at %s has no %s: %s", ErrUnavailable, library.lib.Name, library.lib.Path,
				C.GoString(&o.missing[0]), C.GoString(&o.why[0]))
			return
		}
		library.lib.PerDevice = C.rsmi_has_by_device() != 0
		var v C.rsmi_version_t
		if C.rsmi_version(&v) == C.RSMI_STATUS_SUCCESS {
			library.lib.Version = fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
		}
	})
	if library.err != nil {
		return nil, library.err
	}
	if s := C.rsmi_init_(); s != C.RSMI_STATUS_SUCCESS {
		return nil, fmt.Errorf("%w: %s at %s: %w", ErrUnavailable, library.lib.Name, library.lib.Path, callError("rsmi_init", s))
	}
	return &Lib{devices: make(map[[4]uint32]uint32)}, nil
}

// Library returns the library loaded.
func (l *Lib) Library() Library { return library.lib }

// Close shuts rocm_smi down (rsmi_shut_down), once; later calls do nothing.
func (l *Lib) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if s := C.rsmi_shut_down_(); s != C.RSMI_STATUS_SUCCESS {
		return callError("rsmi_shut_down", s)
	}
	return nil
}

// Reader reads the compute processes on devices through a rocm_smi that it
// opens on its first reading and keeps for the life of the process: the
// library is never opened on an allocation path, only where per-process
// figures are read. The zero Reader is ready to use.
type Reader struct {
	once sync.Once
	lib  *Lib
	err  error
}

// Usage returns [Lib.Usage] of the device at PCI address busID, opening
// rocm_smi first where it is the first reading; the error of [Open] where
// rocm_smi cannot be used, and on every reading after.
func (r *Reader) Usage(busID string) (Usage, error) {
	if err := r.open(); err != nil {
		return Usage{}, err
	}
	u, err := r.lib.Usage(busID)
	if err != nil {
		return Usage{}, fmt.Errorf("rocm_smi on %s: %w", busID, err)
	}
	return u, nil
}

// open opens rocm_smi, once.
func (r *Reader) open() error {
	r.once.Do(func() { r.lib, r.err = Open() })
	return r.err
}

// Library returns the library loaded (opening it, as Usage does, where no
// reading did yet), or the zero Library where none loads.
func (r *Reader) Library() Library {
	r.open()
	return library.lib
}

// ParseBusID parses a PCI address as the HIP runtime writes it
// (hipDeviceGetPCIBusId: domain:bus:device.function, hexadecimal, as
// "0000:c1:00.0"), or without its domain (bus:device.function, domain 0).
func ParseBusID(id string) ([4]uint32, error) {
	var a [4]uint32
	f := strings.FieldsFunc(id, func(r rune) bool { return r == ':' || r == '.' })
	if len(f) == 3 {
		f = append([]string{"0"}, f...)
	}
	if len(f) != 4 {
		return a, fmt.Errorf("the PCI address %q is not domain:bus:device.function", id)
	}
	limits := [4]uint64{0xffffffff, 0xff, 0x1f, 0x7}
	for i, s := range f {
		var v uint64
		if _, err := fmt.Sscanf(s, "%x", &v); err != nil || v > limits[i] || len(s) == 0 {
			return a, fmt.Errorf("the PCI address %q is not domain:bus:device.function", id)
		}
		a[i] = uint32(v)
	}
	return a, nil
}

// fromBDFID splits rsmi_dev_pci_id_get's identifier: "BDFID = ((DOMAIN &
// 0xffffffff) << 32) | ((BUS & 0xff) << 8) | ((DEVICE & 0x1f) <<3 ) |
// (FUNCTION & 0x7)".
func fromBDFID(b uint64) [4]uint32 {
	return [4]uint32{uint32(b >> 32), uint32(b>>8) & 0xff, uint32(b>>3) & 0x1f, uint32(b) & 0x7}
}

// device returns rocm_smi's index of the device at PCI address addr,
// found once; l.mu is held.
func (l *Lib) device(addr [4]uint32) (uint32, error) {
	if dv, ok := l.devices[addr]; ok {
		return dv, nil
	}
	var n C.uint32_t
	if s := C.rsmi_devices(&n); s != C.RSMI_STATUS_SUCCESS {
		return 0, callError("rsmi_num_monitor_devices", s)
	}
	for dv := range uint32(n) {
		var b C.uint64_t
		if s := C.rsmi_pci(C.uint32_t(dv), &b); s != C.RSMI_STATUS_SUCCESS {
			return 0, callError("rsmi_dev_pci_id_get", s)
		}
		l.devices[fromBDFID(uint64(b))] = dv
	}
	if dv, ok := l.devices[addr]; ok {
		return dv, nil
	}
	return 0, fmt.Errorf("%w: %04x:%02x:%02x.%x among %d device(s)", ErrNoDevice, addr[0], addr[1], addr[2], addr[3], int(n))
}

// Usage returns the compute processes on the device at PCI address busID
// (as hipDeviceGetPCIBusId gives it), each with the memory the kernel
// attributes to it there where rocm_smi can say, and this process's entry.
// The list is read at every call: processes come and go.
func (l *Lib) Usage(busID string) (Usage, error) {
	addr, err := ParseBusID(busID)
	if err != nil {
		return Usage{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Usage{}, callError("rsmi_compute_process_info_get", C.RSMI_STATUS_INIT_ERROR)
	}
	dv, err := l.device(addr)
	if err != nil {
		return Usage{}, err
	}
	pids, err := processes()
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	self := os.Getpid()
	for _, pid := range pids {
		p, on, err := onDevice(pid, dv)
		if err != nil {
			return Usage{}, err
		}
		if !on {
			continue
		}
		p.Name = processName(p.PID)
		u.Processes = append(u.Processes, p)
		if p.PID == self {
			u.Self, u.SelfFound = p, true
		}
	}
	return u, nil
}

// processes reads the list of compute processes (rsmi_compute_process_info_get):
// its length first ("Calling this function with procs being NULL is a
// way to determine how much memory should be allocated"), then the list,
// again with more room while the library answers
// RSMI_STATUS_INSUFFICIENT_SIZE ("there were more processes for which
// information was available, but not enough space was provided"): the
// list changes as processes come and go. Only the PIDs are taken from it:
// which other fields the list fills, the reference does not say (AMD's
// library of ROCm 5.2 leaves vram_usage 0 there).
func processes() ([]uint32, error) {
	var n C.uint32_t
	if s := C.rsmi_list(nil, &n); s != C.RSMI_STATUS_SUCCESS {
		return nil, callError("rsmi_compute_process_info_get", s)
	}
	size := int(n) + 4
	for {
		infos := make([]C.rsmi_process_info_t, size)
		n = C.uint32_t(size)
		s := C.rsmi_list(&infos[0], &n)
		switch s {
		case C.RSMI_STATUS_SUCCESS:
			pids := make([]uint32, min(int(n), size))
			for i := range pids {
				pids[i] = uint32(infos[i].process_id)
			}
			return pids, nil
		case C.RSMI_STATUS_INSUFFICIENT_SIZE:
			size *= 2
		default:
			return nil, callError("rsmi_compute_process_info_get", s)
		}
	}
}

// onDevice returns what rocm_smi says of process pid on device dv, and
// whether the process is on it: rsmi_compute_process_info_by_device_get
// where the library has it; otherwise the devices the process uses
// (rsmi_compute_process_gpus_get) and, where that is dv alone, its figure
// (rsmi_compute_process_info_by_pid_get, whose VRAM is the sum over those
// devices). A process that exited meanwhile (RSMI_STATUS_NOT_FOUND) is on
// no device.
func onDevice(pid uint32, dv uint32) (Process, bool, error) {
	p := Process{PID: int(pid)}
	var info C.rsmi_process_info_t
	if C.rsmi_has_by_device() != 0 {
		switch s := C.rsmi_by_device(C.uint32_t(pid), C.uint32_t(dv), &info); s {
		case C.RSMI_STATUS_SUCCESS:
			p.Used, p.UsedKnown = uint64(info.vram_usage), true
			return p, true, nil
		case C.RSMI_STATUS_NOT_FOUND:
			return p, false, nil
		default:
			return p, false, callError("rsmi_compute_process_info_by_device_get", s)
		}
	}
	gpus, s := processGPUs(pid)
	if s == C.RSMI_STATUS_NOT_FOUND || (s == C.RSMI_STATUS_SUCCESS && !slices.Contains(gpus, dv)) {
		return p, false, nil
	}
	if s != C.RSMI_STATUS_SUCCESS {
		return p, false, callError("rsmi_compute_process_gpus_get", s)
	}
	if len(gpus) > 1 {
		return p, true, nil
	}
	switch s := C.rsmi_by_pid(C.uint32_t(pid), &info); s {
	case C.RSMI_STATUS_SUCCESS:
		p.Used, p.UsedKnown = uint64(info.vram_usage), true
		return p, true, nil
	case C.RSMI_STATUS_NOT_FOUND:
		return p, false, nil
	default:
		return p, false, callError("rsmi_compute_process_info_by_pid_get", s)
	}
}

// processGPUs returns the devices process pid uses
// (rsmi_compute_process_gpus_get), read as the list is: their number first
// ("Calling this function with dv_indices being NULL is a way to determine
// how much memory is required"), then again with more room while the
// library answers RSMI_STATUS_INSUFFICIENT_SIZE.
func processGPUs(pid uint32) ([]uint32, C.rsmi_status_t) {
	var n C.uint32_t
	if s := C.rsmi_gpus(C.uint32_t(pid), nil, &n); s != C.RSMI_STATUS_SUCCESS {
		return nil, s
	}
	size := int(n) + 2
	for {
		dv := make([]C.uint32_t, size)
		n = C.uint32_t(size)
		switch s := C.rsmi_gpus(C.uint32_t(pid), &dv[0], &n); s {
		case C.RSMI_STATUS_SUCCESS:
			out := make([]uint32, min(int(n), size))
			for i := range out {
				out[i] = uint32(dv[i])
			}
			return out, s
		case C.RSMI_STATUS_INSUFFICIENT_SIZE:
			size *= 2
		default:
			return nil, s
		}
	}
}

// processName returns the name the kernel keeps for pid (/proc/PID/comm),
// or "" where it cannot be read.
func processName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
