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
	"github.com/mumax/3/cuda/cu"
)

// cudaBackend allocates NVIDIA GPU memory through the CUDA driver API. The
// driver is initialised (cuInit, through github.com/mumax/3/cuda/cu) on the
// first call, once per process; each device's primary context is retained
// on the first use of that device, so that buffers interoperate with code
// that uses the CUDA runtime, which works in the same contexts. Each
// operation is one cgo call into the driver (internal/cudadrv); cu stays
// the binding for initialisation, devices and the error type.
type cudaBackend struct {
	initOnce sync.Once
	n        int
	initErr  error
	devs     []cudaDevice // one per device
	sides    []deviceSide // the device-side figure of each device (heldFigure)
	nvml     nvmlState    // the driver's per-process figures (processBackend)
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
}

// retained holds a retained primary context.
type retained struct{ ctx cuContext }

func newCUDABackend() backend { return &cudaBackend{} }

// init initialises the driver and counts the devices, once.
func (b *cudaBackend) init() error {
	b.initOnce.Do(func() {
		err := guard("init", func() {
			cu.Init(0)
			b.n = cu.DeviceGetCount()
		})
		if err == nil && b.n == 0 {
			err = resultError("init", "", cu.ERROR_NO_DEVICE)
		}
		if err != nil {
			b.n = 0
			err = fmt.Errorf("%w: the CUDA driver reports no usable GPU (check the NVIDIA driver with nvidia-smi): %w",
				ErrBackendUnavailable, withDevice(err, Device{kind: KindCUDA}))
		}
		b.initErr = err
		b.devs = make([]cudaDevice, b.n)
		for i := range b.devs {
			b.devs[i].ordinal = i
		}
		b.sides = newSides(b.n)
	})
	return b.initErr
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
		return nil, cuContext{}, err
	}
	if ordinal < 0 || ordinal >= b.n {
		return nil, cuContext{}, fmt.Errorf("%w: cuda:%d, this machine has %d cuda device(s)", ErrInvalidOrdinal, ordinal, b.n)
	}
	d := &b.devs[ordinal]
	if lost := d.lost.Load(); lost != 0 {
		return nil, cuContext{}, resultError(op, "the device was lost earlier", cu.Result(lost))
	}
	if c := d.ctx.Load(); c != nil {
		return d, c.ctx, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.ctx.Load(); c != nil {
		return d, c.ctx, nil
	}
	c, res := cuRetain(ordinal)
	if res != cu.SUCCESS {
		return nil, cuContext{}, d.failed(op, "retaining the device's primary context", res)
	}
	d.ctx.Store(&retained{c})
	return d, c, nil
}

// context returns the primary context of device ordinal, retaining it on
// first use.
func (b *cudaBackend) context(ordinal int) (cuContext, error) {
	_, c, err := b.device(ordinal, "context")
	return c, err
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
	if r.enter != cu.SUCCESS {
		return d.failed(op, "making the device's primary context current", r.enter)
	}
	if r.restore != cu.SUCCESS {
		d.restoreFailed(op, r.restore)
	}
	if r.op != cu.SUCCESS {
		return d.failed(op, "", r.op)
	}
	return nil
}

// failed returns the error of a failed step of op, marking the device lost
// if the error is sticky.
func (d *cudaDevice) failed(op, stage string, res cu.Result) error {
	if sticky(res) {
		d.lost.CompareAndSwap(0, int32(res))
	}
	return resultError(op, stage, res)
}

