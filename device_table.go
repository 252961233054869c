package memtrack

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/memtrack/memtrack/internal/addrindex"
	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// deviceTable is the device table of one kind: its backend, the number of
// its devices (or why there are none), their records and the counts at the
// addresses of tracked memory, and, by ordinal, what each device keeps
// beside its record (its categories and its features' states) and the
// hooks of its features that are on, which the allocation and release
// paths call (hooks.go).
type deviceTable struct {
	kind    Kind
	b       backend
	n       int
	err     error
	records tracker.Table
	held    heldFigure    // the backend's device-side figure, or nil
	stream  streamBackend // the backend's stream-ordered allocator and memory pools, or nil
	vmm     vmmBackend    // the backend's reservations of address space and their mappings, or nil
	// inline: the backend's buffers of at most inlineMax bytes come with
	// their host memory, which the allocation path allocates together with
	// the Buffer (inlineHoster: the CPU's).
	inline bool
	addrs  addrindex.Index[addrEntry] // the counts at the addresses of tracked memory (Device.Track, Device.TrackAddr)
	// states holds each device's state, made on the first use of a
	// category or a feature and kept for the life of the process; hooks
	// holds the hooks of the features that are on, nil while every one is
	// off, so that the paths pay one atomic load for all of them.
	states perDevice[deviceState]
	hooks  perDevice[hookSet]
}

// tables holds one deviceTable per kind, created on first use. These and
// the records inside are the package's only global state.
var tables [numKinds]struct {
	mu sync.Mutex
	p  atomic.Pointer[deviceTable]
}

// tableOf returns the device table of k, or nil where it was never made
// (or k is no kind): every read of tables goes through it, and only
// openTable, which makes a table, takes its entry's lock.
func tableOf(k Kind) *deviceTable {
	if k < numKinds {
		return tables[k].p.Load()
	}
	return nil
}

// openTable returns the device table of k, a kind, making it (and so
// starting the backend) on first use.
func openTable(k Kind) *deviceTable {
	if s := tableOf(k); s != nil {
		return s
	}
	t := &tables[k]
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.p.Load(); s != nil {
		return s
	}
	s := newDeviceTable(k, newBackend(k))
	t.p.Store(s)
	return s
}

func newDeviceTable(k Kind, b backend) *deviceTable {
	s := &deviceTable{kind: k, b: b}
	if u, ok := b.(recordUser); ok {
		u.useRecords(&s.records)
	}
	if h, ok := b.(inlineHoster); ok {
		s.inline = h.inlineHost()
	}
	s.held, _ = b.(heldFigure)
	s.stream, _ = b.(streamBackend)
	s.vmm, _ = b.(vmmBackend)
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
	case KindROCm:
		return newROCmBackend()
	default:
		return newCPUBackend()
	}
}

// access says what a look-up of a device ([Device.lookup]) may do.
type access uint8

const (
	// read starts no backend and registers nothing: the reads of figures.
	// It fails never: it returns no table where the kind's was never
	// made, and no record where the device was never used.
	read access = iota
	// start starts the backend and checks that the device exists, and
	// registers nothing: the reads of a feature that is off, and turning
	// one off.
	start
	// use registers the device as used as well, making its record: the
	// allocations and the settings.
	use
)

// lookup is the look-up of a device by every function of the package
// that is given one: its table and its record, as a allows. Its fast path is for a device whose record exists, which every
// access returns alike (a table that failed to start has no record).
func (d Device) lookup(a access) (*deviceTable, *tracker.Record, error) {
	if s := tableOf(d.kind); s != nil {
		if r := s.records.Lookup(d.ordinal); r != nil {
			return s, r, nil
		}
	}
	return d.lookupSlow(a)
}

