//go:build cuda

package memtrack

import (
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

// cudaDevice is the backend's state of one device.
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
	// granule is the device's allocation granularity, in which the driver
	// maps graph memory (graphGranule); 0 until the driver has said.
	granule atomic.Int64
	// pools holds the driver's answer to whether the device has memory
	// pools, once it gave one: nil where it has, the error that says so
	// where it has not (poolsSupported).
	pools atomic.Pointer[error]
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

// Query queries the events of each stream, events[ends[i-1]:ends[i]], in
// the device's primary context; it returns false where the device cannot
// be reached (it is lost, or its context cannot be retained).
func (q *cudaEvents) Query(events []cudadrv.Event, ends []int) bool {
	_, ctx, err := q.b.device(q.ordinal, "event query")
	if err != nil {
		return false
	}
	q.q.Query(ctx, events, ends)
	return true
}

// Reached returns how many of stream i's events the stream has reached,
// and whether the driver's answer was a success.
func (q *cudaEvents) Reached(i int) (int, bool) {
	n, r := q.q.Reached(i)
	return n, r == cudadrv.Success
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
			b.sides[i].Init(&cudaEvents{b: b, ordinal: i})
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
		return 0, &BackendError{Device: Device{kind: KindCUDA}, Op: "init", Err: fmt.Errorf("%w: %w", ErrBackendUnavailable, err)}
	}
	n, r := cudadrv.Init()
	if r == cudadrv.Success && n == 0 {
		r = errNoDevice
	}
	if r != cudadrv.Success {
		name, text := errorName(r)
		return 0, &BackendError{Device: Device{kind: KindCUDA}, Op: "init", Code: int(r), Name: name,
			Err: fmt.Errorf("%w: the CUDA driver reports no usable GPU (check the NVIDIA driver with nvidia-smi): %s", ErrBackendUnavailable, text)}
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

// resultError is the error of a failed driver call during op: an
// *OutOfMemoryError for CUDA_ERROR_OUT_OF_MEMORY and a *BackendError for
// the others, which matches [ErrDeviceLost] if the error is sticky. stage,
// if not "", says which step of op failed.
func resultError(op, stage string, res cudadrv.Result) error {
	name, text := errorName(res)
	if stage != "" {
		text = stage + ": " + text
	}
	if res == cudadrv.OutOfMemory {
		reason := "the CUDA driver refused it: " + name
		if stage != "" {
			reason = stage + ": " + reason
		}
		return &OutOfMemoryError{Code: int(res), Reason: reason}
	}
	e := &BackendError{Op: op, Code: int(res), Name: name, Err: errors.New(text)}
	if cudadrv.Sticky(res) {
		e.Err = fmt.Errorf("%w: %s (the CUDA context is unusable until the process restarts)", ErrDeviceLost, text)
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
