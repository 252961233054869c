package memtrack

import "fmt"

// Track counts size bytes that other code allocated on the device, with the
// accounting of [Device.Alloc]: the bytes held, live buffers, their peaks,
// the cumulative figures, the memory limit and, when enabled, the
// allocation site (the caller of Track) and the memory history. It allocates and frees nothing;
// release the count with [Tracked.Release] once the memory is freed, or
// free it through [Tracked.FreeWith].
//
// ptr is the memory's address on the device (a CUdeviceptr for CUDA, a
// host address for the CPU), which [Tracked.DevicePtr] returns and
// [Kind.TrackedAt] finds; 0 if unknown. An address is tracked at most once at a
// time per kind of device, since a process's device addresses are unique
// (CUDA's unified addressing): Track of an address already tracked and live
// fails with [ErrAlreadyTracked]. Do not track memory from [Device.Alloc]:
// it is counted already.
//
// Track fails with [ErrInvalidSize] for size <= 0 and with
// [ErrAlreadyTracked], changing no figure, and with an [*OutOfMemoryError]
// when the memory limit refuses it, adding one to FailedAllocs and nothing
// else. Bad input is refused first: an address tracked already fails with
// ErrAlreadyTracked whatever the limit. The limit can refuse Track, and so hold what a program allocates
// through other bindings too; it cannot stop memory that is allocated
// without being tracked.
func (d Device) Track(size int64, ptr uintptr) (*Tracked, error) {
	_, t, err := d.take(&request{size: size, from: fromAddress, handle: true, ptr: ptr})
	return t, err
}

// TrackAddr counts size bytes that other code allocated at address ptr on
// the device, as [Device.Track] does, without making a handle: the count
// lives in the address index only, until [Kind.UntrackAddr] of ptr ends it
// ([Kind.TrackedAt] makes a handle for it when asked). It is the path of a
// drop-in binding, which is given only an address to free (see package
// github.com/memtrack/memtrack/cu), and allocates nothing on the heap while
// allocation sites and the memory history are off. It fails as Track
// does, and with [ErrInvalidAddress] for ptr == 0.
func (d Device) TrackAddr(size int64, ptr uintptr) error {
	if size > 0 && ptr == 0 {
		return errAddressZero(d, size)
	}
	_, _, err := d.take(&request{size: size, from: fromAddress, ptr: ptr})
	return err
}

// TrackAddrSkip is [Device.TrackAddr] for a binding that wraps it: the
// allocation site it records leaves out skip frames above its caller, as
// [runtime.Caller] counts them, so that the site is the code that called
// the binding, not the binding. Skip 0 records the caller of TrackAddrSkip,
// as TrackAddr does; a wrapper called by the code to attribute passes 1,
// and 1 more for each frame of its own in between. A negative skip is an
// [ErrInvalidArgument] error.
func (d Device) TrackAddrSkip(skip int, size int64, ptr uintptr) error {
	if skip < 0 {
		return fmt.Errorf("%w: TrackAddrSkip of %d frames on %v", ErrInvalidArgument, skip, d)
	}
	if size > 0 && ptr == 0 {
		return errAddressZero(d, size)
	}
	_, _, err := d.take(&request{size: size, from: fromAddress, ptr: ptr, skip: skip})
	return err
}

// errAddressZero is the error of a TrackAddr of size bytes at address 0.
func errAddressZero(d Device, size int64) error {
	return fmt.Errorf("%w: TrackAddr of %d bytes on %v: address 0", ErrInvalidAddress, size, d)
}
