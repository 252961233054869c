package memtrack

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Buffer is memory allocated by [Device.Alloc]. It is counted on its device
// until [Buffer.Free] returns nil. Its methods are safe for concurrent use.
//
// A Buffer must not be copied: go vet reports a copy, and a copy is not the
// buffer. Its Free fails with [ErrInvalidBuffer], and it has no memory to
// show, as a zero Buffer has none.
type Buffer struct {
	_ noCopy

	// self is the buffer itself, set by Alloc once the buffer is counted: a
	// zero Buffer or a copy holds another value, and is refused.
	self *Buffer
	allocation
}

// noCopy makes go vet's copylocks check report a copy of the struct that
// holds it, as sync.Mutex does: it has the methods of a sync.Locker.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// valid reports whether b is a buffer that Alloc returned (not nil, not a
// zero Buffer, not a copy).
func (b *Buffer) valid() bool { return b != nil && b.self == b }

// Free releases the buffer's memory and then uncounts it. It fails with
// [ErrDoubleFree] on a buffer already freed, with [ErrNilBuffer] on a nil
// buffer and with [ErrInvalidBuffer] on a Buffer that Alloc did not return
// (a zero Buffer, or a copy of one). If the backend fails to release the
// memory, the buffer stays live and counted, and Free may be called again.
// For a graph's buffer (an allocation of [Device.AllocAsync] in a capture,
// counted in no figure) Free frees the allocation of the graph's last
// launch, which outlived it (cuMemFree), and the buffer stays the graph's.
// On CUDA, Free of a buffer of [Device.Alloc] is the driver's cuMemFree,
// which may wait until every stream of the device has run what was
// enqueued on it (the driver's implicit synchronization; an H200's did):
// a buffer of [Device.AllocAsync] freed with [Buffer.FreeAsync] never
// waits so.
func (b *Buffer) Free() error { return b.release(freeNow, DefaultStream) }

// release is Free and FreeAsync: the claim of the release path, then the
// release of kind how (freeNow or freeInStream, on stream) and its tail
// (deviceTable.release). Where the release fails, the claim is given back
// (Buffer.unclaim).
func (b *Buffer) release(how releaseKind, stream Stream) error {
	if b == nil || b.self != b {
		return b.refuseFree()
	}
	if how == freeInStream && b.from == fromBackend {
		return fmt.Errorf("%w: FreeAsync of a %d-byte buffer on %v that Device.Alloc allocated; free it with Free", ErrInvalidArgument, b.size, b.Device())
	}
	if !b.claimState(stateFreed) {
		if b.loadState() == stateGraph {
			return b.releaseGraph(how, stream) // a graph's buffer, which no claim takes (graphs.go)
		}
		return b.refuseFree()
	}
	if !claimMarks(&b.allocation, b.owner()) {
		return b.refuseFree()
	}
	// The buffer was counted in its device's record, which is never removed.
	t := tableOf(b.kind)
	released, err := t.release(&b.allocation, t.records.Lookup(int(b.ordinal)), how, stream, b.owner())
	runtime.KeepAlive(b) // reachable until its leak cleanup is cancelled
	if !released {
		b.unclaim()
		return fillError(err, b.Device(), b.size, nil)
	}
	if err != nil {
		return b.uncountFailed(err)
	}
	return nil
}

// owner is the buffer's identity for the leak watch: the address of its
// allocation, which the watch holds no reference to.
func (b *Buffer) owner() uintptr { return uintptr(unsafe.Pointer(&b.allocation)) }

// unclaim gives b back after a free that claimed it (its state, and its
// leak watch's entry) and then did not happen: b is live and watched as
// before, and may be freed again.
func (b *Buffer) unclaim() {
	b.storeState(stateLive)
	unclaimMarks(&b.allocation, b.owner())
}

// refuseFree says why Free refused b: nil, not from Alloc, or freed.
func (b *Buffer) refuseFree() error {
	switch {
	case b == nil:
		return fmt.Errorf("%w: Free called on a nil *Buffer", ErrNilBuffer)
	case b.self != b:
		return fmt.Errorf("%w: Free called on a Buffer that Device.Alloc did not return (a zero Buffer, or a copy of one)", ErrInvalidBuffer)
	default:
		return fmt.Errorf("%w: %d-byte buffer on %v", ErrDoubleFree, b.size, b.Device())
	}
}

