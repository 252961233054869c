//go:build rocm

package memtrack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"go.uber.org/atomic"

	"github.com/memtrack/memtrack/internal/fit"
	"github.com/memtrack/memtrack/internal/held"
	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/rocmsmi"
	"github.com/memtrack/memtrack/tracker"
)

// rocmBackend allocates AMD GPU memory through the HIP runtime. The runtime
// is loaded at run time (dlopen of libamdhip64, internal/hipdrv) and
// initialised (hipInit, hipGetDeviceCount) on the first call, once per
// process; where it cannot be, the backend is unavailable and says why, in
// the runtime's words. HIP has no context to retain: each operation makes
// its device current on the calling thread, runs and puts the thread's
// previous device back, in one cgo call, so that buffers work with code
// that uses the HIP runtime on any thread.
type rocmBackend struct {
	initOnce sync.Once
	n        int
	initErr  error
	devs     []rocmDevice
	sides    []rocmSide     // the device-side figure of each device (heldFigure)
	smi      rocmsmi.Reader // the kernel's per-process figures (processBackend)
}

// rocmDevice is the backend's state of one device.
type rocmDevice struct {
	ordinal int
	// pools holds the runtime's answer to whether the device has memory
	// pools, once it gave one: nil where it has, the error that says so
	// where it has not (poolsSupported).
	pools atomic.Pointer[error]
}

// rocmSide is the device-side figure of one AMD device (internal/held):
// the bytes the device holds for this package's buffers, in which a buffer
// freed with FreeAsync stays until its stream has executed the free, which
// it learns of through rocmEvents.
type rocmSide = held.Figure[hipdrv.Event, *rocmEvents]

// rocmEvents is how the device-side figure of one device asks the runtime
// which frees in stream order have executed (held.Querier): the events
// recorded after them, queried with the device current, in one cgo call
// (hipdrv.StreamEvents.Query).
type rocmEvents struct {
	ordinal int
	q       hipdrv.StreamEvents // the last query's
}

// Query queries the events of each stream of qs with the device current,
// and writes the answers. HIP has no lost device: where the device cannot
// be made current, each stream's answer is that failure, and its frees
// count as executed.
func (q *rocmEvents) Query(qs []held.Query[hipdrv.Event]) bool {
	q.q.Reset()
	for i := range qs {
		for _, e := range qs[i].Events {
			q.q.Add(e)
		}
		q.q.EndStream()
	}
	if r := q.q.Query(q.ordinal); r != hipdrv.Success {
		settleHIP(q.ordinal, "event query", hipdrv.Call{Restore: r}) // logs the failed restore
	}
	for i := range qs {
		var r hipdrv.Result
		qs[i].Reached, r = q.q.Reached(i)
		qs[i].Gone = r != hipdrv.Success
	}
	return true
}

// Destroy destroys an event. Every event of FreeAsync is created with its
// device current and kept for reuse, so the figure destroys none.
func (q *rocmEvents) Destroy(e hipdrv.Event) { hipdrv.EventDestroy(e) }

func newROCmBackend() backend { return &rocmBackend{} }

// init loads and initialises the runtime and counts the devices, once.
func (b *rocmBackend) init() error {
	b.initOnce.Do(func() {
		b.n, b.initErr = initRuntime()
		b.devs = make([]rocmDevice, b.n)
		b.sides = make([]rocmSide, b.n)
		for i := range b.devs {
			b.devs[i].ordinal = i
			// Whether the runtime's pool hands a block freed on a stream
			// to the next allocation there at once, as CUDA's does, no
			// AMD GPU has answered memtrack yet (docs/rocm.md): the
			// figure takes over no free, and overstates where it does.
			b.sides[i].Init(&rocmEvents{ordinal: i}, false)
		}
	})
	return b.initErr
}

