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

	// The refusals of a [Reservation], each in a [*MappingError] that says
	// what was asked and what stood in the way. A refusal changes nothing.

	// ErrUnaligned: a size or an offset that is not a multiple of the
	// reservation's granularity ([Device.MapGranularity]).
	ErrUnaligned = errors.New("memtrack: not a multiple of the granularity")
	// ErrOutOfRange: an empty or negative range, or one not inside the
	// reservation.
	ErrOutOfRange = errors.New("memtrack: range not inside the reservation")
	// ErrOverlap: a map of a range that overlaps a mapping, or a map of
	// one under way.
	ErrOverlap = errors.New("memtrack: range overlaps a mapping")
	// ErrNotMapped: an unmap of a range that is not exactly one mapping.
	ErrNotMapped = errors.New("memtrack: range is not exactly one mapping")
	// ErrBusy: a map or an unmap of the mapping is under way.
	ErrBusy = errors.New("memtrack: a map or an unmap of the mapping is under way")
	// ErrMappingsLeft: a release of a reservation with mappings left in it.
	ErrMappingsLeft = errors.New("memtrack: mappings left in the reservation")
	// ErrReservationReleased: a call on a released reservation.
	ErrReservationReleased = errors.New("memtrack: reservation released")
)

// MappingError is a refusal of elastic memory: of a reservation asked for
// ([Device.Reserve], [Category.Reserve]), or of a call of a [Reservation]
// (Map, Unmap, Release); what was asked and what stood in the way. It
// matches one of [ErrUnaligned], [ErrOutOfRange], [ErrOverlap],
// [ErrNotMapped], [ErrBusy], [ErrMappingsLeft] and
// [ErrReservationReleased].
type MappingError struct {
	Device Device
	// Op names the call refused: "reserve" (Device.Reserve,
	// Category.Reserve, of a size off the granularity: ErrUnaligned),
	// "map", "unmap" or "release" (the Reservation's).
	Op string
	// Offset and Size are the range asked for, from the reservation's
	// base (for a release: the whole reservation; for a reserve: 0 and
	// the size asked).
	Offset, Size int64
	// ReservationSize and Granularity are the reservation's (for a
	// reserve: the size asked, and the device's granularity).
	ReservationSize, Granularity int64
	// MappingOffset and MappingSize are the mapping in the way: the one
	// overlapped (ErrOverlap), the one the range falls in (ErrNotMapped;
	// 0 and 0 where none does), the one under way (ErrBusy).
	MappingOffset, MappingSize int64
	// Left is the number of mappings left in the reservation
	// (ErrMappingsLeft).
	Left int
	Err  error // the reason: one of the sentinels above
}

func (e *MappingError) Error() string {
	if e.Op == "reserve" {
		return fmt.Sprintf("%v: reserve of %d bytes on %v (granularity %d)", e.Err, e.Size, e.Device, e.Granularity)
	}
	msg := fmt.Sprintf("%v: %s of %d bytes at offset %d of a %d-byte reservation on %v (granularity %d)",
		e.Err, e.Op, e.Size, e.Offset, e.ReservationSize, e.Device, e.Granularity)
	switch {
	case e.Left > 0:
		msg += fmt.Sprintf(": %d mapping(s) left; unmap them first", e.Left)
	case e.MappingSize > 0:
		msg += fmt.Sprintf(": the mapping of %d bytes at offset %d", e.MappingSize, e.MappingOffset)
	}
	return msg
}

func (e *MappingError) Unwrap() error { return e.Err }

