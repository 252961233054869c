package memtrack

import (
	"errors"
	"fmt"
	"strings"

	"github.com/memtrack/memtrack/tracker"
)

// The sentinel errors. Every error the package returns wraps one of them (or
// is a typed error that matches one with [errors.Is]) and says what to do.
var (
	// ErrBackendNotBuilt: the device's backend was left out of this binary
	// by its build tags. The error names the tag that builds it.
	ErrBackendNotBuilt = errors.New("memtrack: backend not built")

	// ErrBackendUnavailable: the backend is built but cannot be used here
	// (no driver, no device, or its initialisation failed). A binary built
	// with -tags cuda loads the driver's libcuda.so.1 at run time: where it
	// is missing, or is the link stub, CUDA is unavailable and the error
	// says why, and the CPU works.
	ErrBackendUnavailable = errors.New("memtrack: backend unavailable")

	// ErrInvalidOrdinal: the ordinal is outside the devices of that kind.
	ErrInvalidOrdinal = errors.New("memtrack: invalid device ordinal")

	// ErrInvalidDevice: a device string that [ParseDevice] cannot read, or a
	// method called on the zero [Device], which is no device.
	ErrInvalidDevice = errors.New("memtrack: invalid device")

	// ErrInvalidSize: a size or limit that is zero or negative where it must
	// be positive (or negative where it must not be). It is the value of
	// [tracker.ErrInvalidSize]: one sentinel for both packages.
	ErrInvalidSize = tracker.ErrInvalidSize

	// ErrInvalidAddress: an address that must be given was 0
	// ([Device.TrackAddr]).
	ErrInvalidAddress = errors.New("memtrack: invalid address")

	// ErrDoubleFree: [Buffer.Free] or [Buffer.FreeAsync] on a buffer that was
	// already freed.
	ErrDoubleFree = errors.New("memtrack: buffer already freed")

	// ErrAlreadyReleased: [Tracked.Release] or [Tracked.FreeWith] on a
	// handle already released.
	ErrAlreadyReleased = errors.New("memtrack: tracked memory already released")

	// ErrNilBuffer: [Buffer.Free] or [Buffer.FreeAsync] on a nil *Buffer.
	ErrNilBuffer = errors.New("memtrack: nil buffer")

	// ErrNilTracked: [Tracked.Release] or [Tracked.FreeWith] on a nil
	// *Tracked.
	ErrNilTracked = errors.New("memtrack: nil tracked handle")

	// ErrInvalidBuffer: [Buffer.Free] on a Buffer that [Device.Alloc] did
	// not return: a zero Buffer, or a copy of one (which go vet reports).
	ErrInvalidBuffer = errors.New("memtrack: invalid buffer")

	// ErrAlreadyTracked: [Device.Track] of an address that a live handle
	// tracks already.
	ErrAlreadyTracked = errors.New("memtrack: address already tracked")

	// ErrOutOfMemory: an allocation refused by the memory limit, the
	// device's capacity or the backend. It comes as an [*OutOfMemoryError].
	ErrOutOfMemory = errors.New("memtrack: out of memory")

	// ErrLimitExceeded: an allocation refused by the memory limit
	// ([Device.SetMemoryLimit]). It comes as an [*OutOfMemoryError] with a
	// Limit, which matches both ErrOutOfMemory and ErrLimitExceeded. It is
	// the value of [tracker.ErrLimitExceeded].
	ErrLimitExceeded = tracker.ErrLimitExceeded

	// ErrSitesNotRecorded: allocation sites were asked of a device that does
	// not record them; see [SiteRecorder.Enable].
	ErrSitesNotRecorded = errors.New("memtrack: allocation sites not recorded")

	// ErrNotSupported: the device or its driver lacks what the call needs,
	// such as stream-ordered allocation on a device that is not a CUDA GPU
	// or on a GPU without memory pools.
	ErrNotSupported = errors.New("memtrack: not supported")

	// ErrHistoryNotRecorded: a history was asked of a device that does not
	// record one ([HistoryRecorder.Enable]).
	ErrHistoryNotRecorded = errors.New("memtrack: memory history not recorded")

	// ErrInvalidArgument: an argument outside what the function accepts,
	// such as a utilization outside (0, 1] given to [Measurement.Budget] or a
	// nil function given to [Device.Measure].
	ErrInvalidArgument = errors.New("memtrack: invalid argument")

	// ErrDeviceLost: the device's context met an error that leaves it
	// unusable (for CUDA, a sticky error such as CUDA_ERROR_ILLEGAL_ADDRESS);
	// every later call on the device fails with it, and buffers stay counted.
	// Restart the process to use the device again.
	ErrDeviceLost = errors.New("memtrack: device lost")
)

// prefix begins every message of the package, once.
const prefix = "memtrack: "

// contextError is an error preceded by what was being done, written with one
// [prefix] however many memtrack errors it wraps.
type contextError struct {
	context string
	err     error
}

func (e *contextError) Error() string { return prefix + e.context + ": " + reason(e.err) }
func (e *contextError) Unwrap() error { return e.err }

// wrapf returns err preceded by the context that format and args write.
func wrapf(err error, format string, args ...any) error {
	return &contextError{context: fmt.Sprintf(format, args...), err: err}
}

// reason is err's message without the package's prefix, to be put after
// another message that has it.
func reason(err error) string { return strings.TrimPrefix(err.Error(), prefix) }

// BackendError reports a failure of the allocator or driver behind a device,
// with its own error code and name.
type BackendError struct {
	Device Device
	Op     string // the operation: "alloc", "free", "meminfo", "init"
	Code   int    // the backend's error code (a CUresult for CUDA)
	Name   string // the code's name, such as "CUDA_ERROR_INVALID_VALUE"
	Err    error  // an underlying error, if any
}

// Error describes the failure.
func (e *BackendError) Error() string {
	s := fmt.Sprintf("memtrack: %v: %s failed", e.Device, e.Op)
	if e.Name != "" {
		s += ": " + e.Name
	}
	if e.Code != 0 {
		s += fmt.Sprintf(" (code %d)", e.Code)
	}
	if e.Err != nil {
		s += ": " + reason(e.Err) // one prefix, however the cause is written
	}
	return s
}

// Unwrap returns the underlying error.
func (e *BackendError) Unwrap() error { return e.Err }

// fillError completes an error from a backend with the device and figures.
func fillError(err error, d Device, size int64, rec *tracker.Record) error {
	switch e := err.(type) {
	case *OutOfMemoryError:
		e.Device, e.Requested = d, size
		if rec != nil {
			e.Tracked = rec.Tracked()
		}
	case *BackendError:
		e.Device = d
	}
	return err
}
