package memtrack

// DevicePtr returns the address of the buffer's memory on its device, for
// code that launches kernels or copies memory itself: a CUdeviceptr for a
// CUDA buffer (cu.DevicePtr(b.DevicePtr()) with github.com/mumax/3/cuda/cu),
// valid in the device's primary context and so for the CUDA runtime too. It
// returns 0 for CPU buffers, whose memory [Buffer.Bytes] gives, for a nil
// buffer and once the buffer is freed.
func (b *Buffer) DevicePtr() uintptr {
	if b == nil || b.state.Load() != bufLive {
		return 0
	}
	return b.mem.ptr
}