// lookupSlow is lookup where the table or the record may not exist yet.
func (d Device) lookupSlow(a access) (*deviceTable, *tracker.Record, error) {
	if a == read {
		if s := tableOf(d.kind); s != nil && s.err == nil && d.kind != 0 {
			return s, nil, nil
		}
		return nil, nil, nil
	}
	if d.kind == 0 || d.kind >= numKinds {
		return nil, nil, errZeroDevice(d)
	}
	s := openTable(d.kind)
	if s.err != nil {
		return nil, nil, s.startErr(d)
	}
	if d.ordinal < 0 || d.ordinal >= s.n {
		return nil, nil, fmt.Errorf("%w: %v, this machine has %d %v device(s)", ErrInvalidOrdinal, d, s.n, d.kind)
	}
	if a == start {
		return s, s.records.Lookup(d.ordinal), nil
	}
	r, err := s.records.Record(d.ordinal) // the device is used from now on
	return s, r, err
}

// startErr returns the error of a backend that could not start, as a
// function given device d reports it: it names d, the device asked for
// (Devices names the kind's first device).
func (s *deviceTable) startErr(d Device) error {
	return fillError(s.err, d, 0, nil)
}

// peek returns the device's record where the device has been used, and nil
// otherwise: lookup's read, for the reads of the device's own figures.
func (d Device) peek() *tracker.Record {
	_, r, _ := d.lookup(read)
	return r
}

// rangeUsed calls f for each used device and its record, in the order of
// [Devices], without making a device table.
func rangeUsed(f func(Device, *tracker.Record)) {
	for k := range numKinds {
		s := tableOf(k)
		if s == nil {
			continue
		}
		s.records.Range(func(i int, r *tracker.Record) bool {
			f(Device{kind: k, ordinal: i}, r)
			return true
		})
	}
}

// deviceState is what a device keeps beside its record, made on the
// first use of a category or a feature and kept for the life of the
// process: one word per slot, each the state of a feature or of one of the
// core's mechanisms (its categories, its reporters), by the slot that its
// own file names, and opaque here; and the markers of its allocations'
// marks, which the release path reads (hooks.go).
type deviceState struct {
	slots   [numSlots]atomic.UnsafePointer
	marker  atomic.Pointer[markerBox]  // the marker of allocation.mark (hooks.go), once set
	claimer atomic.Pointer[claimerBox] // the claimer of allocation.entry, once set
}

// numSlots is how many slots a device's state has (deviceState).
const numSlots = 8

// stateOf returns device ordinal's state, made where make is true (the
// device is in use), or nil where it was never made.
func (s *deviceTable) stateOf(ordinal int, make bool) *deviceState {
	if st := s.states.lookup(ordinal); st != nil || !make {
		return st
	}
	var got *deviceState
	s.states.update(ordinal, func(old *deviceState) *deviceState {
		if old == nil {
			old = new(deviceState)
		}
		got = old
		return old
	})
	return got
}

// slotOf returns what slot i of device ordinal of s holds, made by newState
// on first use where newState is not nil; nil where it was never made. A
// slot holds values of one type, its owner's.
func slotOf[T any](s *deviceTable, ordinal, i int, newState func() *T) *T {
	if v := slot[T](s, ordinal, i); v != nil || newState == nil {
		return v
	}
	p := &s.stateOf(ordinal, true).slots[i]
	p.CompareAndSwap(nil, unsafe.Pointer(newState())) // a loser's state is dropped unused
	return (*T)(p.Load())
}

// slot returns what slot i of device ordinal of s holds, or nil: slotOf's
// read, small enough to inline into the paths that read a slot.
func slot[T any](s *deviceTable, ordinal, i int) *T {
	if st := s.states.lookup(ordinal); st != nil {
		return (*T)(st.slots[i].Load())
	}
	return nil
}

// setSlot puts v in slot i of device ordinal of s, which is in use.
func setSlot[T any](s *deviceTable, ordinal, i int, v *T) {
	s.stateOf(ordinal, true).slots[i].Store(unsafe.Pointer(v))
}

// perDevice publishes a value per device of one kind, by ordinal: the
// devices' states and their hook sets. While no device of the kind has one,
// the published slice is nil, so that a path pays one atomic load and a
// branch.
type perDevice[T any] struct {
	mu   sync.Mutex // serialises changes
	vals atomic.Pointer[[]*T]
}

// lookup returns the value of ordinal i, or nil if it has none.
func (t *perDevice[T]) lookup(i int) *T {
	p := t.vals.Load()
	if p == nil || i >= len(*p) {
		return nil
	}
	return (*p)[i]
}

