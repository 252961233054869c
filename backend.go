package memtrack

import (
	"fmt"
	"unsafe"

	"github.com/memtrack/memtrack/internal/captures"
	"github.com/memtrack/memtrack/internal/fit"
	"github.com/memtrack/memtrack/tracker"
)

// backend is the seam between the accounting in this package and one kind of
// memory. Implementations stay thin: ordinals, sizes, limits, counters and
// double frees are all checked above them, once for every kind.
//
// alloc and free take the memory by pointer: alloc writes straight into the
// [Buffer] that will hold it, so that nothing is returned through the stack
// and copied again after the interface call.
type backend interface {
	// devices returns how many devices of this kind the process reaches,
	// or an error that says why it reaches none.
	devices() (int, error)
	// alloc allocates size > 0 bytes on device ordinal and describes them
	// in *m, which is zero (except for the CPU's small buffers, whose host
	// memory comes with the Buffer; see deviceTable.inline); on an error it
	// leaves *m as it was.
	alloc(ordinal int, size int64, m *memory) error
	// free releases *m, which alloc made for size bytes on device ordinal.
	free(ordinal int, size int64, m *memory) error
	// memInfo returns what the OS or driver reports for device ordinal.
	memInfo(ordinal int) (free, total int64, err error)
}

// memory is one allocation as a backend describes it.
type memory struct {
	ptr      uintptr        // device address or the backend's handle; 0 for Go memory
	host     unsafe.Pointer // first byte of a host-visible view of the whole buffer; nil if there is none
	reserved int64          // bytes the backend really reserved, if it rounds up; else 0
}

// setHost makes b, which holds the whole buffer, its host-visible view.
func (m *memory) setHost(b []byte) { m.host = unsafe.Pointer(unsafe.SliceData(b)) }

// hostBytes returns the host-visible view of a buffer of size bytes, or nil.
func (m *memory) hostBytes(size int64) []byte {
	if m.host == nil {
		return nil
	}
	return unsafe.Slice((*byte)(m.host), size)
}

// residencyReporter is a backend whose device's reported use leaves out
// memory of its own buffers that is not resident yet (the CPU backend,
// whose Used is the resident set): notResident returns those bytes, read
// with the figures, never on the allocation path.
type residencyReporter interface {
	notResident(ordinal int) (int64, error)
}

// inlineHoster is a backend some of whose buffers come with host memory
// that may be allocated together with the Buffer (the CPU's): inlineHost
// reports it, and the allocation path then gives the backend, for a buffer
// of at most inlineMax bytes, a Buffer whose m.host is that memory.
type inlineHoster interface {
	inlineHost() bool
}

// heapBacked is a backend some of whose buffers' memory is Go heap memory,
// which the garbage collector takes back with the Buffer (the CPU's small
// buffers): goHeap reports whether a buffer of size bytes is one. A copy
// of such a buffer's memory must not keep it (the leak watch's).
type heapBacked interface {
	goHeap(size int64) bool
}

// recordUser is a backend that reads the figures of its device table (the
// CPU backend, which checks requests against what its device holds).
type recordUser interface {
	useRecords(t *tracker.Table)
}

// heldFigure is a backend that keeps a device-side figure apart from the
// tracked one: CUDA's, where memory freed in stream order stays held until
// its stream executes the free. newDeviceTable finds it once, in
// deviceTable.held; for the other backends the device-side figure is the
// tracked one.
type heldFigure interface {
	// heldOrder returns where the count of device ordinal's frees in
	// stream order stands, taken before a stream-ordered allocation is
	// asked of the backend: the frees pending on its stream that the
	// allocation may take over are those counted before it.
	heldOrder(ordinal int) uint64
	// heldAdd and heldDrop add size bytes of device ordinal to the
	// figure and take them from it; pooled says they are a stream-ordered
	// buffer's, allocated on stream after at (heldOrder), which takes over
	// the bytes of frees pending on stream where the driver's pool hands
	// them to it.
	heldAdd(ordinal int, size int64, stream Stream, at uint64, pooled bool)
	heldDrop(ordinal int, size int64, pooled bool)
	// held returns the figure and its peak, after learning which
	// stream-ordered frees have executed.
	held(ordinal int) (cur, peak int64)
	// resetHeldPeak sets the peak to the figure, and a memory pool's
	// high-water marks to its figures.
	resetHeldPeak(ordinal int)
	// openHeldScope opens a peak scope on the figure; heldScopePeak and
	// closeHeldScope read and close it, after learning which frees have
	// executed.
	openHeldScope(ordinal int) *tracker.Scope
	heldScopePeak(ordinal int, sc *tracker.Scope) int64
	closeHeldScope(ordinal int, sc *tracker.Scope) error
}

