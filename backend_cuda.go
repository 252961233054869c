//go:build cuda

package memtrack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/held"
	"github.com/memtrack/memtrack/internal/nvml"
	"github.com/memtrack/memtrack/tracker"
)

// cudaBackend allocates NVIDIA GPU memory through the CUDA driver API. The
// driver is loaded at run time (dlopen of libcuda.so.1, internal/cudadrv)
// and initialised (cuInit) on the first call, once per process; where it
// cannot be, the backend is unavailable and says why. Each device's primary
// context is retained on the first use of that device, so that buffers
// interoperate with code that uses the CUDA runtime, which works in the
// same contexts. Each operation is one cgo call into the driver.
type cudaBackend struct {
	initOnce sync.Once
	n        int
	initErr  error
	devs     []cudaDevice // one per device
	sides    []deviceSide // the device-side figure of each device (heldFigure)
	nvml     nvml.Reader  // the driver's per-process figures (processBackend)
	// captureMode is what AllocAsync does on a capturing stream: allocate
	// in the capture's graph where the driver has graph memory nodes
	// (cudadrv.GraphMem), else refuse.
	captureMode cudadrv.CaptureAlloc
}

// cudaDevice is the backend's state of one device. Its atomics are
// sync/atomic's, not go.uber.org/atomic's: sync/atomic's Int64 is 8-byte
// aligned on 32-bit platforms (CUDA has run on 32-bit ARM), wherever it
// sits in the struct, and go.uber.org/atomic's is not.
type cudaDevice struct {
	ordinal int
	// ctx is the device's retained primary context; nil until a retain
	// succeeds. A failed retain is tried again by the next call.
	ctx atomic.Pointer[retained]
	mu  sync.Mutex // held while retaining
	// lost is the sticky CUresult that lost the device's context, or 0.
	lost atomic.Int32
	// restoreFailures counts operations that succeeded but could not make
	// the thread's previous context current again.
	restoreFailures atomic.Int64
	// granule is the device's allocation granularity (granularityOf); 0
	// until the driver has said.
	granule atomic.Int64
	// chunk is the chunk in which the driver reserves the device's graph
	// memory, once a probe graph learned it (graphChunk); 0 until then.
	// chunkMu is held while a probe runs, so that one runs at a time.
	chunk   atomic.Int64
	chunkMu sync.Mutex
	// pools holds the driver's answer to whether the device has memory
	// pools, once it gave one: nil where it has, the error that says so
	// where it has not (poolsSupported).
	pools atomic.Pointer[error]
	// handles holds the physical memory of each mapping of the device's
	// reservations (vmmBackend), by its address, from its map to its
	// unmap.
	vmmMu   sync.Mutex
	handles map[uintptr]cudadrv.Handle
	// poolChunk is the chunk in which the device's memory pools reserve,
	// once a probe learned it (fitRules); 0 until then. poolChunkMu is
	// held while a probe runs, so that one runs at a time.
	poolChunk   atomic.Int64
	poolChunkMu sync.Mutex
}

// retained holds a retained primary context.
type retained struct{ ctx cuContext }

// deviceSide is the device-side figure of one CUDA device (internal/held):
// the bytes the device holds for this package's buffers, in which a buffer
// freed with FreeAsync stays until its stream has executed the free, which
// it learns of through cudaEvents.
type deviceSide = held.Figure[cudadrv.Event, *cudaEvents]

// cudaEvents is how the device-side figure of one device asks the driver
// which frees in stream order have executed (held.Querier): the events
// recorded after them, queried in the device's primary context in one cgo
// call (cudadrv.StreamEvents.Query).
type cudaEvents struct {
	b       *cudaBackend
	ordinal int
	q       cudadrv.StreamEvents // the last query's
}

// Query queries the events of each stream of qs in the device's primary
// context, and writes the answers; it returns false where the device
// cannot be reached (it is lost, or its context cannot be retained).
func (q *cudaEvents) Query(qs []held.Query[cudadrv.Event]) bool {
	dev, ctx, err := q.b.device(q.ordinal, "event query")
	if err != nil {
		return false
	}
	q.q.Reset()
	for i := range qs {
		q.q.Add(qs[i].Events)
	}
	if r := q.q.Query(ctx); r != cudadrv.Success {
		dev.restoreFailed("event query", r)
	}
	for i := range qs {
		var r cudadrv.Result
		qs[i].Reached, r = q.q.Reached(i)
		qs[i].Gone = r != cudadrv.Success
	}
	return true
}

// Destroy destroys an event of a stream of another context.
func (q *cudaEvents) Destroy(e cudadrv.Event) { cudadrv.EventDestroy(e) }

func newCUDABackend() backend { return &cudaBackend{} }

// init loads and initialises the driver and counts the devices, once.
func (b *cudaBackend) init() error {
	b.initOnce.Do(func() {
		b.n, b.initErr = initDriver()
		b.devs = make([]cudaDevice, b.n)
		for i := range b.devs {
			b.devs[i].ordinal = i
		}
		b.sides = make([]deviceSide, b.n)
		for i := range b.sides {
			// The pool hands a block freed on a stream to the next
			// allocation on that stream at once (CUDA Programming Guide,
			// Stream Ordered Memory Allocator: memory reuse).
			b.sides[i].Init(&cudaEvents{b: b, ordinal: i}, true)
		}
		if b.initErr == nil && cudadrv.GraphMem() == nil {
			b.captureMode = cudadrv.AllowCapture
		}
	})
	return b.initErr
}