// update replaces the value of ordinal i, under the lock, by what f
// returns for the one it has (nil if none); nil removes it. When the last
// value of the kind goes, the published slice is nil again.
func (t *perDevice[T]) update(i int, f func(old *T) *T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var old []*T
	if p := t.vals.Load(); p != nil {
		old = *p
	}
	var cur *T
	if i < len(old) {
		cur = old[i]
	}
	next := f(cur)
	if next == cur {
		return
	}
	vals := make([]*T, max(len(old), i+1))
	copy(vals, old)
	vals[i] = next
	for _, v := range vals {
		if v != nil {
			t.vals.Store(&vals)
			return
		}
	}
	t.vals.Store(nil)
}

// notResident returns the bytes of device ordinal's buffers that its
// reported use leaves out, for a backend that has any; 0 for the others
// and where they cannot be read.
func (s *deviceTable) notResident(ordinal int) int64 {
	if r, ok := s.b.(residencyReporter); ok {
		if n, err := r.notResident(ordinal); err == nil {
			return n
		}
	}
	return 0
}

// deviceHeld returns the device-side figure of d and its peak: the
// backend's, where it keeps one (heldFigure), and otherwise the tracked
// figures current and peak, which are the same.
func deviceHeld(d Device, current, peak int64) (int64, int64) {
	if s := tableOf(d.kind); s != nil && s.held != nil {
		return s.held.held(d.ordinal)
	}
	return current, peak
}

// streams returns the stream-ordered allocator of device d of s, or an
// error wrapping [ErrNotSupported] where it has none.
func (s *deviceTable) streams(d Device) (streamBackend, error) {
	if s.stream == nil {
		return nil, fmt.Errorf("%w: %v has no memory pool: stream-ordered allocation needs a device of %s", ErrNotSupported, d, pooledKinds())
	}
	if err := s.stream.poolsSupported(d.ordinal); err != nil {
		return nil, err
	}
	return s.stream, nil
}

// streamsSupported fails where d is not of a kind that stream-ordered
// allocation is for (Kind.pooled).
func (d Device) streamsSupported() error {
	if d.kind.pooled() {
		return nil
	}
	return notPooled("AllocAsync", d, "stream-ordered allocation and memory pools")
}

// graphMemory returns the stream-ordered allocator of device d of s where
// the device has graph memory, or the error that says why not (see
// Graphs).
func (s *deviceTable) graphMemory(d Device) (streamBackend, error) {
	sb, err := s.streams(d)
	if err != nil {
		return nil, err
	}
	if err := sb.graphsSupported(d.ordinal); err != nil {
		return nil, err
	}
	return sb, nil
}

// notPooled is the error of call op of feature (stream-ordered
// allocation, memory pools, graph memory) on d, which is not of a kind
// whose devices have memory pools: the zero Device is no device, and the
// CPU or a Metal device never has them.
func notPooled(op string, d Device, feature string) error {
	if d.kind == 0 || d.kind >= numKinds {
		return errZeroDevice(d)
	}
	return fmt.Errorf("%w: %s on %v: %s are for %s devices", ErrNotSupported, op, d, feature, pooledKinds())
}

// CUDA returns NVIDIA GPU ordinal. It fails with [ErrBackendNotBuilt] in a
// build without -tags cuda, with [ErrBackendUnavailable] where the driver or
// the GPUs are missing, and with [ErrInvalidOrdinal] past the last GPU.
func CUDA(ordinal int) (Device, error) { return device(KindCUDA, ordinal) }

// Metal returns Apple GPU ordinal. It fails with [ErrBackendNotBuilt] in a
// build without -tags metal (or not on macOS), and with [ErrInvalidOrdinal]
// past the last GPU.
func Metal(ordinal int) (Device, error) { return device(KindMetal, ordinal) }

// ROCm returns AMD GPU ordinal, as the HIP runtime numbers it (after
// HIP_VISIBLE_DEVICES). It fails with [ErrBackendNotBuilt] in a build
// without -tags rocm, with [ErrBackendUnavailable] where the HIP runtime or
// the GPUs are missing, and with [ErrInvalidOrdinal] past the last GPU.
func ROCm(ordinal int) (Device, error) { return device(KindROCm, ordinal) }