// streamBackend is a backend that allocates in stream order from a
// device's memory pool (CUDA's: Device.AllocAsync, Buffer.FreeAsync and
// Device.Pool), and in the graphs that its streams capture (Device.Graphs).
// newDeviceTable finds it once, in deviceTable.stream; a build without
// -tags cuda has none, and the stream-ordered, pool and graph calls fail
// there as on any device without memory pools.
type streamBackend interface {
	// poolsSupported fails, wrapping ErrNotSupported, where device
	// ordinal has no memory pools; where the driver cannot say (a lost
	// device), it does not fail, and allocAsync meets the device's error.
	poolsSupported(ordinal int) error
	// allocAsync allocates size bytes on device ordinal in stream order
	// and describes them in *m. On a stream whose capture is active it
	// allocates in the capture's graph, where the driver has graph memory
	// nodes, and returns the capture's ID (else 0). An error that is bad
	// input (a stream of another device, one whose capture memtrack does
	// not allocate in) or a graph's allocation refused is uncounted
	// (wrapped in uncounted, an *invalidatedIn where the refusal left the
	// capture invalidated); a failure of the device is counted, as alloc's
	// is.
	allocAsync(ordinal int, size int64, stream Stream, m *memory) (capture uint64, err error)
	// allocInCapture is allocAsync where the stream captures a graph, and
	// allocates nothing (returning 0 and nil) where it does not: the path
	// of a request that a limit refuses, which no limit refuses in a
	// capture. It fails as allocAsync does for bad input; where the device
	// cannot be reached it knows nothing of the stream, and does not fail.
	allocInCapture(ordinal int, size int64, stream Stream, m *memory) (capture uint64, err error)
	// freeAsync frees *m, which allocAsync made for size bytes on device
	// ordinal, in stream order on stream, and learns when the stream
	// executes the free (the device-side figure drops then). On an error
	// nothing was freed.
	freeAsync(ordinal int, size int64, m *memory, stream Stream) error
	// poolStats returns the figures of device ordinal's current memory
	// pool, without their Device; pooled returns the part of the
	// device-side figure that stream-ordered buffers take.
	poolStats(ordinal int) (PoolStats, error)
	pooled(ordinal int) int64
	// trimPool and setReleaseThreshold are Pool.Trim and
	// Pool.SetReleaseThreshold, their argument checked.
	trimPool(ordinal int, keep int64) error
	setReleaseThreshold(ordinal int, bytes int64) error

	// graphsSupported fails, wrapping ErrNotSupported, where the driver
	// has no graph memory nodes; allocAsync then refuses a capturing
	// stream.
	graphsSupported(ordinal int) error
	// captureOf reports the capture that stream of device ordinal takes
	// part in, or fails for a stream of another device (bad input).
	captureOf(ordinal int, stream Stream) (captureState, error)
	// freeGraph frees *m, a graph's allocation of size bytes, in stream
	// order on stream: on a stream whose capture is active, a free node of
	// that capture's graph, whose ID it returns; on one that is not
	// capturing, the allocation of the graph's last launch. On an error
	// nothing was freed; a free node refused in a capture that the refusal
	// left invalidated fails with an *invalidatedIn, and one refused in a
	// capture that goes on returns that capture's ID with its error.
	freeGraph(ordinal int, size int64, m *memory, stream Stream) (capture uint64, err error)
	// graphStats reads the driver's graph memory figures of device
	// ordinal, without their Device; trimGraphs is Graphs.Trim.
	graphStats(ordinal int) (GraphStats, error)
	trimGraphs(ordinal int) error
	// graphChunk returns the chunk in which the driver reserves device
	// ordinal's graph memory (a graph's memory is its peak footprint
	// rounded up to it), learned from the driver where learned is true,
	// else a multiple of it, which rounds no graph below what the driver
	// reserves; it fails where it can give neither.
	graphChunk(ordinal int) (chunk int64, learned bool, err error)
}

// callError is the one error type of the seam: a call of a backend that
// failed. A backend says what happened, in its driver's words and codes;
// the core makes of it the error it returns, naming the device
// (fillError): an [*OutOfMemoryError] where the device had no memory for
// it, a [*BackendError] otherwise, which matches [ErrDeviceLost] where the
// device is lost. No backend builds those itself.
type callError struct {
	op       string // the operation: "alloc", "free", "meminfo", "info", "init", ...
	code     int    // the driver's code (a CUresult for CUDA); 0 for none
	name     string // the code's name ("CUDA_ERROR_INVALID_VALUE"); "" for none
	oom      bool   // the device had no memory for it: err says what refused it
	lost     bool   // the device is lost: every later call fails with this error
	capacity int64  // oom: the capacity that refused it (the CPU's), 0 if none
	err      error  // what happened, in the driver's words
}