// initRuntime loads the HIP runtime (hipdrv.Load), initialises it and
// counts its devices. Without the runtime, or without a device, the error
// matches ErrBackendUnavailable and says why: the loader's reasons, or what
// hipInit and hipGetDeviceCount answered, in the runtime's words.
func initRuntime() (int, error) {
	rt, err := hipdrv.Load()
	if err != nil {
		// One prefix: the sentinel's words come after the device's.
		return 0, &callError{op: "init", err: fmt.Errorf("%w: %w", ErrBackendUnavailable, err)}
	}
	in := hipdrv.Init()
	r := in.Init
	if r == hipdrv.Success {
		r = in.Count
	}
	if r == hipdrv.Success && in.Devices == 0 {
		r = hipdrv.NoDevice
	}
	if r != hipdrv.Success {
		name, _ := hipErrorName(r)
		return 0, &callError{op: "init", code: int(r), name: name,
			err: fmt.Errorf("%w: the HIP runtime (%v) reports no usable GPU (check the amdgpu driver and /dev/kfd with rocm-smi): hipInit answered %s, hipGetDeviceCount %s",
				ErrBackendUnavailable, rt, hipWords(in.Init), hipWords(in.Count))}
	}
	return in.Devices, nil
}

func (b *rocmBackend) devices() (int, error) {
	if err := b.init(); err != nil {
		return 0, err
	}
	return b.n, nil
}

// device checks that device ordinal exists.
func (b *rocmBackend) device(ordinal int) error {
	if err := b.init(); err != nil {
		return err
	}
	if ordinal < 0 || ordinal >= b.n {
		return fmt.Errorf("%w: rocm:%d, this machine has %d rocm device(s)", ErrInvalidOrdinal, ordinal, b.n)
	}
	return nil
}

func (b *rocmBackend) alloc(ordinal int, size int64, m *memory) error {
	if err := b.device(ordinal); err != nil {
		return err
	}
	ptr, c := hipdrv.Alloc(ordinal, size)
	if err := settleHIP(ordinal, "alloc", c); err != nil {
		return err
	}
	m.ptr = ptr
	return nil
}

func (b *rocmBackend) free(ordinal int, _ int64, m *memory) error {
	if err := b.device(ordinal); err != nil {
		return err
	}
	return settleHIP(ordinal, "free", hipdrv.Free(ordinal, m.ptr))
}

// memInfo returns hipMemGetInfo, which reports the current device: the
// call makes it device ordinal.
func (b *rocmBackend) memInfo(ordinal int) (free, total int64, err error) {
	if err := b.device(ordinal); err != nil {
		return 0, 0, err
	}
	free, total, c := hipdrv.MemInfo(ordinal)
	if err := settleHIP(ordinal, "meminfo", c); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}

// settleHIP turns what one operation on device ordinal reported into its
// error: the operation's own result decides. If the device could not be
// made current, the operation did not run, and that is the error. If the
// operation ran but the thread's previous device could not be made current
// again, the operation's result stands (an allocation is returned and
// counted, a free is uncounted, so that no memory is lost from the
// figures); the device stays current on the thread, and the failure is
// logged at level Warn on the default [slog.Logger].
func settleHIP(ordinal int, op string, c hipdrv.Call) error {
	if c.Enter != hipdrv.Success {
		return hipError(op, "making the device current (hipSetDevice)", c.Enter)
	}
	if c.Restore != hipdrv.Success {
		name, text := hipErrorName(c.Restore)
		slog.Default().LogAttrs(context.Background(), slog.LevelWarn,
			"memtrack: the HIP operation succeeded, but the thread's previous device could not be made current again; the device stays current on the thread",
			slog.String("device", Device{kind: KindROCm, ordinal: ordinal}.String()),
			slog.String("op", op),
			slog.Int("code", int(c.Restore)),
			slog.String("name", name),
			slog.String("error", text))
	}
	if c.Op != hipdrv.Success {
		return hipError(op, "", c.Op)
	}
	return nil
}

// hipError is the error of a failed runtime call during op, as the seam
// has it (callError): out of memory for hipErrorOutOfMemory. stage, if not
// "", says which step of op failed. The HIP reference documents no error
// that leaves a device unusable for every later call, as CUDA's sticky
// errors do, so no device is marked lost.
func hipError(op, stage string, r hipdrv.Result) error {
	name, text := hipErrorName(r)
	e := &callError{op: op, code: int(r), name: name}
	if r == hipdrv.OutOfMemory {
		reason := "the HIP runtime refused it: " + name
		if stage != "" {
			reason = stage + ": " + reason
		}
		e.oom, e.err = true, errors.New(reason)
		return e
	}
	if stage != "" {
		text = stage + ": " + text
	}
	e.err = errors.New(text)
	return e
}

