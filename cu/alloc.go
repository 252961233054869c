//go:build cuda

package cu

/*
#cgo CFLAGS: -I/usr/local/cuda/include
#cgo LDFLAGS: -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>

typedef struct {
	CUresult status;
	CUdeviceptr ptr;
	CUdevice dev;
} memtrack_cu_alloc_t;

// memtrack_cu_alloc allocates as cuMemAlloc does and names the device of
// the current context, in one call, so that both happen on one thread.
static memtrack_cu_alloc_t memtrack_cu_alloc(size_t bytes) {
	memtrack_cu_alloc_t a = {CUDA_SUCCESS, 0, 0};
	a.status = cuMemAlloc(&a.ptr, bytes);
	if (a.status != CUDA_SUCCESS) {
		return a;
	}
	a.status = cuCtxGetDevice(&a.dev);
	if (a.status != CUDA_SUCCESS) {
		cuMemFree(a.ptr);
		a.ptr = 0;
	}
	return a;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/memtrack/memtrack"
	cu "github.com/mumax/3/cuda/cu"
)

// DevicePtr is a CUDA device address, as cu.DevicePtr is. It is a type of
// this package, not an alias, so that its Free method is counted; convert
// it with cu.DevicePtr(p) for code that imports mumax's cu.
type DevicePtr cu.DevicePtr

// MemAlloc allocates bytes of device memory in the current context, as
// cu.MemAlloc does, and counts them on the memtrack device of that
// context. It panics with the driver's cu.Result on error, and with
// cu.ERROR_OUT_OF_MEMORY, after freeing the memory, when memtrack's memory
// limit refuses it.
func MemAlloc(bytes int64) DevicePtr {
	a := C.memtrack_cu_alloc(C.size_t(bytes))
	if r := Result(a.status); r != cu.SUCCESS {
		panic(r)
	}
	p := DevicePtr(a.ptr)
	if err := track(int(a.dev), bytes, p); err != nil {
		if r := Result(C.cuMemFree(a.ptr)); r != cu.SUCCESS {
			panic(&Error{Op: "MemAlloc", Ptr: p, Result: r, Err: err})
		}
		if errors.Is(err, memtrack.ErrOutOfMemory) {
			panic(cu.ERROR_OUT_OF_MEMORY)
		}
		panic(&Error{Op: "MemAlloc", Ptr: p, Err: err})
	}
	return p
}

// trackSkip is the frames between the code that called MemAlloc and the
// calls of TrackAddrSkip in track: track's and MemAlloc's, so that the
// allocation site is the caller of MemAlloc.
const trackSkip = 2

// track counts the allocation p on CUDA device ordinal, for MemAlloc's
// caller.
func track(ordinal int, bytes int64, p DevicePtr) error {
	d, err := memtrack.CUDA(ordinal)
	if err != nil {
		return err
	}
	err = d.TrackAddrSkip(trackSkip, bytes, uintptr(p))
	if err != nil && errors.Is(err, memtrack.ErrAlreadyTracked) {
		// The driver handed out p, so what was counted at p was freed
		// without this package: drop that count (a concurrent drop is as
		// good).
		_, _ = memtrack.KindCUDA.UntrackAddr(uintptr(p), nil)
		err = d.TrackAddrSkip(trackSkip, bytes, uintptr(p))
	}
	return err
}

// freeError is what a failed cuMemFree inside memtrack.Kind.UntrackAddr returns.
type freeError struct{ r Result }

func (e *freeError) Error() string { return "cuMemFree: " + e.r.String() }

// MemFree frees device memory as cu.MemFree does and uncounts it. It does
// nothing for p == 0. It panics with an [*Error] naming p where the driver
// refuses to free it (memory never allocated, or freed already); memory
// that was allocated before this package counted it is freed without
// moving a figure.
func MemFree(p DevicePtr) {
	if p == 0 {
		return
	}
	tracked, err := memtrack.KindCUDA.UntrackAddr(uintptr(p), func() error {
		if r := Result(C.cuMemFree(C.CUdeviceptr(p))); r != cu.SUCCESS {
			return &freeError{r}
		}
		return nil
	})
	if tracked {
		if err != nil {
			panic(&Error{Op: "MemFree", Ptr: p, Result: err.(*freeError).r, Tracked: true})
		}
		return
	}
	if r := Result(C.cuMemFree(C.CUdeviceptr(p))); r != cu.SUCCESS {
		panic(&Error{Op: "MemFree", Ptr: p, Result: r})
	}
}

// Free frees the memory at ptr as MemFree does.
func (ptr DevicePtr) Free() { MemFree(ptr) }

// DevicePrimaryCtxRetain retains the primary context of dev
// (cuDevicePrimaryCtxRetain), the context the CUDA runtime and memtrack's
// Device.Alloc use, and returns it; make it current with
// [CtxSetCurrent]. cu has no call for it. It panics with the cu.Result on
// error.
func DevicePrimaryCtxRetain(dev Device) Context {
	var ctx C.CUcontext
	if r := Result(C.cuDevicePrimaryCtxRetain(&ctx, C.CUdevice(dev))); r != cu.SUCCESS {
		panic(r)
	}
	return Context(uintptr(unsafe.Pointer(ctx)))
}

// Error is the value MemFree panics with, and MemAlloc where memtrack
// cannot count memory for a reason other than its limit: cu panics with a
// bare cu.Result, which names no address.
type Error struct {
	Op      string    // "MemAlloc" or "MemFree"
	Ptr     DevicePtr // the address
	Result  Result    // the driver's code; cu.SUCCESS if the driver did not fail
	Tracked bool      // MemFree: the address was counted, and stays counted
	Err     error     // memtrack's error, where memtrack refused to count
}

// Error describes the failure and names the address.
func (e *Error) Error() string {
	s := fmt.Sprintf("cu: %s(%#x)", e.Op, uintptr(e.Ptr))
	if e.Result != cu.SUCCESS {
		s += ": " + e.Result.String()
	}
	switch {
	case e.Op == "MemFree" && e.Tracked:
		s += ": the memory stays allocated and counted"
	case e.Op == "MemFree" && e.Result == cu.ERROR_INVALID_VALUE:
		s += ": no allocation at this address (never allocated, or freed already)"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns memtrack's error, if any.
func (e *Error) Unwrap() error { return e.Err }
