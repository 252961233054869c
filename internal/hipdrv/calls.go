//go:build rocm

package hipdrv

// The calls of memtrack's backend on a device: initialise, allocate, free,
// read the memory figures, name. Each operation on a device is one C
// function, so one cgo transition: it makes the device current on the
// calling thread (hipSetDevice), runs the operation and puts the thread's
// previous device back, and reports the three results apart, so that the
// operation's own result decides what the caller is told. Every runtime
// call goes through the table that Load fills (memtrack_hip), so Load must
// have succeeded first.

/*
#include <stddef.h>
#include <stdint.h>

#include "device.h"

static memtrack_hip_result memtrack_hip_alloc(int device, size_t size) {
	memtrack_hip_result res = {0};
	int prev;
	if ((res.enter = memtrack_hip_enter(device, &prev)) != hipSuccess) return res;
	hipStreamCaptureMode m = memtrack_hip_relaxed();
	res.op = memtrack_hip.hipMalloc(&res.ptr, size);
	memtrack_hip_unrelax(m);
	res.restore = memtrack_hip_leave(device, prev);
	return res;
}

static memtrack_hip_result memtrack_hip_free(int device, uintptr_t ptr) {
	memtrack_hip_result res = {0};
	int prev;
	if ((res.enter = memtrack_hip_enter(device, &prev)) != hipSuccess) return res;
	hipStreamCaptureMode m = memtrack_hip_relaxed();
	res.op = memtrack_hip.hipFree((void *)ptr);
	memtrack_hip_unrelax(m);
	res.restore = memtrack_hip_leave(device, prev);
	return res;
}

static memtrack_hip_result memtrack_hip_meminfo(int device) {
	memtrack_hip_result res = {0};
	int prev;
	if ((res.enter = memtrack_hip_enter(device, &prev)) != hipSuccess) return res;
	res.op = memtrack_hip.hipMemGetInfo(&res.free, &res.total);
	res.restore = memtrack_hip_leave(device, prev);
	return res;
}

typedef struct {
	hipError_t init, count;
	int devices;
} memtrack_hip_init_result;

// memtrack_hip_init initialises the runtime and counts its devices, asking
// both whatever the first answers: each says in its own words what is
// missing (on a machine without a GPU, AMD's runtime answers
// hipErrorInvalidDevice to the one and hipErrorNoDevice to the other).
static memtrack_hip_init_result memtrack_hip_init(void) {
	memtrack_hip_init_result res = {0, 0, 0};
	res.init = memtrack_hip.hipInit(0);
	res.count = memtrack_hip.hipGetDeviceCount(&res.devices);
	if (res.count != hipSuccess) res.devices = 0;
	return res;
}

typedef struct {
	const char *name, *text;
} memtrack_hip_names;

// memtrack_hip_error_name asks the runtime for the name and description of
// r; NULL where it cannot say, or is not loaded.
static memtrack_hip_names memtrack_hip_error_name(hipError_t r) {
	memtrack_hip_names n = {NULL, NULL};
	if (memtrack_hip.hipGetErrorName) n.name = memtrack_hip.hipGetErrorName(r);
	if (memtrack_hip.hipGetErrorString) n.text = memtrack_hip.hipGetErrorString(r);
	return n;
}

typedef struct {
	hipError_t name, uuid, bus;
	int has_uuid;
} memtrack_hip_info;

// memtrack_hip_device_info stores the name (at most len bytes, with the
// NUL), the UUID, where the runtime has hipDeviceGetUuid, and the PCI bus
// ID (at most blen bytes) of device. None needs the device current.
static memtrack_hip_info memtrack_hip_device_info(int device, char *name, int len, hipUUID *uuid, char *bus, int blen) {
	memtrack_hip_info r = {0, 0, 0, 0};
	r.name = memtrack_hip.hipDeviceGetName(name, len, device);
	if (memtrack_hip.hipDeviceGetUuid) {
		r.has_uuid = 1;
		r.uuid = memtrack_hip.hipDeviceGetUuid(uuid, device);
	}
	r.bus = memtrack_hip.hipDeviceGetPCIBusId(bus, blen, device);
	return r;
}
*/
import "C"