// hipErrorName returns the name and description of r: the runtime's
// (hipGetErrorName, hipGetErrorString), or else hip_runtime_api.h's name of
// the usual codes (hipdrv.Name), or else "hipError_t N". AMD's runtime of
// ROCm 5.2 describes a code by its name again; a description that only
// repeats the name is the name.
func hipErrorName(r hipdrv.Result) (name, text string) {
	name, text = hipdrv.ErrorName(r)
	if name == "" {
		name = hipdrv.Name(r)
	}
	if name == "" {
		name = "hipError_t " + strconv.Itoa(int(r))
	}
	if text == "" {
		text = name
	}
	return name, text
}

// hipWords writes r as the runtime names and describes it:
// "hipErrorNoDevice (no ROCm-capable device is detected)", or the name
// alone where the description repeats it.
func hipWords(r hipdrv.Result) string {
	name, text := hipErrorName(r)
	if text == name {
		return name
	}
	return name + " (" + text + ")"
}

// The ROCm backend's half of Device.Info: the GPU's name and unique ID, in
// one cgo call (hipdrv.DeviceInfo), which a metrics scrape may repeat for
// ever.

// info returns the GPU's name and its unique ID as rocminfo and rocm-smi
// print it ("GPU-" and 16 hexadecimal digits), or "" for the ID where the
// device has none (rocminfo's "GPU-XX", on consumer GPUs and APUs) or the
// runtime lacks hipDeviceGetUuid (before ROCm 5.2).
func (b *rocmBackend) info(ordinal int) (name, uuid string, err error) {
	in, err := b.deviceInfo(ordinal)
	if err != nil {
		return "", "", err
	}
	if !in.HasUUID {
		return in.Name, "", nil
	}
	return in.Name, formatHIPUUID(in.UUID), nil
}

// deviceInfo returns the identity of device ordinal.
func (b *rocmBackend) deviceInfo(ordinal int) (hipdrv.Info, error) {
	if err := b.device(ordinal); err != nil {
		return hipdrv.Info{}, err
	}
	in, r := hipdrv.DeviceInfo(ordinal)
	if r != hipdrv.Success {
		return hipdrv.Info{}, hipError("info", "", r)
	}
	return in, nil
}

// formatHIPUUID writes the 16 bytes of hipDeviceGetUuid as rocminfo writes
// the device's UUID: AMD's runtime fills them with the characters of the
// device's unique ID (the text after "GPU-" of the HSA agent's UUID), up to
// the first NUL. A device without a unique ID has "XX" there (rocminfo's
// "GPU-XX"), or nothing: it has no UUID (""). Bytes that are not such
// characters, which no AMD runtime is known to give, are written in hex.
func formatHIPUUID(b [16]byte) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	id := b[:n]
	printable := true
	for _, c := range id {
		if c <= ' ' || c > '~' {
			printable = false
		}
	}
	for _, c := range b[n:] {
		if c != 0 {
			printable = false
		}
	}
	switch {
	case !printable:
		return fmt.Sprintf("GPU-%x", b)
	case n == 0 || string(id) == "XX":
		return ""
	}
	return "GPU-" + string(id)
}

// Stream-ordered allocation (hipMallocAsync, hipFreeAsync) on each
// device's current memory pool, and the device-side figure: the bytes the
// device holds for this package's buffers, in which a buffer freed with
// FreeAsync stays until its stream has executed the free. Each call is one
// cgo call of internal/hipdrv, which makes the device current, operates
// and restores the thread's device, so that the goroutine need not be
// locked to its thread.
//
// FreeAsync learns that its stream has executed the free by an event
// recorded after it (hipEventRecord), and a reading queries the pending
// events (hipEventQuery), as the CUDA backend does, with the same
// reasoning: an event captures all the work enqueued on its stream before
// it, so one answer for a stream's newest event retires all its frees, and
// a stream's host callback (hipStreamAddCallback) "will block later work in
// the stream until it is finished", which an event does not.//
// Stream capture: memtrack never allocates in a HIP graph. AllocAsync and
// FreeAsync on a stream that takes part in a capture run nothing
// (hipdrv), and fail with ErrNotSupported, as they do on a CUDA driver
// without graph memory nodes; Alloc and Free run in relaxed capture mode,
// which invalidates no capture.

// hipStreamKey names the stream of a free for the device-side figure: its
// handle, the null stream by 0; the per-thread default stream
// (hipStreamPerThread), whose handle names another stream on each thread,
// is not ordered. HIP has no contexts: a figure is one device's.
func hipStreamKey(stream Stream) held.Stream {
	h := uintptr(stream)
	return held.Stream{Handle: h, Ordered: h != hipdrv.StreamPerThread}
}

