//go:build cuda

package cudadrv

// Result is a CUresult, the status every driver call returns.
type Result int

// The results memtrack tells apart (cuda.h's values).
const (
	Success      Result = 0   // CUDA_SUCCESS
	OutOfMemory  Result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	NotReady     Result = 600 // CUDA_ERROR_NOT_READY
	NotSupported Result = 801 // CUDA_ERROR_NOT_SUPPORTED
	// CaptureUnsupported is CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900):
	// "the operation is not permitted when the stream is capturing", and
	// the answer to a call that a capture under way prohibits (doc.go).
	CaptureUnsupported Result = 900
)

// Sticky reports whether r leaves the context unusable. cuda.h documents
// each of these codes as leaving "the process in an inconsistent state",
// where every later call returns the same error until the process restarts:
// those of the 11.8 header, and those that later headers add (226,
// CUDA_ERROR_CONTAINED, in 12.x; 721, CUDA_ERROR_TENSOR_MEMORY_LEAK, in
// 12.8), which a newer driver returns to any program.
func Sticky(r Result) bool {
	switch r {
	case 226, // CUDA_ERROR_CONTAINED
		700, // CUDA_ERROR_ILLEGAL_ADDRESS
		702, // CUDA_ERROR_LAUNCH_TIMEOUT
		710, // CUDA_ERROR_ASSERT
		714, // CUDA_ERROR_HARDWARE_STACK_ERROR
		715, // CUDA_ERROR_ILLEGAL_INSTRUCTION
		716, // CUDA_ERROR_MISALIGNED_ADDRESS
		717, // CUDA_ERROR_INVALID_ADDRESS_SPACE
		718, // CUDA_ERROR_INVALID_PC
		719, // CUDA_ERROR_LAUNCH_FAILED
		721, // CUDA_ERROR_TENSOR_MEMORY_LEAK
		810, // CUDA_ERROR_MPS_CLIENT_TERMINATED
		911: // CUDA_ERROR_EXTERNAL_DEVICE
		return true
	}
	return false
}

// Name returns cuda.h's name of r for the codes an initialisation or a
// memory call meets, or "": the names for where the driver cannot give its
// own (ErrorName), as when cuInit fails, or the library is the toolkit's
// link stub, which fails cuGetErrorName too.
func Name(r Result) string { return names[r] }

var names = map[Result]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	226: "CUDA_ERROR_CONTAINED",
	400: "CUDA_ERROR_INVALID_HANDLE",
	401: "CUDA_ERROR_ILLEGAL_STATE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	710: "CUDA_ERROR_ASSERT",
	714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
	715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS",
	717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	718: "CUDA_ERROR_INVALID_PC",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	721: "CUDA_ERROR_TENSOR_MEMORY_LEAK",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	810: "CUDA_ERROR_MPS_CLIENT_TERMINATED",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	907: "CUDA_ERROR_CAPTURED_EVENT",
	908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	911: "CUDA_ERROR_EXTERNAL_DEVICE",
	999: "CUDA_ERROR_UNKNOWN",
}
