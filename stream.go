package memtrack

import "fmt"

// Stream is a CUDA stream (a CUstream handle), for stream-ordered
// allocation with [Device.AllocAsync] and [Buffer.FreeAsync]. The zero
// Stream is [DefaultStream]. A stream of github.com/mumax/3/cuda/cu converts
// to it, memtrack.Stream(cu.StreamCreate()), and so does the handle of
// another binding, memtrack.Stream(h) for a uintptr h. A Stream belongs to
// the device whose context created it; memtrack never destroys one.
type Stream uintptr

// DefaultStream is the legacy default stream (the NULL stream) of the
// device's primary context.
const DefaultStream Stream = 0

// The stream-ordered calls ([Device.AllocAsync], [Category.AllocAsync]) and
// the pool calls ([Pool.Stats], [Pool.Usage], [Pool.Trim],
// [Pool.SetReleaseThreshold]) check in one order in every build, with
// or without -tags cuda, as [Device.Alloc] does: their argument first
// (ErrInvalidSize for a size, keep or threshold out of range), then the
// device (ErrInvalidDevice for the zero Device, ErrBackendNotBuilt for a
// CUDA device in a build without the tag, ErrNotSupported for a device that
// is not a CUDA GPU or has no memory pools), then the stream.

// notCUDA is the error of a stream-ordered or pool call on d, which is not
// a CUDA device: the zero Device is no device, and a CPU or Metal device
// never has CUDA's pools.
func notCUDA(op string, d Device) error {
	return notCUDAFeature(op, d, "stream-ordered allocation and memory pools")
}

// notCUDAFeature is notCUDA for a call of feature, a feature of CUDA's.
func notCUDAFeature(op string, d Device, feature string) error {
	if d.kind == 0 || d.kind >= numKinds {
		return errZeroDevice(d)
	}
	return fmt.Errorf("%w: %s on %v: %s are CUDA's", ErrNotSupported, op, d, feature)
}

// streamTable returns the device table and the stream-ordered allocator of
// d for call op of feature, or the error where d has none: the zero Device
// is no device, a CPU or Metal device has none of CUDA's features (in every
// build), a CUDA device needs the CUDA backend, then memory pools. A call
// that changes something (change) registers the device as used, as a
// setting does; a reading registers nothing.
func (d Device) streamTable(op string, change bool, feature string) (*deviceTable, streamBackend, error) {
	if d.kind != KindCUDA {
		return nil, nil, notCUDAFeature(op, d, feature)
	}
	a := start
	if change {
		a = use
	}
	s, _, err := d.lookup(a)
	if err != nil {
		return nil, nil, err
	}
	sb, err := s.streams(d)
	if err != nil {
		return nil, nil, err
	}
	return s, sb, nil
}

// AllocAsync allocates size bytes on the device in stream order: from the
// device's current memory pool (cuMemAllocAsync), usable by work enqueued
// on stream after this call. It checks, counts and fails as [Device.Alloc]
// does: [ErrInvalidSize] for size <= 0, an [*OutOfMemoryError] when the
// memory limit or the pool refuses it (counting one failure and nothing
// else). It fails with [ErrNotSupported] on a device that is not a CUDA GPU
// or whose driver has no memory pools (CUDA before 11.2, or
// CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0), and on a stream that is
// capturing a CUDA graph where it allocates nothing (a capture the driver
// invalidated, or a driver without graph memory nodes, CUDA before 11.4);
// with [ErrInvalidArgument] on a stream of another device, on which
// cuMemAllocAsync would allocate. Each changes nothing, and is refused
// before the limits: a bad stream counts no failure whatever limit the
// request passes. A stream of another
// context on the device (one that another binding created) is used in its
// own context. Only a build with -tags cuda has CUDA devices; see
// docs/streams.md.
//
// The buffer counts from AllocAsync's return, both in the tracked figure
// ([Device.MemoryAllocated]) and in the device-side one ([Stats].Held).
// Release it with [Buffer.FreeAsync], or with [Buffer.Free] once the work
// that uses it is done.
//
// On a stream whose capture is active (cuStreamBeginCapture) the buffer is
// an allocation node of the graph: its memory is allocated at each launch
// of the graph, at an address fixed across launches (DevicePtr), and the
// host holds nothing of it between launches. It is counted in its capture
// ([Graphs.Capture]), and in no figure of the device's or its category's,
// under no limit, in no history and no leak watch; see [Graphs] and
// docs/graphs.md.
func (d Device) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	b, _, err := d.take(&request{size: size, from: fromPool, stream: stream})
	return b, err
}

// FreeAsync frees the buffer in stream order (cuMemFreeAsync): the memory
// returns to the pool once stream has executed the work enqueued before
// this call; stream may differ from the one the buffer was allocated on.
// The tracked figure drops at FreeAsync's return; the device-side figure
// ([Stats].Held) when the stream executes the free, which the package
// learns without blocking the caller and without a goroutine.
//
// A stream other than the allocation's must be ordered after it (an event
// recorded after the allocation and cuStreamWaitEvent, or a
// synchronization), as the stream-ordered allocator requires.
//
// It fails with [ErrDoubleFree] on a buffer already freed, with
// [ErrNilBuffer] on a nil buffer, with [ErrInvalidArgument] on a buffer
// that [Device.Alloc] allocated (free it with [Buffer.Free]; in a build
// without -tags cuda every buffer is one) or a stream of another device,
// and with [ErrNotSupported] on a stream that is capturing a CUDA graph,
// unless the buffer is a graph's (an allocation of AllocAsync in a
// capture): FreeAsync of it on a stream of its capture adds a free node,
// and frees it; elsewhere it frees the allocation of the graph's last
// launch, which outlived it, and the buffer stays the graph's
// ([Graphs]). Where it refuses the stream, or the driver refuses the free, the buffer
// stays live and counted (and watched, on a device watched for leaks), and
// FreeAsync or Free may be called again.
func (b *Buffer) FreeAsync(stream Stream) error { return b.release(freeInStream, stream) }

// streams returns the stream-ordered allocator of device d of s, or an
// error wrapping [ErrNotSupported] where it has none.
func (s *deviceTable) streams(d Device) (streamBackend, error) {
	if s.stream == nil {
		return nil, fmt.Errorf("%w: %v has no CUDA memory pool: stream-ordered allocation needs a CUDA device", ErrNotSupported, d)
	}
	if err := s.stream.poolsSupported(d.ordinal); err != nil {
		return nil, err
	}
	return s.stream, nil
}

// streamsSupported fails where d is not a device that stream-ordered
// allocation is for: only CUDA devices are.
func (d Device) streamsSupported() error {
	if d.kind == KindCUDA {
		return nil
	}
	return notCUDA("AllocAsync", d)
}