// side returns the device-side figure of device ordinal, or nil if there
// is no such device.
func (b *rocmBackend) side(ordinal int) *rocmSide {
	if b.init() != nil || ordinal < 0 || ordinal >= len(b.sides) {
		return nil
	}
	return &b.sides[ordinal]
}

// The device-side figure is the ROCm backend's capability (heldFigure),
// which deviceTable.held holds.

// heldOrder and heldAdd are called on the allocation path, after the
// device was looked up in its table, which the backend's initialisation
// made before the table was published: they index the figures without
// asking init again.

func (b *rocmBackend) heldOrder(ordinal int) uint64 {
	if uint(ordinal) < uint(len(b.sides)) {
		return uint64(b.sides[ordinal].Order())
	}
	return 0
}

func (b *rocmBackend) heldAdd(ordinal int, size int64, stream Stream, at uint64, pooled bool) {
	if uint(ordinal) < uint(len(b.sides)) {
		b.sides[ordinal].Add(size, pooled, hipStreamKey(stream).Handle, held.Order(at)) // the peak leaves out what is known freed
	}
}

func (b *rocmBackend) heldDrop(ordinal int, size int64, pooled bool) {
	if sd := b.side(ordinal); sd != nil {
		sd.Drop(size, pooled)
	}
}

func (b *rocmBackend) held(ordinal int) (cur, peak int64) {
	sd := b.side(ordinal)
	if sd == nil {
		return 0, 0
	}
	return sd.Load()
}

// resetHeldPeak sets the device-side peak of device ordinal to its current
// figure, and the high-water marks of its memory pool and of its graph
// memory, where it has them, as the runtime resets them.
func (b *rocmBackend) resetHeldPeak(ordinal int) {
	sd := b.side(ordinal)
	if sd == nil {
		return
	}
	sd.ResetPeak()
	if b.poolsSupported(ordinal) == nil {
		if pool, r := hipdrv.MemPool(ordinal); r == hipdrv.Success {
			hipdrv.PoolResetHighs(pool)
		}
	}
	if hipdrv.GraphMem() == nil {
		hipdrv.GraphResetHighs(ordinal)
	}
}

// openHeldScope opens a peak scope on the device-side figure, after
// uncounting the stream-ordered frees known to have executed, so that it
// starts from the figure the device holds.
func (b *rocmBackend) openHeldScope(ordinal int) *tracker.Scope {
	sd := b.side(ordinal)
	if sd == nil {
		return nil
	}
	return sd.OpenScope()
}

// heldScopePeak reads the peak of a scope of openHeldScope after learning
// which stream-ordered frees have executed, as held does.
func (b *rocmBackend) heldScopePeak(ordinal int, sc *tracker.Scope) int64 {
	if sc == nil {
		return 0
	}
	if sd := b.side(ordinal); sd != nil {
		return sd.ScopePeak(sc)
	}
	return sc.Peak()
}

// closeHeldScope closes a scope of openHeldScope.
func (b *rocmBackend) closeHeldScope(ordinal int, sc *tracker.Scope) error {
	if sc == nil {
		return nil
	}
	if sd := b.side(ordinal); sd != nil {
		return sd.CloseScope(sc)
	}
	_, err := sc.Close()
	return err
}

// Stream-ordered allocation and the memory pools are the ROCm backend's
// capability (streamBackend), which deviceTable.stream holds.

// poolsSupported fails where device ordinal has no memory pools, or the
// runtime lacks the calls of stream-ordered allocation (ROCm 5.2); it asks
// the runtime until it answers, and keeps the answer.
func (b *rocmBackend) poolsSupported(ordinal int) error {
	d := Device{kind: KindROCm, ordinal: ordinal}
	if b.init() != nil || ordinal < 0 || ordinal >= len(b.devs) {
		return fmt.Errorf("%w: %v has no HIP memory pool", ErrNotSupported, d)
	}
	dev := &b.devs[ordinal]
	if p := dev.pools.Load(); p != nil {
		return *p
	}
	var err error
	if m := hipdrv.MemPools(); m != nil {
		err = fmt.Errorf("%w: stream-ordered allocation on %v: %w; allocate with Device.Alloc instead", ErrNotSupported, d, m)
	} else {
		supported, r := hipdrv.PoolsSupported(ordinal)
		if r != hipdrv.Success {
			return nil // unknown: the allocation meets the runtime's error
		}
		if !supported {
			err = fmt.Errorf("%w: %v has no memory pools (hipDeviceAttributeMemoryPoolsSupported is 0); allocate with Device.Alloc instead", ErrNotSupported, d)
		}
	}
	dev.pools.CompareAndSwap(nil, &err)
	return *dev.pools.Load()
}

