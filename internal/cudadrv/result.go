//go:build cuda

package cudadrv

// Result is a CUresult, the status every driver call returns.
type Result int

// Success is CUDA_SUCCESS.
const Success Result = 0
