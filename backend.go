package memtrack

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/memtrack/memtrack/internal/addrindex"
	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
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
	// memory comes with the Buffer; see kindState.inline); on an error it
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

// notResident returns the bytes of device ordinal's buffers that its
// reported use leaves out, for a backend that has any; 0 for the others
// and where they cannot be read.
func (s *kindState) notResident(ordinal int) int64 {
	if r, ok := s.b.(residencyReporter); ok {
		if n, err := r.notResident(ordinal); err == nil {
			return n
		}
	}
	return 0
}

// recordUser is a backend that reads the figures of its device table (the
// CPU backend, which checks requests against what its device holds).
type recordUser interface {
	useRecords(t *tracker.Table)
}

// heldFigure is a backend that keeps a device-side figure apart from the
// tracked one: CUDA's, where memory freed in stream order stays held until
// its stream executes the free. newKindState finds it once, in
// kindState.held; for the other backends the device-side figure is the
// tracked one.
type heldFigure interface {
	// heldAlloc and heldFree count and uncount size bytes of device
	// ordinal; pooled says they are a stream-ordered buffer's.
	heldAlloc(ordinal int, size int64, pooled bool)
	heldFree(ordinal int, size int64, pooled bool)
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

// deviceHeld returns the device-side figure of d and its peak: the
// backend's, where it keeps one (heldFigure), and otherwise the tracked
// figures current and peak, which are the same.
func deviceHeld(d Device, current, peak int64) (int64, int64) {
	if d.kind < numKinds {
		if s := tables[d.kind].p.Load(); s != nil && s.held != nil {
			return s.held.held(d.ordinal)
		}
	}
	return current, peak
}

// streamBackend is a backend that allocates in stream order from a
// device's memory pool (CUDA's: Device.AllocAsync, Buffer.FreeAsync and
// Device.Pool). newKindState finds it once, in kindState.stream; a build
// without -tags cuda has none, and the stream-ordered and pool calls fail
// there as on any device without memory pools.
type streamBackend interface {
	// poolsSupported fails, wrapping ErrNotSupported, where device
	// ordinal has no memory pools; where the driver cannot say (a lost
	// device), it does not fail, and allocAsync meets the device's error.
	poolsSupported(ordinal int) error
	// checkStream fails where stream cannot be used on device ordinal
	// (bad input: a stream of another device, or one capturing a graph);
	// where the device cannot be reached it knows nothing of the stream,
	// and does not fail.
	checkStream(ordinal int, stream Stream) error
	// allocAsync allocates size bytes on device ordinal in stream order
	// and describes them in *m. An error that is bad input is uncounted
	// (wrapped in uncounted); a failure of the device is counted, as
	// alloc's is.
	allocAsync(ordinal int, size int64, stream Stream, m *memory) error
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
}

// uncounted is an error of a backend that counts no failed allocation:
// bad input, or a refusal before the device was asked.
type uncounted struct{ err error }

func (u uncounted) Error() string { return u.err.Error() }
func (u uncounted) Unwrap() error { return u.err }

// streams returns the stream-ordered allocator of device d of s, or an
// error wrapping [ErrNotSupported] where it has none.
func (s *kindState) streams(d Device) (streamBackend, error) {
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

// kindState is the device table of one kind: its backend, the number of its
// devices (or why there are none) and the per-ordinal records.
type kindState struct {
	kind    Kind
	b       backend
	n       int
	err     error
	records tracker.Table
	held    heldFigure       // the backend's device-side figure, or nil
	stream  streamBackend    // the backend's stream-ordered allocator and memory pools, or nil
	hooks   recorders[hooks] // the features that observe allocations (hooks)
	sites   siteTable        // the sampling rates of allocation sites (SiteRecorder)
	// inline: the backend is the CPU's, whose buffers of at most
	// cpuInlineMax bytes Alloc allocates together with their memory.
	inline    bool
	tracked   addrindex.Index[addrEntry] // addresses of tracked memory (Device.Track, Device.TrackAddr)
	observers recorders[oomObservers]    // out-of-memory observers (Device.OnOutOfMemory)
	leaks     leakTable                  // watching for leaks (LeakWatcher)
	cats      recorders[categorySet]     // the devices' categories (Device.Category)
}

// tables holds one kindState per kind, created on first use. These and the
// records inside are the package's only global state.
var tables [numKinds]struct {
	mu sync.Mutex
	p  atomic.Pointer[kindState]
}

// stateOf returns the device table of k, creating it (and so initialising
// the backend) on first use.
func stateOf(k Kind) *kindState {
	t := &tables[k]
	if s := t.p.Load(); s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.p.Load(); s != nil {
		return s
	}
	s := newKindState(k, newBackend(k))
	t.p.Store(s)
	return s
}

func newKindState(k Kind, b backend) *kindState {
	s := &kindState{kind: k, b: b}
	if u, ok := b.(recordUser); ok {
		u.useRecords(&s.records)
	}
	_, s.inline = b.(*cpuBackend)
	s.held, _ = b.(heldFigure)
	s.stream, _ = b.(streamBackend)
	s.n, s.err = b.devices()
	if s.err != nil {
		s.n = 0
	}
	return s
}

func newBackend(k Kind) backend {
	switch k {
	case KindCUDA:
		return newCUDABackend()
	case KindMetal:
		return newMetalBackend()
	default:
		return newCPUBackend()
	}
}

// record returns the record of ordinal i, checking that the device exists.
func (s *kindState) record(i int) (*tracker.Record, error) {
	if s.err != nil {
		return nil, s.err
	}
	if r := s.records.Lookup(i); r != nil {
		return r, nil
	}
	if i < 0 || i >= s.n {
		return nil, fmt.Errorf("%w: %v:%d, this machine has %d %v device(s)", ErrInvalidOrdinal, s.kind, i, s.n, s.kind)
	}
	return s.records.Record(i)
}

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