// initDriver loads the driver's library (cudadrv.Load), initialises it and
// counts its devices. Without the library, or without a device, the error
// matches ErrBackendUnavailable and says why.
func initDriver() (int, error) {
	if _, err := cudadrv.Load(); err != nil {
		// One prefix: the sentinel's words come after the device's.
		return 0, &callError{op: "init", err: fmt.Errorf("%w: %w", ErrBackendUnavailable, err)}
	}
	n, r := cudadrv.Init()
	if r == cudadrv.Success && n == 0 {
		r = errNoDevice
	}
	if r != cudadrv.Success {
		name, text := errorName(r)
		return 0, &callError{op: "init", code: int(r), name: name,
			err: fmt.Errorf("%w: the CUDA driver reports no usable GPU (check the NVIDIA driver with nvidia-smi): %s", ErrBackendUnavailable, text)}
	}
	return n, nil
}

func (b *cudaBackend) devices() (int, error) {
	if err := b.init(); err != nil {
		return 0, err
	}
	return b.n, nil
}

// dev returns the state of device ordinal, which must exist.
func (b *cudaBackend) dev(ordinal int) *cudaDevice { return &b.devs[ordinal] }

// device returns the state of device ordinal and its primary context,
// retaining it on first use (retaining creates the context, which takes
// device memory). It fails if the device is lost.
func (b *cudaBackend) device(ordinal int, op string) (*cudaDevice, cuContext, error) {
	if err := b.init(); err != nil {
		return nil, 0, err
	}
	if ordinal < 0 || ordinal >= b.n {
		return nil, 0, fmt.Errorf("%w: cuda:%d, this machine has %d cuda device(s)", ErrInvalidOrdinal, ordinal, b.n)
	}
	d := &b.devs[ordinal]
	if lost := d.lost.Load(); lost != 0 {
		return nil, 0, resultError(op, "the device was lost earlier", cudadrv.Result(lost))
	}
	if c := d.ctx.Load(); c != nil {
		return d, c.ctx, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.ctx.Load(); c != nil {
		return d, c.ctx, nil
	}
	c, res := cudadrv.Retain(ordinal)
	if res != cudadrv.Success {
		return nil, 0, d.failed(op, "retaining the device's primary context", res)
	}
	d.ctx.Store(&retained{c})
	return d, c, nil
}

func (b *cudaBackend) alloc(ordinal int, size int64, m *memory) error {
	d, ctx, err := b.device(ordinal, "alloc")
	if err != nil {
		return err
	}
	ptr, r := cuAlloc(ctx, size)
	if err := d.settle("alloc", r); err != nil {
		return err
	}
	m.ptr = ptr
	return nil
}

func (b *cudaBackend) free(ordinal int, _ int64, m *memory) error {
	d, ctx, err := b.device(ordinal, "free")
	if err != nil {
		return err
	}
	return d.settle("free", cuFree(ctx, m.ptr))
}

// memInfo returns cuMemGetInfo, which reports the device of the current
// context: the call makes it the device's own.
func (b *cudaBackend) memInfo(ordinal int) (free, total int64, err error) {
	d, ctx, err := b.device(ordinal, "meminfo")
	if err != nil {
		return 0, 0, err
	}
	free, total, r := cuMemInfo(ctx)
	if err := d.settle("meminfo", r); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}

// settle turns what one operation reported into its error: the operation's
// own result decides. If the context could not be made current, the
// operation did not run, and that is the error. If the operation ran but
// the thread's previous context could not be made current again, the
// operation's result stands (an allocation is returned and counted, a free
// is uncounted, so that no memory is lost from the figures); the device's
// primary context stays current on the thread, the failure is counted on
// the device and logged at level Warn on the default [slog.Logger], and, if
// the error is sticky, the device is marked lost for every later call.
func (d *cudaDevice) settle(op string, r callResult) error {
	if r.enter != cudadrv.Success {
		return d.failed(op, "making the device's primary context current", r.enter)
	}
	if r.restore != cudadrv.Success {
		d.restoreFailed(op, r.restore)
	}
	if r.op != cudadrv.Success {
		return d.failed(op, "", r.op)
	}
	return nil
}

// failed returns the error of a failed step of op, marking the device lost
// if the error is sticky.
func (d *cudaDevice) failed(op, stage string, res cudadrv.Result) error {
	if cudadrv.Sticky(res) {
		d.lost.CompareAndSwap(0, int32(res))
	}
	return resultError(op, stage, res)
}

func (d *cudaDevice) restoreFailed(op string, res cudadrv.Result) {
	d.restoreFailures.Add(1)
	if cudadrv.Sticky(res) {
		d.lost.CompareAndSwap(0, int32(res))
	}
	name, text := errorName(res)
	slog.Default().LogAttrs(context.Background(), slog.LevelWarn,
		"memtrack: the CUDA operation succeeded, but the thread's previous context could not be made current again; the device's primary context stays current on the thread",
		slog.String("device", Device{kind: KindCUDA, ordinal: d.ordinal}.String()),
		slog.String("op", op),
		slog.Int("code", int(res)),
		slog.String("name", name),
		slog.String("error", text))
}

// cuContext is a CUDA context as the driver gives it.
type cuContext = cudadrv.Context

// callResult is what one operation reports: the results of making the
// context current, of the operation, and of restoring the previous context.
type callResult struct {
	enter, op, restore cudadrv.Result
}

func resultOf(r cudadrv.Call) callResult {
	return callResult{enter: r.Enter, op: r.Op, restore: r.Restore}
}

// cuAlloc runs cuMemAlloc in ctx.
func cuAlloc(ctx cuContext, size int64) (uintptr, callResult) {
	p, r := cudadrv.Alloc(ctx, size)
	return p, resultOf(r)
}

// cuFree runs cuMemFree in ctx.
func cuFree(ctx cuContext, ptr uintptr) callResult { return resultOf(cudadrv.Free(ctx, ptr)) }

// cuMemInfo runs cuMemGetInfo in ctx.
func cuMemInfo(ctx cuContext) (free, total int64, _ callResult) {
	f, t, r := cudadrv.MemInfo(ctx)
	return f, t, resultOf(r)
}

// errNoDevice is CUDA_ERROR_NO_DEVICE, what the driver says where it has no
// GPU to show.
const errNoDevice cudadrv.Result = 100

// resultError is the error of a failed driver call during op, as the seam
// has it (callError): out of memory for CUDA_ERROR_OUT_OF_MEMORY, the
// device lost where the error is sticky. stage, if not "", says which step
// of op failed.
func resultError(op, stage string, res cudadrv.Result) error {
	name, text := errorName(res)
	if stage != "" {
		text = stage + ": " + text
	}
	e := &callError{op: op, code: int(res), name: name}
	switch {
	case res == cudadrv.OutOfMemory:
		reason := "the CUDA driver refused it: " + name
		if stage != "" {
			reason = stage + ": " + reason
		}
		e.oom, e.err = true, errors.New(reason)
	case cudadrv.Sticky(res):
		e.lost, e.err = true, errors.New(text+" (the CUDA context is unusable until the process restarts)")
	case res == cudadrv.CaptureUnsupported:
		// The program's call (AllocAsync, FreeAsync), refused as the raw
		// call would be: memtrack's own calls run in relaxed mode.
		e.err = fmt.Errorf("%w: %s: a CUDA graph capture is under way (one begun in global mode on any thread, or one of this thread's own), during which the driver prohibits this call outside relaxed mode, and it invalidated that capture; make the call in relaxed mode (cuThreadExchangeStreamCaptureMode), or capture in thread-local mode on another thread",
			ErrNotSupported, text)
	default:
		e.err = errors.New(text)
	}
	return e
}

// errorName returns the name and description of res: the driver's, which
// knows every code of its version, or else cuda.h's name of the usual codes
// (cudadrv.Name: where cuInit failed, or the library is the link stub,
// which answers every call, cuGetErrorName too, with
// CUDA_ERROR_STUB_LIBRARY), or else "CUresult N".
func errorName(res cudadrv.Result) (name, text string) {
	name, text = cudadrv.ErrorName(res)
	if name == "" {
		name = cudadrv.Name(res)
	}
	if name == "" {
		name = "CUresult " + strconv.Itoa(int(res))
	}
	if text == "" {
		text = "CUresult " + strconv.Itoa(int(res))
	}
	return name, text
}

// The CUDA backend's half of Device.Info: the GPU's name and UUID, in one
// cgo call (cudadrv.DeviceInfo), which a metrics scrape may repeat for ever.

// info returns the GPU's name and its UUID as nvidia-smi prints it, or ""
// for the UUID where the driver lacks cuDeviceGetUuid_v2 (before CUDA
// 11.4). Neither needs a context, so none is retained.
func (b *cudaBackend) info(ordinal int) (name, uuid string, err error) {
	if err := b.init(); err != nil {
		return "", "", err
	}
	if ordinal < 0 || ordinal >= b.n {
		return "", "", fmt.Errorf("%w: cuda:%d, this machine has %d cuda device(s)", ErrInvalidOrdinal, ordinal, b.n)
	}
	name, u, r := cudadrv.DeviceInfo(ordinal)
	if r != cudadrv.Success {
		return "", "", b.dev(ordinal).failed("info", "", r)
	}
	if cudadrv.UUIDs() != nil {
		return name, "", nil // a driver before CUDA 11.4: no UUID to tell
	}
	uuid = formatGPUUUID(u)
	if isMIG(name) {
		// A MIG instance's UUID: cuDeviceGetUuid_v2 returns it for a device
		// in MIG mode, and nvidia-smi -L and CUDA_VISIBLE_DEVICES write it
		// with the prefix MIG-.
		uuid = "MIG-" + strings.TrimPrefix(uuid, "GPU-")
	}
	return name, uuid, nil
}

// isMIG reports whether name is that of a MIG instance, which the driver
// names after its GPU and profile: "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
func isMIG(name string) bool {
	_, profile, ok := strings.Cut(name, " MIG ")
	return ok && strings.Contains(profile, "g.")
}

// formatGPUUUID writes the 16 bytes of a CUDA device's UUID as nvidia-smi
// and dcgm-exporter do: "GPU-", then the bytes in hex, in order, grouped
// 8-4-4-4-12.
func formatGPUUUID(b [16]byte) string {
	const hexDigits = "0123456789abcdef"
	out := make([]byte, 0, len("GPU-")+36)
	out = append(out, "GPU-"...)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return string(out)
}

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync) on each
// device's current memory pool, and the device-side figure: the bytes the
// device holds for this package's buffers, in which a buffer freed with
// FreeAsync stays until its stream has executed the free. Each call is one
// cgo call of internal/cudadrv, which makes the stream's context current,
// operates and restores the thread's context, so that the goroutine need
// not be locked to its thread.