func (d *cudaDevice) restoreFailed(op string, res cu.Result) {
	d.restoreFailures.Add(1)
	if sticky(res) {
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
	enter, op, restore cu.Result
}

func resultOf(r cudadrv.Call) callResult {
	return callResult{enter: cu.Result(r.Enter), op: cu.Result(r.Op), restore: cu.Result(r.Restore)}
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

// cuRetain retains the primary context of device ordinal. The backend
// never releases it: it lives as long as the process, as the CUDA
// runtime's does.
func cuRetain(ordinal int) (cuContext, cu.Result) {
	c, r := cudadrv.Retain(ordinal)
	return c, cu.Result(r)
}

// driverErrorName returns the driver's name and description of r, or ""
// where it cannot say.
func driverErrorName(r cu.Result) (name, text string) { return cudadrv.ErrorName(cudadrv.Result(r)) }

// sticky reports whether r leaves the context unusable (see cudadrv.Sticky).
func sticky(r cu.Result) bool { return cudadrv.Sticky(cudadrv.Result(r)) }

// cuCtx returns ctx as the cu package types it.
func cuCtx(ctx cuContext) cu.Context { return cu.Context(ctx.Uintptr()) }

// guard runs f, a sequence of cu calls, and turns a panic into an error: a
// cu.Result (every driver error, which cu panics with) into the error of
// resultError, and any other panic into a *BackendError, so that none
// escapes the package.
func guard(op string, f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = cudaError(op, r)
		}
	}()
	f()
	return nil
}

func cudaError(op string, r any) error {
	res, ok := r.(cu.Result)
	if !ok {
		return &BackendError{Op: op, Err: fmt.Errorf("panic in the CUDA bindings: %v", r)}
	}
	return resultError(op, "", res)
}

// resultError is the error of a failed driver call during op: an
// *OutOfMemoryError for CUDA_ERROR_OUT_OF_MEMORY and a *BackendError for
// the others, which matches [ErrDeviceLost] if the error is sticky. stage,
// if not "", says which step of op failed.
func resultError(op, stage string, res cu.Result) error {
	name, text := errorName(res)
	if stage != "" {
		text = stage + ": " + text
	}
	if res == cu.ERROR_OUT_OF_MEMORY {
		reason := "the CUDA driver refused it: " + name
		if stage != "" {
			reason = stage + ": " + reason
		}
		return &OutOfMemoryError{Code: int(res), Reason: reason}
	}
	e := &BackendError{Op: op, Code: int(res), Name: name, Err: errors.New(text)}
	if sticky(res) {
		e.Err = fmt.Errorf("%w: %s (the CUDA context is unusable until the process restarts)", ErrDeviceLost, text)
	}
	return e
}

// errorName returns the name and description of res: the driver's, which
// knows every code of its version, or else cu's table (of about CUDA 5),
// or else "Unknown CUresult: N".
func errorName(res cu.Result) (name, text string) {
	name, text = driverErrorName(res)
	if name == "" && res == 34 {
		// No driver is there to name it: the link stub answers every
		// call, cuGetErrorName too, with this code.
		name = "CUDA_ERROR_STUB_LIBRARY"
	}
	if name == "" {
		name = res.String() // cu's table; "Unknown CUresult: N" past it
	}
	if text == "" {
		text = "CUresult " + strconv.Itoa(int(res))
	}
	return name, text
}

// withDevice sets the device of a *BackendError, for errors that no device
// operation completes (see fillError).
func withDevice(err error, d Device) error {
	if e, ok := err.(*BackendError); ok {
		e.Device = d
	}
	return err
}

// The CUDA backend's half of Device.Info: the GPU's name and UUID, in one
// cgo call (cudadrv.DeviceInfo). The cu package's DeviceGetName leaks its
// buffer on every call, which a metrics scrape would repeat for ever, and cu
// has no call for the UUID.

// info returns the GPU's name and its UUID as nvidia-smi prints it. Neither
// needs a context, so none is retained.
func (b *cudaBackend) info(ordinal int) (name, uuid string, err error) {
	if err := b.init(); err != nil {
		return "", "", err
	}
	if ordinal < 0 || ordinal >= b.n {
		return "", "", fmt.Errorf("%w: cuda:%d, this machine has %d cuda device(s)", ErrInvalidOrdinal, ordinal, b.n)
	}
	name, u, r := cudadrv.DeviceInfo(ordinal)
	if r != cudadrv.Success {
		return "", "", b.dev(ordinal).failed("info", "", cu.Result(r))
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