import "unsafe"

// Initialized is what Init found: hipInit's and hipGetDeviceCount's
// results, each asked whatever the other answered, and the devices
// counted.
type Initialized struct {
	Init    Result // hipInit(0)
	Count   Result // hipGetDeviceCount
	Devices int    // where Count is Success
}

// Init initialises the runtime (hipInit) and counts its devices
// (hipGetDeviceCount), in one call. Load must have succeeded.
func Init() Initialized {
	r := C.memtrack_hip_init()
	return Initialized{Init: Result(r.init), Count: Result(r.count), Devices: int(r.devices)}
}

// Call is what one operation reports: the results of making the device
// current (the operation ran only if it succeeded), of the operation, and
// of making the thread's previous device current again.
type Call struct {
	Enter, Op, Restore Result
}

func callOf(r C.memtrack_hip_result) Call {
	return Call{Enter: Result(r.enter), Op: Result(r.op), Restore: Result(r.restore)}
}

// Alloc runs hipMalloc on device, in relaxed stream-capture mode where the
// runtime has hipThreadExchangeStreamCaptureMode (ROCm 5.2): it neither
// fails nor invalidates a capture that any thread has begun.
func Alloc(device int, size int64) (uintptr, Call) {
	r := C.memtrack_hip_alloc(C.int(device), C.size_t(size))
	return uintptr(r.ptr), callOf(r)
}

// Free runs hipFree on device, in relaxed stream-capture mode where the
// runtime has it.
func Free(device int, ptr uintptr) Call {
	return callOf(C.memtrack_hip_free(C.int(device), C.uintptr_t(ptr)))
}

// MemInfo runs hipMemGetInfo on device: its free and total memory.
func MemInfo(device int) (free, total int64, _ Call) {
	r := C.memtrack_hip_meminfo(C.int(device))
	return int64(r.free), int64(r.total), callOf(r)
}

// ErrorName returns the runtime's name and description of r
// (hipGetErrorName, hipGetErrorString), or "" where it cannot say or none
// is loaded (Name has the usual ones). AMD's runtime of ROCm 5.2 gives the
// name as the description too.
func ErrorName(r Result) (name, text string) {
	n := C.memtrack_hip_error_name(C.hipError_t(r))
	if n.name != nil {
		name = C.GoString(n.name)
	}
	if n.text != nil {
		text = C.GoString(n.text)
	}
	return name, text
}

// Info is a device's identity.
type Info struct {
	Name string // hipDeviceGetName
	// UUID is hipDeviceGetUuid's 16 bytes, valid where HasUUID. AMD's
	// runtime fills them with the characters of the device's unique ID,
	// the 16 hexadecimal digits rocm-smi prints after "GPU-"; the
	// reference does not say.
	UUID    [16]byte
	HasUUID bool
	// PCIBusID is hipDeviceGetPCIBusId's domain:bus:device.function,
	// hexadecimal ("0000:c1:00.0" from AMD's runtime), which the SMI
	// library's PCI identifier matches (internal/rocmsmi).
	PCIBusID string
}

// DeviceInfo returns the identity of device (hipDeviceGetName,
// hipDeviceGetUuid where the runtime has it, hipDeviceGetPCIBusId), in one
// call that needs no current device. The first failure is the result.
func DeviceInfo(device int) (Info, Result) {
	var name, bus [256]C.char
	var u C.hipUUID
	r := C.memtrack_hip_device_info(C.int(device), &name[0], C.int(len(name)), &u, &bus[0], C.int(len(bus)))
	for _, res := range []C.hipError_t{r.name, r.uuid, r.bus} {
		if res != C.hipSuccess {
			return Info{}, Result(res)
		}
	}
	name[len(name)-1], bus[len(bus)-1] = 0, 0
	info := Info{Name: C.GoString(&name[0]), PCIBusID: C.GoString(&bus[0]), HasUUID: r.has_uuid != 0}
	if info.HasUUID {
		info.UUID = *(*[16]byte)(unsafe.Pointer(&u.bytes[0]))
	}
	return info, Success
}