func device(k Kind, ordinal int) (Device, error) {
	d := Device{kind: k, ordinal: ordinal}
	if _, _, err := d.lookup(use); err != nil {
		return Device{}, err
	}
	return d, nil
}

// ParseDevice reads a device written as by [Device.String]: "cpu",
// "cuda:1", "metal:0", "rocm:0". A kind without an ordinal ("cuda") means ordinal 0.
// It accepts nothing else: kind names are lower case, an ordinal is written
// in decimal without sign, leading zero or spaces, and nothing may surround
// the device, and the CPU has no ordinal ("cpu:0" is refused); anything
// else fails with [ErrInvalidDevice]. The device must exist in this build
// and on this machine. On failure it returns the zero Device, which is no
// device (see [Device]), beside the error.
func ParseDevice(s string) (Device, error) {
	d, err := parseDeviceName(s)
	if err != nil {
		return Device{}, err
	}
	return device(d.kind, d.ordinal)
}

// parseDeviceName reads a device as ParseDevice does, and looks nothing
// up: the device it names need not exist here (a device of another
// machine, in a file that machine wrote).
func parseDeviceName(s string) (Device, error) {
	name, ord, hasOrd := strings.Cut(s, ":")
	k := numKinds
	for i, n := range kindNames {
		if i > 0 && name == n {
			k = Kind(i)
		}
	}
	if k == numKinds {
		return Device{}, fmt.Errorf("%w: %q: want cpu, cuda:N, metal:N or rocm:N", ErrInvalidDevice, s)
	}
	if k == KindCPU && hasOrd {
		return Device{}, fmt.Errorf("%w: %q: the CPU is one device, written cpu without an ordinal", ErrInvalidDevice, s)
	}
	n := 0
	if hasOrd {
		var ok bool
		if n, ok = parseOrdinal(ord); !ok {
			return Device{}, fmt.Errorf("%w: %q: the ordinal must be written as a decimal number >= 0 without sign or leading zeros", ErrInvalidDevice, s)
		}
		if n > tracker.MaxOrdinal {
			return Device{}, fmt.Errorf("%w: %q: no machine has that many %v devices", ErrInvalidOrdinal, s, k)
		}
	}
	return Device{kind: k, ordinal: n}, nil
}

// parseOrdinal reads an ordinal as strconv.Itoa writes it: ASCII digits,
// no sign, no leading zero. Past [tracker.MaxOrdinal] it returns
// tracker.MaxOrdinal+1 instead of overflowing.
func parseOrdinal(s string) (int, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int(c-'0'), tracker.MaxOrdinal+1)
	}
	return n, true
}

// Devices returns every device this build and machine reach: the CPU, then
// each CUDA GPU, then each Metal GPU, then each ROCm GPU. A backend that
// this build has (-tags cuda, -tags metal, -tags rocm) but that cannot
// start here, for want of a driver or of a device, lists no device, and err
// says why, wrapping
// [ErrBackendUnavailable] (a [*BackendError] where the driver answered,
// the loader's reason where it could not be loaded); the devices returned
// work whatever err says. A backend that the build lacks is no error:
// [CUDA], [Metal], [ROCm] and [ParseDevice] answer [ErrBackendNotBuilt] for
// its devices.
func Devices() ([]Device, error) {
	var ds []Device
	var errs []error
	for k := KindCPU; k < numKinds; k++ {
		s := openTable(k)
		if s.err != nil && !errors.Is(s.err, ErrBackendNotBuilt) {
			errs = append(errs, fillError(s.err, Device{kind: k}, 0, nil))
		}
		for i := range s.n {
			ds = append(ds, Device{kind: k, ordinal: i})
		}
	}
	return ds, errors.Join(errs...)
}