// FreeAsync learns that its stream has executed the free by an event
// recorded after it (cuEventRecord), in the same cgo call; the figures are
// read after querying the pending events (cuEventQuery), as PyTorch's and
// CuPy's allocators learn of their frees. A query that fails (a context
// error: nothing will run on the device again) retires the free too. A
// host function enqueued after the free (cuLaunchHostFunc) would cost
// more, as the driver's reference says: it blocks the work enqueued after
// it on its stream, host functions of different streams may be
// serialized, and none is called after a context error, so that a free
// behind a kernel fault would stay in the device-side figure.
//
// The event is recorded inside FreeAsync, where the program hands memtrack
// the stream: a reading never calls the driver with a stream of the
// program's, which the program may have destroyed since (its handle then
// names nothing, or another stream), or may be capturing, begun after any
// check a reading could make (a query of a capturing stream fails and
// invalidates its capture; an event recorded there becomes the graph's).
//
// An event captures all the work enqueued on its stream before it
// (cuEventRecord), so where a stream has reached the event after one free,
// it has executed every free enqueued on it before: a reading queries each
// stream's newest pending event first, and one answer retires all the
// stream's frees; where the stream has not reached it, bisection finds the
// first free not executed.
//
// The pool hands a block freed on a stream to the next allocation on that
// stream at once, the allocation being ordered after the free there (the
// driver's reference, Stream Ordered Memory Allocator: the allocator "may
// refer to internal stream ordering"), and on an H200 two buffers of
// 64 MiB allocated and freed in turn on one stream behind a busy stream
// left the pool's USED_MEM_HIGH at 64 MiB: an allocation takes over the
// bytes of the frees pending on its stream (held.Figure.Add).

