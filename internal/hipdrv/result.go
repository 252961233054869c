//go:build rocm

package hipdrv

// Result is a hipError_t, the status every runtime call returns.
type Result int

// The results memtrack tells apart (hip_runtime_api.h's values).
const (
	Success       Result = 0   // hipSuccess
	InvalidValue  Result = 1   // hipErrorInvalidValue
	OutOfMemory   Result = 2   // hipErrorOutOfMemory (hipErrorMemoryAllocation in older headers, the same value)
	NoDevice      Result = 100 // hipErrorNoDevice
	InvalidDevice Result = 101 // hipErrorInvalidDevice
	NotReady      Result = 600 // hipErrorNotReady
	NotSupported  Result = 801 // hipErrorNotSupported
)

// Name returns hip_runtime_api.h's name of r for the codes an
// initialisation, a memory or a stream call meets, or "": the names for
// where the runtime cannot give its own (ErrorName).
func Name(r Result) string { return names[r] }

var names = map[Result]string{
	0:    "hipSuccess",
	1:    "hipErrorInvalidValue",
	2:    "hipErrorOutOfMemory",
	3:    "hipErrorNotInitialized",
	4:    "hipErrorDeinitialized",
	17:   "hipErrorInvalidDevicePointer",
	35:   "hipErrorInsufficientDriver",
	100:  "hipErrorNoDevice",
	101:  "hipErrorInvalidDevice",
	201:  "hipErrorInvalidContext",
	400:  "hipErrorInvalidHandle",
	401:  "hipErrorIllegalState",
	500:  "hipErrorNotFound",
	600:  "hipErrorNotReady",
	700:  "hipErrorIllegalAddress",
	701:  "hipErrorLaunchOutOfResources",
	702:  "hipErrorLaunchTimeOut",
	709:  "hipErrorContextIsDestroyed",
	710:  "hipErrorAssert",
	719:  "hipErrorLaunchFailure",
	801:  "hipErrorNotSupported",
	900:  "hipErrorStreamCaptureUnsupported",
	901:  "hipErrorStreamCaptureInvalidated",
	906:  "hipErrorStreamCaptureImplicit",
	907:  "hipErrorCapturedEvent",
	908:  "hipErrorStreamCaptureWrongThread",
	999:  "hipErrorUnknown",
	1052: "hipErrorRuntimeMemory",
	1053: "hipErrorRuntimeOther",
}
