package memtrack

// The stream-ordered calls ([Device.AllocAsync], [Category.AllocAsync]) and
// the pool calls ([Pool.Stats], [Pool.Usage], [Pool.Trim],
// [Pool.SetReleaseThreshold]) check in one order in every build, with
// or without -tags cuda, as [Device.Alloc] does: their argument first
// (ErrInvalidSize for a size, keep or threshold out of range), then the
// device (ErrInvalidDevice for the zero Device, ErrBackendNotBuilt for a
// CUDA device in a build without the tag, ErrNotSupported for a device that
// is not a CUDA GPU or has no memory pools), then the stream.

// streamTable returns the device table and the stream-ordered allocator of
// d for call op of feature, or the error where d has none: the zero Device
// is no device, a device of a kind without memory pools (Kind.pooled: the
// CPU, Metal) has none, in every build; the others need their backend,
// then memory pools. A call
// that changes something (change) registers the device as used, as a
// setting does; a reading registers nothing.
func (d Device) streamTable(op string, change bool, feature string) (*deviceTable, streamBackend, error) {
	if !d.kind.pooled() {
		return nil, nil, notPooled(op, d, feature)
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
// docs/streams.md. On an AMD GPU (-tags rocm) it is hipMallocAsync on the
// device's current pool, and a stream that is capturing a HIP graph is
// refused with [ErrNotSupported] (docs/rocm.md).
//
// AllocAsync is the program's call, and keeps the driver's rules of stream
// capture: while a CUDA graph capture begun in global mode is under way on
// any thread (or one of the calling thread's own, in thread-local mode),
// the driver refuses cuMemAllocAsync on a stream that does not capture
// from a thread that is not in relaxed mode, and invalidates the capture,
// as it would the raw call. AllocAsync then fails with an error matching
// [ErrNotSupported] that names the code
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), counting one failed allocation
// and nothing else; from a thread the program made relaxed
// (cuThreadExchangeStreamCaptureMode) it allocates. The calls memtrack
// adds to it change nothing of that, and memtrack's readings never
// prohibit or invalidate anything: they run in relaxed mode (docs/cuda.md).
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
// FreeAsync or Free may be called again. The driver refuses
// cuMemFreeAsync as it does cuMemAllocAsync while a capture is under way
// ([Device.AllocAsync]): FreeAsync then fails with an error matching
// [ErrNotSupported], and the buffer stays live.
func (b *Buffer) FreeAsync(stream Stream) error { return b.release(freeInStream, stream) }
