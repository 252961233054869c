//go:build cuda

package cudadrv

// The flags name the usual places of cuda.h and libcuda.so; CGO_CFLAGS and
// CGO_LDFLAGS add others (see scripts/cuda-dev.sh).

// #cgo CFLAGS: -I/usr/local/cuda/include
// #cgo LDFLAGS: -L/usr/local/cuda/lib64/stubs -lcuda
import "C"