// OutOfMemoryError reports a refused allocation; it matches [ErrOutOfMemory],
// and [ErrLimitExceeded] too where the memory limit refused it (Limit > 0).
//
// Besides what refused it, an allocation refused by [Device.Alloc],
// [Device.AllocAsync] or [Device.Track] carries a report of what was known
// at that moment, read on the refusal path only: the device's figures as
// the OS or driver reports them, the untracked memory, the live buffers
// and, where allocation sites are recorded, the largest holders. Error
// stays one line; %+v (or [OutOfMemoryError.Report]) writes the whole
// report. The observers of [Device.OnOutOfMemory] receive it too.
type OutOfMemoryError struct {
	Device    Device
	Requested int64  // bytes asked for
	Tracked   int64  // bytes tracked on the device when it was refused
	Limit     int64  // the memory limit that refused it (the device's or the category's); 0 if it was not the cause
	Capacity  int64  // the device's memory that refused it (for the CPU, the machine's or its cgroup's); 0 if it was not the cause
	Code      int    // the backend's error code (a CUresult for CUDA); 0 if none
	Reason    string // what refused it, in words
	// Category is the category the request was made in ([Category.Alloc]),
	// or "" for none, and CategoryTracked the bytes tracked in it when it
	// was refused. Where the category's own limit refused it, Reason says
	// so and Limit is the category's; Tracked is the device's either way.
	Category        string
	CategoryTracked int64

	// The report. Total and Free are 0 where the device's figures could
	// not be read (MemInfoErr says why).
	PeakTracked int64 // the tracked high-water mark since the last ResetPeakMemoryStats
	Buffers     int64 // live buffers on the device
	Total       int64 // the device's memory, as the OS or driver reports it
	Free        int64 // its free memory, as reported
	NotResident int64 // on the CPU, the tracked bytes not resident yet, which Total - Free leaves out ([Usage].NotResident)
	Untracked   int64 // Total - Free + NotResident - Tracked, or 0: memory in use on the device that this package did not allocate
	MemInfoErr  error // why Total and Free are missing; nil if they are not
	// GraphReserved is, on a CUDA GPU, the part of Untracked that the
	// driver reserves for CUDA graphs ([Usage].GraphReserved); 0 where the
	// driver gives no such figure.
	GraphReserved int64
	// SitesRecorded is true where the device records allocation sites
	// ([SiteRecorder.Enable]); Sites then holds the largest
	// holders among its live buffers, the largest first (at most 5).
	SitesRecorded bool
	Sites         []Site
	// The driver's per-process figures (NVML, on CUDA devices), where
	// PerProcess; PerProcessErr says why they are missing otherwise
	// ([ErrPerProcessUnavailable]). They are [Usage]'s, read at the refusal.
	PerProcess         bool
	PerProcessErr      error
	ProcessUsed        int64           // this process's device memory, as the driver accounts it
	OtherProcessesUsed int64           // the other processes' device memory, as the driver accounts it
	OtherProcesses     []ProcessMemory // them, the largest first
	// Categories are the rows of [Device.CategoryStats] at the refusal
	// (the uncategorised one last), nil for a device without categories.
	Categories []CategoryStats
}

// Error describes the refused allocation.
func (e *OutOfMemoryError) Error() string {
	s := fmt.Sprintf("memtrack: out of memory on %v: %d bytes requested", e.Device, e.Requested)
	if e.Category != "" {
		s += fmt.Sprintf(" in category %q (%d tracked there)", e.Category, e.CategoryTracked)
	}
	s += fmt.Sprintf(", %d tracked", e.Tracked)
	if e.byCategoryLimit() {
		s += fmt.Sprintf(", category limit %d", e.Limit)
	} else if e.Limit > 0 {
		s += fmt.Sprintf(", limit %d", e.Limit)
	}
	if e.Capacity > 0 {
		s += fmt.Sprintf(", capacity %d", e.Capacity)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Code != 0 {
		s += fmt.Sprintf(" (code %d)", e.Code)
	}
	return s
}

// byCategoryLimit reports whether the limit of the request's category
// refused it (Limit is then the category's).
func (e *OutOfMemoryError) byCategoryLimit() bool {
	return e.Category != "" && e.Limit > 0 && e.Reason == categoryLimitReason
}

// Is reports whether target is [ErrOutOfMemory], or [ErrLimitExceeded] where
// the memory limit refused the allocation.
func (e *OutOfMemoryError) Is(target error) bool {
	return target == ErrOutOfMemory || (target == ErrLimitExceeded && e.Limit > 0)
}

// categoryLimitReason is the Reason of an [*OutOfMemoryError] for a request
// that its category's limit refused; its Tracked and Limit are then the
// category's.
const categoryLimitReason = "the category's memory limit"

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

func errZeroDevice(d Device) error {
	if d.kind == 0 {
		return fmt.Errorf("%w: the zero Device is no device; obtain one from CPU, CUDA, Metal or ParseDevice", ErrInvalidDevice)
	}
	return fmt.Errorf("%w: %v", ErrInvalidDevice, d)
}