// allocAsync allocates size bytes on device ordinal from its current pool
// in stream order (hipMallocAsync). A stream of another device, or one
// that takes part in a capture, is refused, uncounted: memtrack allocates
// in no HIP graph. It never returns a capture.
func (b *rocmBackend) allocAsync(ordinal int, size int64, stream Stream, m *memory) (uint64, error) {
	if err := b.device(ordinal); err != nil {
		return 0, err
	}
	a := hipdrv.AllocAsync(ordinal, size, uintptr(stream))
	if refused(a) {
		settleHIP(ordinal, "alloc", a.Call) // a failed restore is logged there
		return 0, uncounted{refusedHIPStream("AllocAsync", Device{kind: KindROCm, ordinal: ordinal}, stream, a)}
	}
	if err := settleHIP(ordinal, "alloc", a.Call); err != nil {
		return 0, err
	}
	m.ptr = a.Ptr
	return 0, nil
}

// refused reports whether a stream-ordered call ran nothing because its
// stream is of another device or takes part in a capture.
func refused(c hipdrv.StreamCall) bool {
	return c.Enter == hipdrv.Success && (c.OtherDevice || c.Capture.Status != hipdrv.CaptureNone)
}

// allocInCapture allocates nothing: memtrack allocates in no HIP graph. It
// refuses, as allocAsync does, a stream of another device or one that
// takes part in a capture, so that a request a limit refuses is refused
// as bad input first; where the device cannot be reached, nothing is known
// of the stream, and the limit's refusal stands.
func (b *rocmBackend) allocInCapture(ordinal int, _ int64, stream Stream, _ *memory) (uint64, error) {
	if b.device(ordinal) != nil {
		return 0, nil
	}
	c := hipdrv.StreamInfo(ordinal, uintptr(stream))
	settleHIP(ordinal, "alloc", c.Call) // a failed restore is logged there
	if refused(c) {
		return 0, uncounted{refusedHIPStream("AllocAsync", Device{kind: KindROCm, ordinal: ordinal}, stream, c)}
	}
	return 0, nil
}

// freeAsync frees m in stream order (hipFreeAsync) and learns when the
// stream executes the free, by an event recorded after it.
func (b *rocmBackend) freeAsync(ordinal int, size int64, m *memory, stream Stream) error {
	if err := b.device(ordinal); err != nil {
		return err
	}
	sd := &b.sides[ordinal]
	spare, taken := sd.TakeSpare() // an event reached, to record again
	f := hipdrv.FreeAsync(ordinal, m.ptr, uintptr(stream), spare)
	if refused(f) {
		settleHIP(ordinal, "free", f.Call) // a failed restore is logged there
		if taken {
			sd.PutSpare(spare)
		}
		return refusedHIPStream("FreeAsync", Device{kind: KindROCm, ordinal: ordinal}, stream, f)
	}
	// The free's own result decides (see settleHIP): a failure to restore
	// the thread's device is logged there, and the free stands.
	if err := settleHIP(ordinal, "free", f.Call); err != nil {
		if taken {
			sd.PutSpare(spare)
		}
		return err
	}
	if f.Retired {
		// The event could not be recorded; the stream was synchronized.
		if !f.Event.IsZero() {
			sd.PutSpare(f.Event)
		}
		sd.Drop(size, true)
		return nil
	}
	sd.Freed(held.Free[hipdrv.Event]{Event: f.Event, Stream: hipStreamKey(stream), Seq: f.Seq, Size: size})
	return nil
}

// refusedHIPStream is the error of a stream-ordered call on d that c found
// with a stream of another device, which the runtime would run on that
// device, or with a stream that takes part in a capture, where memtrack
// runs nothing.
func refusedHIPStream(op string, d Device, stream Stream, c hipdrv.StreamCall) error {
	if c.OtherDevice {
		return fmt.Errorf("%w: %s on %v with stream %#x, which belongs to rocm:%d: a stream-ordered call runs on its stream's device; use a stream of %v",
			ErrInvalidArgument, op, d, uintptr(stream), c.StreamDevice, d)
	}
	if c.Capture.Status == hipdrv.CaptureInvalidated {
		return fmt.Errorf("%w: %s on %v with stream %#x, whose HIP graph capture the runtime invalidated: it ends with no graph; end it (hipStreamEndCapture) and capture again",
			ErrNotSupported, op, d, uintptr(stream))
	}
	return fmt.Errorf("%w: %s on %v with stream %#x, which is capturing a HIP graph: memtrack allocates and frees in no HIP graph; allocate before the capture begins, or after it ends",
		ErrNotSupported, op, d, uintptr(stream))
}

