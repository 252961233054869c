package memtrack

// DeviceInfo names a device as its OS or driver does, so that this package's
// figures can be put beside those of other tools: nvidia-smi and
// dcgm-exporter for CUDA, ioreg for Metal. A field the backend cannot tell is
// empty.
type DeviceInfo struct {
	Device Device
	// Name is the model name: the GPU's as the CUDA driver reports it
	// ("NVIDIA H100 80GB HBM3"), the Metal device's ("Apple M2 Max"), or the
	// CPU's (/proc/cpuinfo on Linux, machdep.cpu.brand_string on macOS).
	Name string
	// UUID identifies the device across processes and tools, which ordinals
	// do not (CUDA_VISIBLE_DEVICES renumbers GPUs): for CUDA the GPU's UUID
	// as nvidia-smi -L and dcgm-exporter print it ("GPU-" and 32 hex digits
	// grouped 8-4-4-4-12); for Metal the device's registryID in hex, as
	// ioreg prints it ("0x1000003f2"); empty for the CPU.
	UUID string
}

// infoBackend is a backend that can name its devices. Backends that do not
// implement it give an empty [DeviceInfo].
type infoBackend interface {
	// info returns the name and identifier of device ordinal, which the
	// device table has checked already.
	info(ordinal int) (name, uuid string, err error)
}

// Info returns the device's model name and identifier, as its OS or driver
// reports them. It starts the device's driver, as every method but Kind,
// Ordinal and String does, but creates no context and allocates nothing on
// the device.
func (d Device) Info() (DeviceInfo, error) {
	s, _, err := d.lookup(start)
	if err != nil {
		return DeviceInfo{Device: d}, err
	}
	b, ok := s.b.(infoBackend)
	if !ok {
		return DeviceInfo{Device: d}, nil
	}
	name, uuid, err := b.info(d.ordinal)
	if err != nil {
		return DeviceInfo{Device: d}, fillError(err, d, 0, nil)
	}
	return DeviceInfo{Device: d, Name: name, UUID: uuid}, nil
}
