//go:build cuda

package memtrack

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/mumax/3/cuda/cu"
)

// cudaBackend allocates NVIDIA GPU memory through the CUDA driver API
// (github.com/mumax/3/cuda/cu). The driver is initialised on the first call,
// once per process; each device's primary context is retained on the first
// use of that device, so that buffers interoperate with code that uses the
// CUDA runtime, which works in the same contexts.
//
// The cu package panics on every driver error; each call here recovers that
// panic and returns it as a *BackendError or *OutOfMemoryError carrying the
// CUresult.
type cudaBackend struct {
	initOnce sync.Once
	n        int
	initErr  error
	ctxs     []cudaContext // one per device, retained on first use
}

// cudaContext is one device's primary context.
type cudaContext struct {
	once sync.Once
	ctx  cuContext
	err  error
}

func newCUDABackend() backend { return &cudaBackend{} }

// init initialises the driver and counts the devices, once.
func (b *cudaBackend) init() error {
	b.initOnce.Do(func() {
		err := guard("init", func() {
			cu.Init(0)
			b.n = cu.DeviceGetCount()
		})
		if err == nil && b.n == 0 {
			err = &BackendError{Op: "init", Code: int(cu.ERROR_NO_DEVICE), Name: cu.ERROR_NO_DEVICE.String()}
		}
		if err != nil {
			b.n = 0
			err = fmt.Errorf("%w: the CUDA driver reports no usable GPU (check the NVIDIA driver with nvidia-smi): %w",
				ErrBackendUnavailable, withDevice(err, Device{kind: KindCUDA}))
		}
		b.initErr = err
		b.ctxs = make([]cudaContext, b.n)
	})
	return b.initErr
}

func (b *cudaBackend) devices() (int, error) {
	if err := b.init(); err != nil {
		return 0, err
	}
	return b.n, nil
}

// context returns the primary context of device ordinal, retaining it on
// first use. Retaining creates the context, which takes device memory.
func (b *cudaBackend) context(ordinal int) (cuContext, error) {
	if err := b.init(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= b.n {
		return nil, fmt.Errorf("%w: cuda:%d, this machine has %d cuda device(s)", ErrInvalidOrdinal, ordinal, b.n)
	}
	c := &b.ctxs[ordinal]
	c.once.Do(func() {
		c.err = guard("context", func() { c.ctx = primaryContext(cu.DeviceGet(ordinal)) })
	})
	return c.ctx, c.err
}

// do runs f, a sequence of cu calls, on device ordinal: with the goroutine
// locked to its OS thread and the device's primary context current on it,
// since CUDA contexts are current per thread. The thread's previous context
// is made current again afterwards, so that code which set its own context
// on that thread is undisturbed. A panic of cu becomes the returned error.
func (b *cudaBackend) do(ordinal int, op string, f func()) error {
	ctx, err := b.context(ordinal)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return guard(op, func() {
		if prev := makeCurrent(ctx); prev != ctx {
			defer setCurrent(prev)
		}
		f()
	})
}

func (b *cudaBackend) alloc(ordinal int, size int64, m *memory) error {
	var p cu.DevicePtr
	err := b.do(ordinal, "alloc", func() { p = cu.MemAlloc(size) })
	if err != nil {
		return err
	}
	m.ptr = uintptr(p)
	return nil
}

func (b *cudaBackend) free(ordinal int, _ int64, m *memory) error {
	return b.do(ordinal, "free", func() { cu.MemFree(cu.DevicePtr(m.ptr)) })
}

// memInfo returns cuMemGetInfo, which reports the device of the current
// context: do makes it the device's own.
func (b *cudaBackend) memInfo(ordinal int) (free, total int64, err error) {
	err = b.do(ordinal, "meminfo", func() { free, total = cu.MemGetInfo() })
	return free, total, err
}

// guard runs f and turns a panic into an error: a cu.Result (every driver
// error, which cu panics with) into a *OutOfMemoryError for
// CUDA_ERROR_OUT_OF_MEMORY and a *BackendError for the others, and any
// other panic into a *BackendError, so that none escapes the package.
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
	if res == cu.ERROR_OUT_OF_MEMORY {
		return &OutOfMemoryError{Code: int(res), Reason: "the CUDA driver refused it: " + res.String()}
	}
	return &BackendError{Op: op, Code: int(res), Name: res.String()}
}

// withDevice sets the device of a *BackendError, for errors that no device
// operation completes (see fillError).
func withDevice(err error, d Device) error {
	if e, ok := err.(*BackendError); ok {
		e.Device = d
	}
	return err
}
