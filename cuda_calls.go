//go:build cuda

package memtrack

// The cu package has no call for primary contexts, and its context calls
// cost a heap allocation each; these are the few the backend needs. The
// flags name the usual places of cuda.h and libcuda.so; CGO_CFLAGS and
// CGO_LDFLAGS add others (see scripts/cuda-dev.sh).

/*
#cgo CFLAGS: -I/usr/local/cuda/include
#cgo LDFLAGS: -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>

typedef struct {
	CUresult status;
	CUcontext prev;
} memtrack_swap;

// memtrack_make_current makes ctx current on the calling thread and returns
// the context that was, in one cgo call.
static memtrack_swap memtrack_make_current(CUcontext ctx) {
	memtrack_swap s = {CUDA_SUCCESS, NULL};
	s.status = cuCtxGetCurrent(&s.prev);
	if (s.status == CUDA_SUCCESS && s.prev != ctx) {
		s.status = cuCtxSetCurrent(ctx);
	}
	return s;
}
*/
import "C"

import (
	"unsafe"

	"github.com/mumax/3/cuda/cu"
)

// cuContext is a CUDA context as the driver gives it.
type cuContext = C.CUcontext

// primaryContext retains the primary context of dev (cuDevicePrimaryCtxRetain)
// and returns it. Like cu's functions, it panics with the cu.Result on error.
// The context is never released: it lives as long as the process, as the
// CUDA runtime's does.
func primaryContext(dev cu.Device) cuContext {
	var ctx C.CUcontext
	if r := cu.Result(C.cuDevicePrimaryCtxRetain(&ctx, C.CUdevice(dev))); r != cu.SUCCESS {
		panic(r)
	}
	return ctx
}

// makeCurrent makes ctx current on the calling thread, which must be locked
// to its goroutine, and returns the context that was current before. It
// panics with the cu.Result on error.
func makeCurrent(ctx cuContext) (prev cuContext) {
	s := C.memtrack_make_current(ctx)
	if r := cu.Result(s.status); r != cu.SUCCESS {
		panic(r)
	}
	return s.prev
}

// setCurrent makes ctx current on the calling thread (cuCtxSetCurrent). It
// panics with the cu.Result on error.
func setCurrent(ctx cuContext) {
	if r := cu.Result(C.cuCtxSetCurrent(ctx)); r != cu.SUCCESS {
		panic(r)
	}
}

// cuCtx returns ctx as the cu package types it.
func cuCtx(ctx cuContext) cu.Context { return cu.Context(uintptr(unsafe.Pointer(ctx))) }