// The device-side figure of each CUDA device is a held.Figure (deviceSide,
// backend_cuda.go): this file gives it the frees of FreeAsync with their
// events, and the backend's heldFigure capability reads it.

// keyOf names the stream of a free for the device-side figure of a device:
// its handle, the legacy default stream by 0 whichever of its two handles
// named it. A default stream's handle names the default stream of the
// device's primary context, in which memtrack runs it, and any other
// handle one stream of the process, of whatever context: the handle alone
// names the stream. The per-thread default stream, whose handle names
// another stream on each thread, is not ordered.
func keyOf(stream Stream) held.Stream {
	h := uintptr(stream)
	if h == cudadrv.StreamLegacy {
		h = 0
	}
	return held.Stream{Handle: h, Ordered: h != cudadrv.StreamPerThread}
}

// side returns the device-side figure of device ordinal, or nil if there
// is no such device.
func (b *cudaBackend) side(ordinal int) *deviceSide {
	if b.init() != nil || ordinal < 0 || ordinal >= len(b.sides) {
		return nil
	}
	return &b.sides[ordinal]
}

// The device-side figure is the CUDA backend's capability (heldFigure),
// which deviceTable.held holds.

// heldOrder and heldAdd are called on the allocation path, after the
// device was looked up in its table, which the backend's initialisation
// made before the table was published: they index the figures without
// asking init again.

func (b *cudaBackend) heldOrder(ordinal int) uint64 {
	if uint(ordinal) < uint(len(b.sides)) {
		return uint64(b.sides[ordinal].Order())
	}
	return 0
}

func (b *cudaBackend) heldAdd(ordinal int, size int64, stream Stream, at uint64, pooled bool) {
	if uint(ordinal) < uint(len(b.sides)) {
		b.sides[ordinal].Add(size, pooled, keyOf(stream).Handle, held.Order(at)) // the peak leaves out what is known freed
	}
}

func (b *cudaBackend) heldDrop(ordinal int, size int64, pooled bool) {
	if sd := b.side(ordinal); sd != nil {
		sd.Drop(size, pooled)
	}
}

func (b *cudaBackend) held(ordinal int) (cur, peak int64) {
	sd := b.side(ordinal)
	if sd == nil {
		return 0, 0
	}
	return sd.Load()
}

// resetHeldPeak sets the device-side peak of device ordinal to its current
// figure, and the high-water marks of its memory pool and of its graph
// memory, where it has them, as the driver resets them.
func (b *cudaBackend) resetHeldPeak(ordinal int) {
	if sd := b.side(ordinal); sd != nil {
		sd.ResetPeak()
		if pool, err := b.pool(ordinal); err == nil {
			cudadrv.PoolResetHighs(pool)
		}
		b.resetGraphHighs(ordinal)
	}
}

// openHeldScope opens a peak scope on the device-side figure, after
// uncounting the stream-ordered frees known to have executed, so that it
// starts from the figure the device holds.
func (b *cudaBackend) openHeldScope(ordinal int) *tracker.Scope {
	sd := b.side(ordinal)
	if sd == nil {
		return nil
	}
	return sd.OpenScope()
}

// heldScopePeak reads the peak of a scope of openHeldScope after learning
// which stream-ordered frees have executed, as held does.
func (b *cudaBackend) heldScopePeak(ordinal int, sc *tracker.Scope) int64 {
	if sc == nil {
		return 0
	}
	if sd := b.side(ordinal); sd != nil {
		return sd.ScopePeak(sc)
	}
	return sc.Peak()
}

// closeHeldScope closes a scope of openHeldScope.
func (b *cudaBackend) closeHeldScope(ordinal int, sc *tracker.Scope) error {
	if sc == nil {
		return nil
	}
	if sd := b.side(ordinal); sd != nil {
		return sd.CloseScope(sc)
	}
	_, err := sc.Close()
	return err
}

// Stream-ordered allocation and the memory pools are the CUDA backend's
// capability (streamBackend), which deviceTable.stream holds: Device.take
// uses it for AllocAsync, deviceTable.release for Buffer.FreeAsync, and
// Pool's calls for theirs.

// poolsSupported fails where device ordinal has no memory pools; it asks
// the driver until the driver answers, and keeps the answer. Where the
// driver does not answer (a lost device), nothing is known of the pools,
// and the call goes on to the driver, which refuses it: AllocAsync then
// fails, counted, as Alloc does.
func (b *cudaBackend) poolsSupported(ordinal int) error {
	if b.init() != nil || ordinal < 0 || ordinal >= len(b.devs) {
		return fmt.Errorf("%w: cuda:%d has no CUDA memory pool", ErrNotSupported, ordinal)
	}
	dev := b.dev(ordinal)
	if p := dev.pools.Load(); p != nil {
		return *p
	}
	answered, err := poolsSupported(Device{kind: KindCUDA, ordinal: ordinal})
	if !answered {
		return nil
	}
	dev.pools.CompareAndSwap(nil, &err)
	return *dev.pools.Load()
}

// allocInCapture is allocAsync where stream captures a graph, and
// allocates nothing where it does not. Where the device cannot be reached,
// nothing is known of the stream, and nothing is refused: the limit's
// refusal stands.
func (b *cudaBackend) allocInCapture(ordinal int, size int64, stream Stream, m *memory) (uint64, error) {
	_, ctx, err := b.device(ordinal, "alloc")
	if err != nil {
		return 0, nil
	}
	if b.captureMode == cudadrv.RefuseCapture {
		// No graph memory nodes: the stream is checked, nothing allocated.
		if cs := cudadrv.CheckStream(ctx, uintptr(stream)); cs.Enter == cudadrv.Success && (cs.OtherDevice || cs.Capturing) {
			return 0, uncounted{refusedStream("AllocAsync", Device{kind: KindCUDA, ordinal: ordinal}, stream, cs)}
		}
		return 0, nil
	}
	return b.allocIn(ordinal, size, stream, m, cudadrv.OnlyCapture)
}

