//go:build cuda

package memtrack

// The CUDA backend's half of Device.Info: the GPU's name and UUID, in one
// cgo call (cudadrv.DeviceInfo). The cu package's DeviceGetName leaks its
// buffer on every call, which a metrics scrape would repeat for ever, and cu
// has no call for the UUID.

import (
	"fmt"
	"strings"

	"github.com/memtrack/memtrack/internal/cudadrv"
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
	name, u, r := cudadrv.DeviceInfo(ordinal)
	if r != cudadrv.Success {
		return "", "", b.dev(ordinal).failed("info", "", cu.Result(r))
	}
	uuid = formatGPUUUID(u)
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
