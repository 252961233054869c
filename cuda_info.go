//go:build cuda

package memtrack

// The CUDA backend's half of Device.Info: the GPU's name and UUID, in one
// cgo call of this file's own. The cu package's DeviceGetName leaks its
// buffer on every call, which a metrics scrape would repeat for ever, and cu
// has no call for the UUID. The cgo flags are those of cuda_calls.go.

/*
#include <cuda.h>

// memtrack_device_info stores the name (at most len bytes, with the NUL) and
// the UUID of device ordinal. cuDeviceGetUuid_v2 is named explicitly, so
// that the call is the same whatever the version of cuda.h (12.x headers
// map cuDeviceGetUuid to it; 11.x ones do not).
static CUresult memtrack_device_info(int ordinal, char *name, int len, CUuuid *uuid) {
	CUdevice dev;
	CUresult r = cuDeviceGet(&dev, ordinal);
	if (r == CUDA_SUCCESS) {
		r = cuDeviceGetName(name, len, dev);
	}
	if (r == CUDA_SUCCESS) {
		r = cuDeviceGetUuid_v2(uuid, dev);
	}
	return r;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
)

// info returns the GPU's name and its UUID as nvidia-smi prints it. Neither
// needs a context, so none is retained.
func (b *cudaBackend) info(ordinal int) (name, uuid string, err error) {
	if err := b.init(); err != nil {
		return "", "", err
	}
	if ordinal < 0 || ordinal >= b.n {
		return "", "", fmt.Errorf("%w: cuda:%d, this machine has %d cuda device(s)", ErrInvalidOrdinal, ordinal, b.n)
	}
	var buf [256]C.char
	var u C.CUuuid
	if r := cu.Result(C.memtrack_device_info(C.int(ordinal), &buf[0], C.int(len(buf)), &u)); r != cu.SUCCESS {
		return "", "", b.dev(ordinal).failed("info", "", r)
	}
	buf[len(buf)-1] = 0
	name = C.GoString(&buf[0])
	uuid = formatGPUUUID(*(*[16]byte)(unsafe.Pointer(&u.bytes[0])))
	if isMIG(name) {
		// A MIG instance's UUID: cuDeviceGetUuid_v2 returns it for a device
		// in MIG mode, and nvidia-smi -L and CUDA_VISIBLE_DEVICES write it
		// with the prefix MIG-.
		uuid = "MIG-" + strings.TrimPrefix(uuid, "GPU-")
	}
	return name, uuid, nil
}

// isMIG reports whether name is that of a MIG instance, which the driver
// names after its GPU and profile: "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
func isMIG(name string) bool {
	_, profile, ok := strings.Cut(name, " MIG ")
	return ok && strings.Contains(profile, "g.")
}