// uncountFailed reports a buffer whose memory was released but whose record
// refused to uncount it: the record disagrees with the buffers it was told
// about, and Free says so rather than let the figures drift.
func (b *Buffer) uncountFailed(err error) error {
	return wrapf(err, "%v: the %d-byte buffer's memory was released, but its record refused to uncount it", b.Device(), b.size)
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
	return b.device()
}

// Bytes returns the buffer's memory where the host can address it (CPU
// buffers, and Metal buffers in shared storage), or nil where it cannot (CUDA
// device memory), once the buffer is freed and for a Buffer that Alloc did
// not return. The slice must not be used after Free: its memory may be
// returned to the OS.
func (b *Buffer) Bytes() []byte {
	if !b.valid() || b.loadState() != stateLive {
		return nil
	}
	return b.mem.hostBytes(b.size)
}

// Freed reports whether the buffer is freed: true from the moment a
// [Buffer.Free] begins, unless the backend then fails to release it. It is
// false for a Buffer that Alloc did not return.
func (b *Buffer) Freed() bool { return b.valid() && b.loadState() == stateFreed }

// DevicePtr returns the address of the buffer's memory on its device, for
// code that launches kernels or copies memory itself: a CUdeviceptr for a
// CUDA buffer (cu.DevicePtr(b.DevicePtr()) with github.com/mumax/3/cuda/cu),
// valid in the device's primary context and so for the CUDA runtime too; for
// a buffer of [Device.AllocAsync] on a stream that captures a CUDA graph,
// the address of the graph's allocation, fixed across its launches. It
// returns 0 for CPU buffers, whose memory [Buffer.Bytes] gives, for a nil
// buffer, once the buffer is freed and for a Buffer that Alloc did not
// return.
func (b *Buffer) DevicePtr() uintptr {
	if !b.valid() {
		return 0
	}
	if st := b.loadState(); st != stateLive && st != stateGraph {
		return 0
	}
	return b.mem.ptr
}

// RoundedSize returns the bytes the device set aside for the buffer: the
// driver's figure, to compare with [Buffer.Size], which is what is tracked.
// Metal rounds every buffer up (its allocatedSize); where a backend reports
// no rounding, as the CPU backend does, RoundedSize equals Size. A CUDA
// graph's buffer ([Device.Graphs]) is its size too: the driver rounds a
// graph's memory as a whole, its peak footprint up to the device's graph
// chunk ([Capture].Need), not each allocation. It returns 0 for a nil
// buffer.
func (b *Buffer) RoundedSize() int64 {
	if b == nil {
		return 0
	}
	if b.mem.reserved > 0 {
		return b.mem.reserved
	}
	return b.size
}

// inlineMax is the largest buffer whose host memory is allocated together
// with its Buffer, on a backend whose buffers may (inlineHost: the CPU): one allocation instead of two, where the Buffer would
// otherwise cost as much as the memory.
const inlineMax = 256

// bufferWith is a Buffer followed by the memory of a small buffer.
type bufferWith[T any] struct {
	b    Buffer
	data T
}

func newBufferWith[T any]() *Buffer {
	x := new(bufferWith[T])
	x.b.mem.host = unsafe.Pointer(&x.data)
	return &x.b
}

// newInlineBuffer returns a Buffer with zeroed memory for size <=
// inlineMax bytes in the same allocation, in mem.host, rounded up to a
// power of two (as the Go heap's size classes would round a make).
func newInlineBuffer(size int64) *Buffer {
	switch {
	case size <= 16:
		return newBufferWith[[16]byte]()
	case size <= 32:
		return newBufferWith[[32]byte]()
	case size <= 64:
		return newBufferWith[[64]byte]()
	case size <= 128:
		return newBufferWith[[128]byte]()
	default:
		return newBufferWith[[inlineMax]byte]()
	}
}
