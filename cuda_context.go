//go:build cuda

package memtrack

// The cu package has no call for primary contexts; this is the one the
// backend needs. The flags name the usual places of cuda.h and libcuda.so;
// CGO_CFLAGS and CGO_LDFLAGS add others (see scripts/cuda-dev.sh).

/*
#cgo CFLAGS: -I/usr/local/cuda/include
#cgo LDFLAGS: -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>
*/
import "C"

import (
	"unsafe"

	"github.com/mumax/3/cuda/cu"
)

// primaryContext retains the primary context of dev (cuDevicePrimaryCtxRetain)
// and returns it. Like cu's functions, it panics with the cu.Result on error.
// The context is never released: it lives as long as the process, as the
// CUDA runtime's does.
func primaryContext(dev cu.Device) cu.Context {
	var ctx C.CUcontext
	if r := cu.Result(C.cuDevicePrimaryCtxRetain(&ctx, C.CUdevice(dev))); r != cu.SUCCESS {
		panic(r)
	}
	return cu.Context(uintptr(unsafe.Pointer(ctx)))
}