// allocAsync allocates size bytes on device ordinal from its current pool
// in stream order (cuMemAllocAsync); on a stream whose capture is active,
// in the capture's graph, where the driver has graph memory nodes.
func (b *cudaBackend) allocAsync(ordinal int, size int64, stream Stream, m *memory) (uint64, error) {
	return b.allocIn(ordinal, size, stream, m, b.captureMode)
}

// allocIn is allocAsync with what it does on a capturing stream (mode).
func (b *cudaBackend) allocIn(ordinal int, size int64, stream Stream, m *memory, mode cudadrv.CaptureAlloc) (uint64, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "alloc")
	if err != nil {
		return 0, err // a lost device, or its context not retained: counted, as Alloc's
	}
	a := cudadrv.AllocAsyncIn(ctx, size, uintptr(stream), mode)
	if (a.OtherDevice || a.Capturing) && a.Enter == cudadrv.Success {
		return b.inCapture(dev, d, stream, a, m)
	}
	if err := dev.settle("alloc", resultOf(a.Call)); err != nil {
		return 0, err
	}
	m.ptr = a.Ptr
	return 0, nil
}

// inCapture settles an allocation that a met on a stream of another device
// or a capturing one: refused, as bad input, where nothing was allocated
// (cuMemAllocAsync would have allocated on the stream's device, or in a
// graph memtrack does not allocate in), and a graph's allocation, in the
// capture whose ID it returns, where the driver made one. A graph's
// allocation that the driver refuses is counted nowhere; where the refusal
// left the capture invalidated, the error says which (invalidatedIn). The
// device's first graph allocation learns the device's graph chunk
// (graphChunk), most likely before any graph has reserved memory.
func (b *cudaBackend) inCapture(dev *cudaDevice, d Device, stream Stream, a cudadrv.StreamCall, m *memory) (uint64, error) {
	if a.OtherDevice || (a.Ptr == 0 && a.Op == cudadrv.Success) {
		dev.settle("alloc", resultOf(a.Call)) // a failed restore is logged there
		return 0, uncounted{refusedStream("AllocAsync", d, stream, a)}
	}
	if err := dev.settle("alloc", resultOf(a.Call)); err != nil {
		if a.Invalidated {
			err = &invalidatedIn{id: a.CaptureID, err: err}
		}
		return 0, uncounted{err}
	}
	m.ptr = a.Ptr
	if dev.chunk.Load() == 0 {
		b.graphChunk(d.ordinal) // where it cannot learn it yet, a reading tries again
	}
	return a.CaptureID, nil
}

// freeAsync frees m in stream order (cuMemFreeAsync) and learns when the
// stream executes the free, by an event recorded after it; an allocation
// on the stream may take the free's bytes over before then.
func (b *cudaBackend) freeAsync(ordinal int, size int64, m *memory, stream Stream) error {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	sd := &b.sides[ordinal] // the buffer's allocAsync found the device
	dev, ctx, err := b.device(ordinal, "free")
	if err != nil {
		return err
	}
	spare, taken := sd.TakeSpare() // an event reached, to record again
	f := cudadrv.FreeAsync(ctx, m.ptr, uintptr(stream), spare)
	if taken && f.SpareUnused {
		sd.PutSpare(spare) // the stream's context needs an event of its own
		taken = false
	}
	if (f.OtherDevice || f.Capturing) && f.Enter == cudadrv.Success {
		dev.settle("free", resultOf(f.Call)) // a failed restore is logged there
		if taken {
			sd.PutSpare(spare)
		}
		return refusedStream("FreeAsync", d, stream, f)
	}
	// The free's own result decides (see settle): a failure to restore the
	// thread's context is logged and counted there, and the free stands.
	if err := dev.settle("free", resultOf(f.Call)); err != nil {
		if taken {
			sd.PutSpare(spare)
		}
		return err
	}
	if f.Retired {
		// The event could not be recorded; the stream was synchronized.
		switch {
		case f.Event.IsZero():
		case f.Foreign:
			cudadrv.EventDestroy(f.Event)
		default:
			sd.PutSpare(f.Event)
		}
		sd.Drop(size, true)
		return nil
	}
	sd.Freed(held.Free[cudadrv.Event]{Event: f.Event, Stream: keyOf(stream), Seq: f.Seq, Size: size, Foreign: f.Foreign})
	return nil
}

// refusedStream is the error of a stream-ordered call on d that c found
// with a stream of another device, which the driver would run on that
// device, or with a stream that is capturing a CUDA graph, where memtrack
// does not run it: a capture the driver invalidated, a driver without
// graph memory nodes, or a FreeAsync of a buffer that no graph allocated.
func refusedStream(op string, d Device, stream Stream, c cudadrv.StreamCall) error {
	if c.OtherDevice {
		return fmt.Errorf("%w: %s on %v with stream %#x, which belongs to cuda:%d: a stream-ordered call runs on its stream's device; use a stream of %v",
			ErrInvalidArgument, op, d, uintptr(stream), c.StreamDevice, d)
	}
	switch {
	case c.CaptureStatus == cudadrv.CaptureInvalidated:
		return fmt.Errorf("%w: %s on %v with stream %#x, whose CUDA graph capture the driver invalidated: it ends with no graph; end it (cuStreamEndCapture) and capture again",
			ErrNotSupported, op, d, uintptr(stream))
	case op == "FreeAsync":
		return fmt.Errorf("%w: FreeAsync on %v with stream %#x, which is capturing a CUDA graph, of a buffer that no graph allocated: a graph's free node takes only an allocation of a graph (cuGraphAddMemFreeNode), and the launch, when the free would run, is the program's; free the buffer before the capture begins or after it ends",
			ErrNotSupported, d, uintptr(stream))
	}
	why := "the driver gives no capture ID"
	if err := cudadrv.GraphMem(); err != nil {
		why = err.Error()
	}
	return fmt.Errorf("%w: %s on %v with stream %#x, which is capturing a CUDA graph: memtrack allocates in a capture only with the driver's graph memory nodes (CUDA 11.4), and %s; allocate before the capture begins, or after it ends",
		ErrNotSupported, op, d, uintptr(stream), why)
}