func (e *callError) Error() string { return e.op + " failed: " + e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// uncounted is an error of a backend that counts no failed allocation:
// bad input, or a refusal before the device was asked.
type uncounted struct{ err error }

func (u uncounted) Error() string { return u.err.Error() }
func (u uncounted) Unwrap() error { return u.err }

// unbuilt is the backend of a kind whose build tag was not given.
type unbuilt struct {
	kind Kind
	note string // what else the build needs, if anything
}

func (u unbuilt) error() error {
	return fmt.Errorf("%w: the %v backend is compiled only with -tags %s%s; rebuild with go build -tags %s",
		ErrBackendNotBuilt, u.kind, u.kind.buildTag(), u.note, u.kind.buildTag())
}

func (u unbuilt) devices() (int, error)                      { return 0, u.error() }
func (u unbuilt) alloc(int, int64, *memory) error            { return u.error() }
func (u unbuilt) free(int, int64, *memory) error             { return u.error() }
func (u unbuilt) memInfo(int) (free, total int64, err error) { return 0, 0, u.error() }

// captureState is what the driver reports of a stream's part in a
// capture.
type captureState = captures.State

// invalidatedIn is the error of an allocation or free node that the driver
// refused in the active capture id, which it left invalidated: the one way
// memtrack learns which capture the driver invalidated, since the driver
// gives an invalidated capture no ID. The path that meets it records the
// invalidation in the capture's record.
type invalidatedIn struct {
	id  uint64
	err error
}

func (e *invalidatedIn) Error() string { return e.err.Error() }
func (e *invalidatedIn) Unwrap() error { return e.err }

// vmmBackend is a backend that reserves address space on a device with no
// memory behind it and maps physical memory into it, in granules
// (Device.Reserve, Reservation.Map and Reservation.Unmap): CUDA's virtual
// memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree) and the
// CPU's reservation and commit of pages. newDeviceTable finds it once, in
// deviceTable.vmm; a backend without it (Metal's) reserves nothing. The
// core checks every range against its reservation (internal/addrspace)
// before a call reaches the backend, so that the backend sees only ranges
// the driver accepts.
type vmmBackend interface {
	// vmmGranularity returns the granularity of device ordinal's
	// reservations and mappings (CUDA's minimum granularity; the CPU's
	// page), or an error wrapping ErrNotSupported where the driver or the
	// device lacks virtual memory management.
	vmmGranularity(ordinal int) (int64, error)
	// reserve reserves size bytes of address space on device ordinal, a
	// multiple of granularity, at an address aligned to it.
	reserve(ordinal int, size, granularity int64) (base uintptr, err error)
	// mapAt makes size bytes of physical memory on device ordinal, maps
	// them at ptr, inside a reservation of the device's, and makes them
	// readable and writable, describing them in *m (m.ptr is ptr; m.host
	// the host's view, where the host can address them). On an error
	// nothing is left mapped and *m is as it was.
	mapAt(ordinal int, ptr uintptr, size int64, m *memory) error
	// unmap unmaps the mapping *m of size bytes that mapAt made and gives
	// its physical memory back. On an error the mapping stays.
	unmap(ordinal int, size int64, m *memory) error
	// freeSpace gives back the reservation of size bytes at base, in which
	// nothing is mapped.
	freeSpace(ordinal int, base uintptr, size int64) error
	// reservedResident returns the bytes of device ordinal's
	// reservations that are memory now, where the backend reads it more
	// exactly than Usage does (the CPU's: the pages resident, which the
	// OS says page by page), for a return check; ok is false where it has
	// no such figure.
	reservedResident(ordinal int) (resident int64, ok bool)
}

// fitBackend is a backend that says how its driver counts what it is
// given, for a prediction ([Plan.Predict]): CUDA's (the allocation
// granularity, and the chunk of its memory pools, which it learns by a
// probe), the CPU's (its page, and the Go heap's buffers, taken as asked)
// and ROCm's (no rounding it knows of). A backend without it (Metal's) is
// predicted at the sizes asked.
type fitBackend interface {
	// fitRules returns device ordinal's rules, with the chunk of its
	// memory pools where pool is set, which the backend learns once per
	// device; an error that wraps ErrNotSupported where the device has no
	// rules for what is asked.
	fitRules(ordinal int, pool bool) (fit.Rules, error)
}