// The figures and controls of each AMD device's current memory pool, the
// one AllocAsync allocates from: hipMallocAsync takes memory from "the
// memory pool associated with the stream's device" (hipDeviceGetMemPool),
// so the pool is looked up at every reading.

// pool returns the current memory pool of device ordinal.
func (b *rocmBackend) pool(ordinal int) (hipdrv.Pool, error) {
	p, r := hipdrv.MemPool(ordinal)
	if r != hipdrv.Success {
		return p, hipError("memory pool", "", r)
	}
	return p, nil
}

// poolStats reads the figures of the current pool of device ordinal.
func (b *rocmBackend) poolStats(ordinal int) (PoolStats, error) {
	pool, err := b.pool(ordinal)
	if err != nil {
		return PoolStats{}, err
	}
	s, r := hipdrv.PoolGet(pool)
	if r != hipdrv.Success {
		return PoolStats{}, hipError("memory pool", "", r)
	}
	return PoolStats{
		PoolReserved:     s.PoolReserved,
		PeakPoolReserved: s.PeakPoolReserved,
		PoolUsed:         s.PoolUsed,
		PeakPoolUsed:     s.PeakPoolUsed,
		ReleaseThreshold: s.ReleaseThreshold,
	}, nil
}

// pooled returns the part of the device-side figure of device ordinal
// that stream-ordered buffers take.
func (b *rocmBackend) pooled(ordinal int) int64 {
	if sd := b.side(ordinal); sd != nil {
		return sd.Pooled()
	}
	return 0
}

// trimPool trims the current pool of device ordinal to keep bytes
// (hipMemPoolTrimTo).
func (b *rocmBackend) trimPool(ordinal int, keep int64) error {
	pool, err := b.pool(ordinal)
	if err != nil {
		return err
	}
	if r := hipdrv.PoolTrimTo(pool, keep); r != hipdrv.Success {
		return hipError("trim pool", "", r)
	}
	return nil
}

// setReleaseThreshold sets the release threshold of the current pool of
// device ordinal (hipMemPoolAttrReleaseThreshold).
func (b *rocmBackend) setReleaseThreshold(ordinal int, bytes int64) error {
	pool, err := b.pool(ordinal)
	if err != nil {
		return err
	}
	if r := hipdrv.PoolSetReleaseThreshold(pool, bytes); r != hipdrv.Success {
		return hipError("set release threshold", "", r)
	}
	return nil
}

// HIP graph memory: the runtime's figures of the memory it keeps for
// graphs (ROCm 5.3), read and trimmed where the runtime has the calls.
// memtrack adds no node to a HIP graph (allocAsync refuses a capturing
// stream), so a capture it reports has no allocation of its own.

// graphsSupported fails where the runtime lacks the graph memory calls
// (before ROCm 5.3).
func (b *rocmBackend) graphsSupported(ordinal int) error {
	d := Device{kind: KindROCm, ordinal: ordinal}
	if err := b.init(); err != nil {
		return fmt.Errorf("%w: HIP graph memory on %v: the HIP runtime is unavailable", ErrNotSupported, d)
	}
	if err := hipdrv.GraphMem(); err != nil {
		return fmt.Errorf("%w: HIP graph memory on %v: %w", ErrNotSupported, d, err)
	}
	return nil
}

// captureOf asks the runtime what capture stream takes part in.
func (b *rocmBackend) captureOf(ordinal int, stream Stream) (captureState, error) {
	d := Device{kind: KindROCm, ordinal: ordinal}
	if err := b.device(ordinal); err != nil {
		return captureState{}, err
	}
	c := hipdrv.StreamInfo(ordinal, uintptr(stream))
	if c.OtherDevice && c.Enter == hipdrv.Success {
		settleHIP(ordinal, "capture info", c.Call)
		return captureState{}, fmt.Errorf("%w: Graphs().Capture on %v with stream %#x, which belongs to rocm:%d; use a stream of %v",
			ErrInvalidArgument, d, uintptr(stream), c.StreamDevice, d)
	}
	if err := settleHIP(ordinal, "capture info", c.Call); err != nil {
		return captureState{}, err
	}
	return captureState{ID: c.Capture.ID, Capturing: c.Capture.Status != hipdrv.CaptureNone,
		Invalidated: c.Capture.Status == hipdrv.CaptureInvalidated}, nil
}