// The figures and controls of each CUDA device's current memory pool, the
// one AllocAsync allocates from: cuMemAllocAsync takes
// memory from the pool current to the stream's device (cuDeviceGetMemPool),
// which is the default pool unless cuDeviceSetMemPool set another, so the
// pool is looked up at every reading.

// poolsSupported fails where CUDA device d has no memory pools, or its
// driver lacks the calls of stream-ordered allocation (CUDA 11.2);
// answered is false where the driver could not say.
func poolsSupported(d Device) (answered bool, err error) {
	if err := cudadrv.MemPools(); err != nil {
		return true, fmt.Errorf("%w: stream-ordered allocation on %v: %w; allocate with Device.Alloc instead", ErrNotSupported, d, err)
	}
	supported, r := cudadrv.PoolsSupported(d.ordinal)
	if r != cudadrv.Success {
		return false, nil
	}
	if !supported {
		return true, fmt.Errorf("%w: %v has no memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0): stream-ordered allocation needs CUDA 11.2 or later and a device that supports it; allocate with Device.Alloc instead",
			ErrNotSupported, d)
	}
	return true, nil
}

// currentPool returns the current memory pool of CUDA device d.
func currentPool(d Device) (cudadrv.Pool, error) {
	p, r := cudadrv.MemPool(d.ordinal)
	if r != cudadrv.Success {
		return p, resultError("memory pool", "", r)
	}
	return p, nil
}

// pool returns the current memory pool of device ordinal.
func (b *cudaBackend) pool(ordinal int) (cudadrv.Pool, error) {
	return currentPool(Device{kind: KindCUDA, ordinal: ordinal})
}

