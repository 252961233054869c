package memtrack

import (
	"fmt"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// The states of a Buffer. Free moves a buffer to bufFreed before it asks
// the backend, so that one compare-and-swap settles concurrent Frees, and
// moves it back if the backend fails.
const (
	bufLive uint32 = iota
	bufFreed
)

// Buffer is memory allocated by [Device.Alloc]. It is counted on its device
// until [Buffer.Free] returns nil. Its methods are safe for concurrent use.
type Buffer struct {
	dev     Device
	size    int64
	mem     memory
	rec     *tracker.Record
	backend backend
	state   atomic.Uint32
	site    *site // where it was allocated, if recorded (sites.go)
}

// Free releases the buffer's memory and then uncounts it. It fails with
// [ErrDoubleFree] on a buffer already freed and with [ErrNilBuffer] on a nil
// buffer. If the backend fails to release the memory, the buffer stays live
// and counted, and Free may be called again.
func (b *Buffer) Free() error {
	if b == nil {
		return fmt.Errorf("%w: Free called on a nil *Buffer", ErrNilBuffer)
	}
	if !b.state.CompareAndSwap(bufLive, bufFreed) {
		return fmt.Errorf("%w: %d-byte buffer on %v", ErrDoubleFree, b.size, b.dev)
	}
	if err := b.backend.free(b.dev.ordinal, b.mem); err != nil {
		b.state.Store(bufLive)
		return fillError(err, b.dev, b.size, nil)
	}
	// Cannot fail: the buffer's bytes are part of what the record holds.
	_ = b.rec.Free(b.size)
	sideFree(b.dev, b.size) // the device-side figure (cuda_stream.go)
	if b.site != nil {
		b.site.free(b.size)
	}
	if h := tables[b.dev.kind].history.lookup(b.dev.ordinal); h != nil {
		h.free(b.size, b.site, b.rec) // see history.go
	}
	return nil
}

// Size returns the size asked for, in bytes (0 for a nil buffer).
func (b *Buffer) Size() int64 {
	if b == nil {
		return 0
	}
	return b.size
}

// Device returns the device the buffer lives on (the zero Device for a nil
// buffer).
func (b *Buffer) Device() Device {
	if b == nil {
		return Device{}
	}
	return b.dev
}

// Bytes returns the buffer's memory where the host can address it (CPU
// buffers, and Metal buffers in shared storage), or nil where it cannot (CUDA
// device memory) and once the buffer is freed. The slice must not be used
// after Free: its memory may be returned to the OS.
func (b *Buffer) Bytes() []byte {
	if b == nil || b.state.Load() != bufLive {
		return nil
	}
	return b.mem.host
}

// Freed reports whether the buffer is freed: true from the moment a
// [Buffer.Free] begins, unless the backend then fails to release it.
func (b *Buffer) Freed() bool { return b != nil && b.state.Load() == bufFreed }

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

// Reserved returns the bytes the device set aside for the buffer: the
// driver's figure, to compare with [Buffer.Size], which is what is tracked.
// Metal rounds every buffer up (its allocatedSize); where a backend reports
// no rounding, as the CPU backend does, Reserved equals Size. It returns 0
// for a nil buffer.
func (b *Buffer) Reserved() int64 {
	if b == nil {
		return 0
	}
	if b.mem.reserved > 0 {
		return b.mem.reserved
	}
	return b.size
}
