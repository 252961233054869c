//go:build rocm

// device.h: how the C helpers of this package run on a device from
// whatever thread the goroutine is on: make the device current, operate,
// and put the thread's previous device back, each result reported apart in
// a memtrack_hip_result.
//
// The current device is the calling host thread's: "HIP maintains an
// default device for each thread using thread-local-storage. This device
// is used implicitly for HIP runtime APIs called by this thread"
// (hipGetDevice); hipSetDevice sets it, and "Thread-pool implementations
// may inherit the default device of the previous thread" (hipSetDevice),
// which is why each operation restores what it found.

#ifndef MEMTRACK_HIPDRV_DEVICE_H
#define MEMTRACK_HIPDRV_DEVICE_H

#include <stddef.h>

#include "runtime.h"

// memtrack_hip_result is what one operation reports: the three results
// apart, so that the operation's own result decides, and what the
// operation produced.
typedef struct {
	hipError_t enter;       // getting or setting the device; the operation ran only if 0
	hipError_t op;          // the operation
	hipError_t restore;     // putting the previous device back
	void *ptr;              // an allocation
	size_t free, total;     // memtrack_hip_meminfo: hipMemGetInfo
	hipEvent_t event;       // memtrack_hip_free_async: the event recorded after the free
	int retired;            // memtrack_hip_free_async: the free is known to be executed
	unsigned long long seq; // memtrack_hip_free_async: the event's number among those recorded on its stream
	int other_device;       // the stream is of another device: the operation did not run
	int stream_device;      // the stream's device, where other_device
	int capturing;          // the stream's hipStreamCaptureStatus: where not 0 (None), the operation did not run
	unsigned long long capture_id; // the stream's capture, where it is active and the runtime gives IDs
} memtrack_hip_result;

// memtrack_hip_enter makes device current on the calling thread and
// returns in *prev the device that was.
static inline hipError_t memtrack_hip_enter(int device, int *prev) {
	*prev = -1;
	hipError_t r = memtrack_hip.hipGetDevice(prev);
	if (r == hipSuccess && *prev != device) r = memtrack_hip.hipSetDevice(device);
	return r;
}

// memtrack_hip_leave makes prev current again, where memtrack_hip_enter
// changed it.
static inline hipError_t memtrack_hip_leave(int device, int prev) {
	return prev == device ? hipSuccess : memtrack_hip.hipSetDevice(prev);
}

// memtrack_hip_default_stream reports whether stream is a handle of a
// default stream of the current device: NULL (the null stream) and
// hipStreamPerThread.
static inline int memtrack_hip_default_stream(hipStream_t stream) {
	return stream == NULL || stream == MEMTRACK_HIP_STREAM_PER_THREAD;
}

// memtrack_hip_check_stream reports, for a stream of one's own, whether it
// is of another device than the current one (hipStreamGetDevice, ROCm 5.6;
// without it the stream is taken to be the device's), and, for a stream of
// the device, its capture status and, where active, the capture's ID:
// hipStreamGetCaptureInfo (ROCm 5.1), or hipStreamIsCapturing (ROCm 4.3),
// which gives no ID. It returns why it cannot say, where it cannot.
static inline hipError_t memtrack_hip_check_stream(int device, hipStream_t stream, memtrack_hip_result *res) {
	hipError_t r = hipSuccess;
	if (!memtrack_hip_default_stream(stream) && memtrack_hip.hipStreamGetDevice) {
		int d = device;
		r = memtrack_hip.hipStreamGetDevice(stream, &d);
		if (r != hipSuccess) return r;
		if (d != device) {
			res->other_device = 1;
			res->stream_device = d;
			return hipSuccess;
		}
	}
	hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
	unsigned long long id = 0;
	if (memtrack_hip.hipStreamGetCaptureInfo) {
		r = memtrack_hip.hipStreamGetCaptureInfo(stream, &st, &id);
	} else if (memtrack_hip.hipStreamIsCapturing) {
		r = memtrack_hip.hipStreamIsCapturing(stream, &st);
	}
	if (r == hipSuccess) res->capturing = st;
	if (r == hipSuccess && st == hipStreamCaptureStatusActive) res->capture_id = id;
	return r;
}

// memtrack_hip_relaxed sets the calling thread's stream capture mode to
// relaxed and returns the one it had, for memtrack_hip_unrelax, where the
// runtime has hipThreadExchangeStreamCaptureMode (ROCm 5.2): a potentially
// unsafe call (hipMalloc, hipFree) made in between then neither fails nor
// invalidates a capture that any thread has begun.
static inline hipStreamCaptureMode memtrack_hip_relaxed(void) {
	hipStreamCaptureMode m = hipStreamCaptureModeRelaxed;
	if (!memtrack_hip.hipThreadExchangeStreamCaptureMode || memtrack_hip.hipThreadExchangeStreamCaptureMode(&m) != hipSuccess)
		m = hipStreamCaptureModeRelaxed;
	return m;
}

static inline void memtrack_hip_unrelax(hipStreamCaptureMode m) {
	if (m != hipStreamCaptureModeRelaxed) memtrack_hip.hipThreadExchangeStreamCaptureMode(&m);
}

#endif