// poolStats reads the figures of the current pool of device ordinal.
func (b *cudaBackend) poolStats(ordinal int) (PoolStats, error) {
	pool, err := b.pool(ordinal)
	if err != nil {
		return PoolStats{}, err
	}
	s, r := cudadrv.PoolGet(pool)
	if r != cudadrv.Success {
		return PoolStats{}, resultError("memory pool", "", r)
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
func (b *cudaBackend) pooled(ordinal int) int64 {
	if sd := b.side(ordinal); sd != nil {
		return sd.Pooled()
	}
	return 0
}

// trimPool trims the current pool of device ordinal to keep bytes
// (cuMemPoolTrimTo).
func (b *cudaBackend) trimPool(ordinal int, keep int64) error {
	pool, err := b.pool(ordinal)
	if err != nil {
		return err
	}
	if r := cudadrv.PoolTrimTo(pool, keep); r != cudadrv.Success {
		return resultError("trim pool", "", r)
	}
	return nil
}

// setReleaseThreshold sets the release threshold of the current pool of
// device ordinal (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
func (b *cudaBackend) setReleaseThreshold(ordinal int, bytes int64) error {
	pool, err := b.pool(ordinal)
	if err != nil {
		return err
	}
	if r := cudadrv.PoolSetReleaseThreshold(pool, bytes); r != cudadrv.Success {
		return resultError("set release threshold", "", r)
	}
	return nil
}

// CUDA graph memory is the CUDA backend's capability, with stream-ordered
// allocation (streamBackend): allocAsync allocates in a capture's graph
// (above), and these read what the driver says of captures and of
// the memory it keeps for graphs, free a graph's allocation, and trim.
// Each is one cgo call.

// graphsSupported fails where the driver has no graph memory nodes (CUDA
// before 11.4, or without one of their calls).
func (b *cudaBackend) graphsSupported(ordinal int) error {
	if b.captureMode == cudadrv.AllowCapture {
		return nil
	}
	d := Device{kind: KindCUDA, ordinal: ordinal}
	if err := cudadrv.GraphMem(); err != nil {
		return fmt.Errorf("%w: CUDA graph memory on %v: %w", ErrNotSupported, d, err)
	}
	return fmt.Errorf("%w: CUDA graph memory on %v: the CUDA driver is unavailable", ErrNotSupported, d)
}

// graphChunk returns the chunk in which the driver reserves the graph
// memory of device ordinal: one graph's memory is its peak footprint
// rounded up to it, and an allocation that outlives its launch pins every
// chunk it lies in (32 MiB on an NVIDIA H200 with driver 580.159.04). NVIDIA documents
// no chunk, so memtrack learns it from the driver, once per device: a probe
// graph of one 1-byte allocation node (cudadrv.GraphChunk), made on a
// stream of its own and in relaxed capture mode, uploaded, measured by the
// growth of the device's reserved graph memory, destroyed and trimmed.
// The probe runs only on a device that holds no graph memory, where the
// trim returns its reservation alone and no finished graph's memory could
// serve it; a device that holds some is not probed now, and learned is
// false: the chunk returned is then the greatest common divisor of the
// device's reserved graph memory and its high-water mark, both whole
// chunks, so a multiple of the chunk, which rounds no graph below what the
// driver reserves. One probe runs at a time per device (chunkMu); once
// learned, the chunk is an atomic load.
func (b *cudaBackend) graphChunk(ordinal int) (chunk int64, learned bool, err error) {
	dev, ctx, err := b.device(ordinal, "graph chunk")
	if err != nil {
		return 0, false, err
	}
	if c := dev.chunk.Load(); c > 0 {
		return c, true, nil
	}
	dev.chunkMu.Lock()
	defer dev.chunkMu.Unlock()
	if c := dev.chunk.Load(); c > 0 {
		return c, true, nil
	}
	p, c := cudadrv.GraphChunk(ctx)
	probeErr := dev.settle("graph chunk", resultOf(c))
	if probeErr == nil && p.Chunk > 0 {
		dev.chunk.Store(p.Chunk)
		return p.Chunk, true, nil
	}
	g := p.Before // where the probe did not run, the figures it found
	if p.Ran || probeErr != nil {
		g, c = cudadrv.GraphGet(ctx)
		if err := dev.settle("graph chunk", resultOf(c)); err != nil {
			return 0, false, cmp.Or(probeErr, err)
		}
	}
	if bound := gcd(g.GraphReserved, g.PeakGraphReserved); bound > 0 {
		return bound, false, nil
	}
	if probeErr != nil {
		return 0, false, probeErr
	}
	return 0, false, fmt.Errorf("%w: the chunk of CUDA graph memory on cuda:%d: the probe graph reserved nothing alone (%d bytes reserved after it), and the device holds no graph memory to bound it",
		ErrNotSupported, ordinal, p.After)
}

// gcd is the greatest common divisor of a and b, both at least 0.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// granularityOf returns dev's allocation granularity, which the driver
// gives (cudadrv.Granularity) and dev keeps.
func granularityOf(dev *cudaDevice) (int64, error) {
	if g := dev.granule.Load(); g != 0 {
		return g, nil
	}
	n, _, r := cudadrv.Granularity(dev.ordinal)
	if r != cudadrv.Success {
		return 0, resultError("allocation granularity", "asking the device's allocation granularity", r)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: cuda:%d: the driver gives an allocation granularity of %d bytes", ErrNotSupported, dev.ordinal, n)
	}
	dev.granule.Store(n)
	return n, nil
}

// captureOf asks the driver what capture stream takes part in.
func (b *cudaBackend) captureOf(ordinal int, stream Stream) (captureState, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "capture info")
	if err != nil {
		return captureState{}, err
	}
	c := cudadrv.CheckStream(ctx, uintptr(stream))
	if c.OtherDevice && c.Enter == cudadrv.Success {
		dev.settle("capture info", resultOf(c.Call))
		return captureState{}, fmt.Errorf("%w: Graphs().Capture on %v with stream %#x, which belongs to cuda:%d; use a stream of %v",
			ErrInvalidArgument, d, uintptr(stream), c.StreamDevice, d)
	}
	if err := dev.settle("capture info", resultOf(c.Call)); err != nil {
		return captureState{}, err
	}
	return captureState{ID: c.CaptureID, Capturing: c.Capturing, Invalidated: c.CaptureStatus == cudadrv.CaptureInvalidated}, nil
}

// freeGraph frees m, a graph's allocation, on stream (cuMemFreeAsync, no
// event: the memory is the graph's, in no figure that waits for the free).
func (b *cudaBackend) freeGraph(ordinal int, size int64, m *memory, stream Stream) (uint64, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "free")
	if err != nil {
		return 0, err
	}
	f := cudadrv.FreeGraph(ctx, m.ptr, uintptr(stream))
	if (f.OtherDevice || f.CaptureStatus == cudadrv.CaptureInvalidated) && f.Enter == cudadrv.Success {
		dev.settle("free", resultOf(f.Call)) // a failed restore is logged there
		return 0, refusedStream("FreeAsync", d, stream, f)
	}
	if err := dev.settle("free", resultOf(f.Call)); err != nil {
		if f.Invalidated {
			return 0, &invalidatedIn{id: f.CaptureID, err: err}
		}
		return f.CaptureID, err // a free node refused in the active capture, which goes on
	}
	return f.CaptureID, nil
}

// graphStats reads the graph memory figures of device ordinal.
func (b *cudaBackend) graphStats(ordinal int) (GraphStats, error) {
	dev, ctx, err := b.device(ordinal, "graph memory")
	if err != nil {
		return GraphStats{}, err
	}
	g, c := cudadrv.GraphGet(ctx)
	if err := dev.settle("graph memory", resultOf(c)); err != nil {
		return GraphStats{}, err
	}
	return GraphStats{GraphReserved: g.GraphReserved, PeakGraphReserved: g.PeakGraphReserved,
		GraphUsed: g.GraphUsed, PeakGraphUsed: g.PeakGraphUsed}, nil
}

// trimGraphs returns the graph memory of device ordinal that no graph
// uses to the device (cuDeviceGraphMemTrim).
func (b *cudaBackend) trimGraphs(ordinal int) error {
	dev, ctx, err := b.device(ordinal, "trim graphs")
	if err != nil {
		return err
	}
	return dev.settle("trim graphs", resultOf(cudadrv.GraphTrim(ctx)))
}

// resetGraphHighs resets the graph memory high-water marks of device
// ordinal, where its driver has graph memory (cuDeviceSetGraphMemAttribute
// accepts 0 alone for them).
func (b *cudaBackend) resetGraphHighs(ordinal int) {
	if b.captureMode != cudadrv.AllowCapture {
		return
	}
	if dev, ctx, err := b.device(ordinal, "reset graph highs"); err == nil {
		dev.settle("reset graph highs", resultOf(cudadrv.GraphResetHighs(ctx)))
	}
}

// The CUDA backend's half of the per-process figures (processBackend): the
// processes NVML lists on a GPU, found by the UUID the CUDA driver gives it,
// as CUDA_VISIBLE_DEVICES renumbers CUDA's ordinals but not NVML's. NVML is
// opened on the first reading, never on the allocation path, and kept for
// the life of the process, as the primary contexts are.

