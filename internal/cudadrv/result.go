//go:build cuda

package cudadrv

// #include <cuda.h>
import "C"

// Result is a CUresult, the status every driver call returns.
type Result int

// The results memtrack tells apart.
const (
	Success     Result = C.CUDA_SUCCESS
	NotReady    Result = C.CUDA_ERROR_NOT_READY
	OutOfMemory Result = C.CUDA_ERROR_OUT_OF_MEMORY
)

// Sticky reports whether r leaves the context unusable. cuda.h documents
// each of these codes as leaving "the process in an inconsistent state",
// where every later call returns the same error until the process restarts:
// those of the 11.8 header by name, and by number those that later headers
// add (226, CUDA_ERROR_CONTAINED, in 12.x; 721, CUDA_ERROR_TENSOR_MEMORY_LEAK,
// in 12.8), which a newer driver returns whatever header the code was built
// with.
func Sticky(r Result) bool {
	switch C.CUresult(r) {
	case 226, // CUDA_ERROR_CONTAINED
		C.CUDA_ERROR_ILLEGAL_ADDRESS,       // 700
		C.CUDA_ERROR_LAUNCH_TIMEOUT,        // 702
		C.CUDA_ERROR_ASSERT,                // 710
		C.CUDA_ERROR_HARDWARE_STACK_ERROR,  // 714
		C.CUDA_ERROR_ILLEGAL_INSTRUCTION,   // 715
		C.CUDA_ERROR_MISALIGNED_ADDRESS,    // 716
		C.CUDA_ERROR_INVALID_ADDRESS_SPACE, // 717
		C.CUDA_ERROR_INVALID_PC,            // 718
		C.CUDA_ERROR_LAUNCH_FAILED,         // 719
		721,                                // CUDA_ERROR_TENSOR_MEMORY_LEAK
		C.CUDA_ERROR_MPS_CLIENT_TERMINATED, // 810
		C.CUDA_ERROR_EXTERNAL_DEVICE:       // 911
		return true
	}
	return false
}