// UnmarshalText reads a device as [ParseDevice] does; the device must exist
// in this build and on this machine.
func (d *Device) UnmarshalText(text []byte) error {
	v, err := ParseDevice(string(text))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// UsedDevices returns every device the process has used, in the order of
// [Devices]: those obtained with [CUDA], [Metal], [ROCm] or [ParseDevice], and those
// on which memory was allocated or tracked, address space reserved
// ([Device.Reserve]) or a setting changed (the
// CPU, which [CPU] returns without checking, is listed once it has been used
// so, and so is a device that [Devices] lists). Reading a figure registers
// nothing: the device's (MemoryAllocated, MemoryStats, MemGetInfo, Usage,
// Baseline, Info, CategoryStats, ...), its features' (Sites().Snapshot,
// History().Snapshot, Leaks().Stats, Leaks().Enabled, Pool().Stats, ...),
// and neither does turning off a feature that is off, nor a query of
// elastic memory (MapGranularity, a return check) or a reservation
// refused; a reservation made registers its device. It only reads the
// device tables: a kind never used stays uninitialised, so listing never
// starts a driver.
func UsedDevices() []Device {
	var ds []Device
	rangeUsed(func(d Device, _ *tracker.Record) {
		ds = append(ds, d)
	})
	return ds
}

// fillError completes an error of a backend (callError) as one of the
// package's errors on device d, for a request of size bytes where the
// device's record rec is given: an [*OutOfMemoryError] with the figures,
// or a [*BackendError]. The package's own errors come back as they are,
// but an [*OutOfMemoryError] or a [*BackendError] (a test's backend's), of
// which a copy comes back with the device filled in: the backend's may be
// shared, as the error of a backend that could not start is.
func fillError(err error, d Device, size int64, rec *tracker.Record) error {
	switch e := err.(type) {
	case *callError:
		if e.oom {
			oom := &OutOfMemoryError{Device: d, Requested: size, Capacity: e.capacity, Code: e.code, Reason: e.err.Error()}
			if rec != nil {
				oom.Tracked = rec.Tracked()
			}
			return oom
		}
		be := &BackendError{Device: d, Op: e.op, Code: e.code, Name: e.name, Err: e.err}
		if e.lost {
			be.Err = fmt.Errorf("%w: %w", ErrDeviceLost, e.err)
		}
		return be
	case *OutOfMemoryError:
		c := *e
		c.Device, c.Requested = d, size
		if rec != nil {
			c.Tracked = rec.Tracked()
		}
		return &c
	case *BackendError:
		c := *e
		c.Device = d
		return &c
	}
	return err
}

// DeviceInfo names a device as its OS or driver does, so that this package's
// figures can be put beside those of other tools: nvidia-smi and
// dcgm-exporter for CUDA, ioreg for Metal. A field the backend cannot tell is
// empty.
type DeviceInfo struct {
	Device Device
	// Name is the model name: the GPU's as the CUDA driver reports it
	// ("NVIDIA H100 80GB HBM3"), the Metal device's ("Apple M2 Max"), or the
	// CPU's (/proc/cpuinfo on Linux, machdep.cpu.brand_string on macOS).
	Name string
	// UUID identifies the device across processes and tools, which ordinals
	// do not (CUDA_VISIBLE_DEVICES renumbers GPUs): for CUDA the GPU's UUID
	// as nvidia-smi -L and dcgm-exporter print it ("GPU-" and 32 hex digits
	// grouped 8-4-4-4-12); for Metal the device's registryID in hex, as
	// ioreg prints it ("0x1000003f2"); empty for the CPU.
	UUID string
}

// infoBackend is a backend that can name its devices. Backends that do not
// implement it give an empty [DeviceInfo].
type infoBackend interface {
	// info returns the name and identifier of device ordinal, which the
	// device table has checked already.
	info(ordinal int) (name, uuid string, err error)
}

// Info returns the device's model name and identifier, as its OS or driver
// reports them. It starts the device's driver, as every method but Kind,
// Ordinal and String does, but creates no context and allocates nothing on
// the device.
func (d Device) Info() (DeviceInfo, error) {
	s, _, err := d.lookup(start)
	if err != nil {
		return DeviceInfo{Device: d}, err
	}
	b, ok := s.b.(infoBackend)
	if !ok {
		return DeviceInfo{Device: d}, nil
	}
	name, uuid, err := b.info(d.ordinal)
	if err != nil {
		return DeviceInfo{Device: d}, fillError(err, d, 0, nil)
	}
	return DeviceInfo{Device: d, Name: name, UUID: uuid}, nil
}