func (b *cudaBackend) processes(ordinal int) ([]ProcessMemory, error) {
	_, uuid, err := b.info(ordinal)
	if err != nil {
		return nil, err
	}
	if uuid == "" {
		return nil, fmt.Errorf("NVML finds a GPU by its UUID: %w", cudadrv.UUIDs())
	}
	list, err := b.nvml.Processes(uuid)
	if err != nil {
		return nil, err
	}
	out := make([]ProcessMemory, len(list))
	for i, p := range list {
		out[i] = ProcessMemory{PID: p.PID, Name: p.Name, Used: int64(p.Used)}
	}
	return out, nil
}

// The CUDA backend's elastic memory (vmmBackend): virtual memory management
// (CUDA 10.2; CUDA Programming Guide, "Virtual Memory Management"). A
// reservation is cuMemAddressReserve, aligned to the device's minimum
// granularity, and cuMemAddressFree; a map is cuMemCreate of pinned memory
// on the device, cuMemMap and cuMemSetAccess (read and write for the
// device), an unmap cuMemUnmap and cuMemRelease: each in one cgo call
// (internal/cudadrv), in the device's primary context and in relaxed
// stream-capture mode. The driver frees physical memory once it is both
// unmapped and released, so a mapping's memory exists exactly from its map
// to its unmap.

// vmmGranularity returns the device's minimum granularity, in which every
// size and address of a reservation and a mapping is a multiple; it fails,
// wrapping ErrNotSupported, where the driver lacks the calls or the device
// the support (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED).
func (b *cudaBackend) vmmGranularity(ordinal int) (int64, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, _, err := b.device(ordinal, "reserve")
	if err != nil {
		return 0, err
	}
	if err := cudadrv.VMM(); err != nil {
		return 0, fmt.Errorf("%w: virtual memory management on %v: %w", ErrNotSupported, d, err)
	}
	ok, r := cudadrv.VMMSupported(ordinal)
	if r != cudadrv.Success {
		return 0, dev.failed("reserve", "asking whether the device supports virtual memory management", r)
	}
	if !ok {
		return 0, fmt.Errorf("%w: virtual memory management on %v: the device does not support it (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)", ErrNotSupported, d)
	}
	return granularityOf(dev)
}

func (b *cudaBackend) reserve(ordinal int, size, granularity int64) (uintptr, error) {
	dev, ctx, err := b.device(ordinal, "reserve")
	if err != nil {
		return 0, err
	}
	ptr, c := cudadrv.AddressReserve(ctx, size, granularity)
	if err := dev.settle("reserve", resultOf(c)); err != nil {
		return 0, err
	}
	return ptr, nil
}

func (b *cudaBackend) mapAt(ordinal int, ptr uintptr, size int64, m *memory) error {
	dev, ctx, err := b.device(ordinal, "map")
	if err != nil {
		return err
	}
	h, v := cudadrv.Map(ctx, ordinal, ptr, size)
	if err := dev.settleVMM("map", v); err != nil {
		if v.Step != cudadrv.StepNone && v.Undo != cudadrv.Success {
			name, text := errorName(v.Undo)
			if e, ok := err.(*callError); ok {
				e.err = fmt.Errorf("%w; undoing the steps before it failed too (%s: %s), and %d bytes of physical memory are left behind", e.err, name, text, size)
			}
		}
		return err
	}
	dev.vmmMu.Lock()
	if dev.handles == nil {
		dev.handles = make(map[uintptr]cudadrv.Handle)
	}
	dev.handles[ptr] = h
	dev.vmmMu.Unlock()
	m.ptr = ptr
	return nil
}

// unmap unmaps the mapping and releases its memory. Where cuMemUnmap
// succeeds and cuMemRelease fails, the range is unmapped all the same, and
// the unmap succeeds; the memory the driver still holds is logged at level
// Warn on the default [slog.Logger], and a return check
// (Device.StartReturnCheck) finds it not given back.
func (b *cudaBackend) unmap(ordinal int, size int64, m *memory) error {
	dev, ctx, err := b.device(ordinal, "unmap")
	if err != nil {
		return err
	}
	dev.vmmMu.Lock()
	h := dev.handles[m.ptr]
	dev.vmmMu.Unlock()
	v := cudadrv.Unmap(ctx, m.ptr, size, h)
	if v.Step == cudadrv.StepRelease && v.Enter == cudadrv.Success {
		name, text := errorName(v.Op)
		slog.Default().LogAttrs(context.Background(), slog.LevelWarn,
			"memtrack: the mapping was unmapped, but the driver refused to release its physical memory, which it keeps",
			slog.String("device", Device{kind: KindCUDA, ordinal: ordinal}.String()),
			slog.Int64("bytes", size),
			slog.String("name", name),
			slog.String("error", text))
		v.Op, v.Step = cudadrv.Success, cudadrv.StepNone
	}
	if err := dev.settleVMM("unmap", v); err != nil {
		return err
	}
	dev.vmmMu.Lock()
	delete(dev.handles, m.ptr)
	dev.vmmMu.Unlock()
	return nil
}

func (b *cudaBackend) freeSpace(ordinal int, base uintptr, size int64) error {
	dev, ctx, err := b.device(ordinal, "release")
	if err != nil {
		return err
	}
	return dev.settle("release", resultOf(cudadrv.AddressFree(ctx, base, size)))
}

// reservedResident has no figure: a return check reads NVML's per-process
// figure in Usage.
func (*cudaBackend) reservedResident(int) (int64, bool) { return 0, false }

// settleVMM is settle for a map or an unmap, whose failed step names the
// driver call that failed.
func (d *cudaDevice) settleVMM(op string, v cudadrv.VMMCall) error {
	if v.Enter != cudadrv.Success {
		return d.failed(op, "making the device's primary context current", v.Enter)
	}
	if v.Restore != cudadrv.Success {
		d.restoreFailed(op, v.Restore)
	}
	if v.Op != cudadrv.Success {
		return d.failed(op, v.Step.String(), v.Op)
	}
	return nil
}