// freeGraph is never called: allocAsync makes no graph's allocation.
func (b *rocmBackend) freeGraph(ordinal int, _ int64, _ *memory, stream Stream) (uint64, error) {
	return 0, fmt.Errorf("%w: FreeAsync on %v with stream %#x of a HIP graph's allocation: memtrack makes none",
		ErrNotSupported, Device{kind: KindROCm, ordinal: ordinal}, uintptr(stream))
}

// graphStats reads the graph memory figures of device ordinal.
func (b *rocmBackend) graphStats(ordinal int) (GraphStats, error) {
	if err := b.device(ordinal); err != nil {
		return GraphStats{}, err
	}
	g, r := hipdrv.GraphGet(ordinal)
	if r != hipdrv.Success {
		return GraphStats{}, hipError("graph memory", "", r)
	}
	return GraphStats{GraphReserved: g.GraphReserved, PeakGraphReserved: g.PeakGraphReserved,
		GraphUsed: g.GraphUsed, PeakGraphUsed: g.PeakGraphUsed}, nil
}

// trimGraphs returns the graph memory of device ordinal that no graph
// uses to the device (hipDeviceGraphMemTrim).
func (b *rocmBackend) trimGraphs(ordinal int) error {
	if err := b.device(ordinal); err != nil {
		return err
	}
	if r := hipdrv.GraphTrim(ordinal); r != hipdrv.Success {
		return hipError("trim graphs", "", r)
	}
	return nil
}

// graphChunk fails: memtrack adds no node to a HIP graph, and learns no
// chunk of HIP's graph memory.
func (b *rocmBackend) graphChunk(ordinal int) (int64, bool, error) {
	return 0, false, fmt.Errorf("%w: the chunk of HIP graph memory on %v: memtrack adds no node to a HIP graph",
		ErrNotSupported, Device{kind: KindROCm, ordinal: ordinal})
}

// The ROCm backend's half of the per-process figures (processBackend): the
// compute processes rocm_smi lists on a GPU, with the VRAM the kernel
// attributes to each there (internal/rocmsmi says why rocm_smi), the GPU
// found by the PCI address the HIP runtime gives it, as
// HIP_VISIBLE_DEVICES renumbers HIP's ordinals but not rocm_smi's. rocm_smi
// is opened on the first reading, never on the allocation path, and kept
// for the life of the process.

func (b *rocmBackend) processes(ordinal int) ([]ProcessMemory, error) {
	in, err := b.deviceInfo(ordinal)
	if err != nil {
		return nil, err
	}
	u, err := b.smi.Usage(in.PCIBusID)
	if err != nil {
		return nil, err
	}
	out := make([]ProcessMemory, len(u.Processes))
	for i, p := range u.Processes {
		if !p.UsedKnown {
			lib := b.smi.Library()
			return nil, fmt.Errorf("rocm_smi (%s %s) gives process %d's memory summed over the devices it uses, not its memory on the one at %s: the call that gives it per device (rsmi_compute_process_info_by_device_get) came in ROCm 5.7",
				lib.Name, lib.Version, p.PID, in.PCIBusID)
		}
		out[i] = ProcessMemory{PID: p.PID, Name: p.Name, Used: int64(p.Used)}
	}
	return out, nil
}

// fitRules gives the ROCm backend's rules to a prediction: none, since
// AMD's reference states no rounding of hipMalloc's (docs/rocm.md), so
// that a size is predicted as asked; and no chunk of the memory pools,
// which memtrack's HIP binding does not learn.
func (b *rocmBackend) fitRules(ordinal int, pool bool) (fit.Rules, error) {
	if pool {
		return fit.Rules{}, fmt.Errorf("%w: the chunk of the HIP memory pools of rocm:%d: memtrack does not learn it; plan stream-ordered loads on a CUDA GPU", ErrNotSupported, ordinal)
	}
	return fit.Rules{AllocUnit: 1}, nil
}
