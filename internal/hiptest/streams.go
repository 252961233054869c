//go:build rocm

package hiptest

// Streams and events of one's own, synchronizations, capture, and the
// calling thread's current device.

/*
#include <stdint.h>
#include <time.h>

#include "calls.h"

static hiptest_handle hiptest_stream_create(int device) {
	int prev;
	hipStream_t s = NULL;
	hipError_t r = hiptest_enter(device, &prev);
	if (r != hipSuccess) return (hiptest_handle){0, r};
	r = HIPTEST_CALL(hiptest_hip.hipStreamCreate, &s);
	hipError_t r2 = hiptest_leave(device, prev);
	return (hiptest_handle){(uintptr_t)s, r != hipSuccess ? r : r2};
}

static hipError_t hiptest_stream_destroy(uintptr_t s) { return HIPTEST_CALL(hiptest_hip.hipStreamDestroy, (hipStream_t)s); }

// hiptest_on runs what on stream s with device current: 0 synchronize, 1
// query, 2 synchronize the device.
static hipError_t hiptest_on(int device, uintptr_t s, int what) {
	int prev;
	hipError_t r = hiptest_enter(device, &prev);
	if (r != hipSuccess) return r;
	switch (what) {
	case 0:
		r = HIPTEST_CALL(hiptest_lib.hipStreamSynchronize, (hipStream_t)s);
		break;
	case 1:
		r = HIPTEST_CALL(hiptest_hip.hipStreamQuery, (hipStream_t)s);
		break;
	default:
		r = HIPTEST_CALL(hiptest_hip.hipDeviceSynchronize);
	}
	hipError_t r2 = hiptest_leave(device, prev);
	return r != hipSuccess ? r : r2;
}

// hiptest_record records a new event on stream s with device current.
static hiptest_handle hiptest_record(int device, uintptr_t s) {
	int prev;
	hipEvent_t e = NULL;
	hipError_t r = hiptest_enter(device, &prev);
	if (r != hipSuccess) return (hiptest_handle){0, r};
	r = HIPTEST_CALL(hiptest_lib.hipEventCreateWithFlags, &e, hipEventDisableTiming);
	if (r == hipSuccess) r = HIPTEST_CALL(hiptest_lib.hipEventRecord, e, (hipStream_t)s);
	hipError_t r2 = hiptest_leave(device, prev);
	return (hiptest_handle){(uintptr_t)e, r != hipSuccess ? r : r2};
}

static hipError_t hiptest_event_sync(uintptr_t e) { return HIPTEST_CALL(hiptest_hip.hipEventSynchronize, (hipEvent_t)e); }
static hipError_t hiptest_event_destroy(uintptr_t e) { return HIPTEST_CALL(hiptest_lib.hipEventDestroy, (hipEvent_t)e); }

static hipError_t hiptest_begin_capture(uintptr_t s) {
	return HIPTEST_CALL(hiptest_hip.hipStreamBeginCapture, (hipStream_t)s, hipStreamCaptureModeGlobal);
}

static hipError_t hiptest_end_capture(uintptr_t s) {
	hipGraph_t g = NULL;
	hipError_t r = HIPTEST_CALL(hiptest_hip.hipStreamEndCapture, (hipStream_t)s, &g);
	if (r == hipSuccess && g) r = HIPTEST_CALL(hiptest_hip.hipGraphDestroy, g);
	return r;
}

static hiptest_handle hiptest_get_device(void) {
	int d = -1;
	hipError_t r = HIPTEST_CALL(hiptest_lib.hipGetDevice, &d);
	return (hiptest_handle){(uintptr_t)d, r};
}

static hipError_t hiptest_set_device(int d) { return HIPTEST_CALL(hiptest_lib.hipSetDevice, d); }

// The host callbacks of HoldStream wait until hiptest_held_back is 0 (they
// call neither the runtime nor Go).
static int hiptest_held_back;

static void hiptest_hold(hipStream_t stream, hipError_t status, void *unused) {
	struct timespec ms = {0, 100000};
	while (__atomic_load_n(&hiptest_held_back, __ATOMIC_SEQ_CST)) nanosleep(&ms, NULL);
}

static hipError_t hiptest_hold_stream(int device, uintptr_t s) {
	int prev;
	hipError_t r = hiptest_enter(device, &prev);
	if (r != hipSuccess) return r;
	__atomic_store_n(&hiptest_held_back, 1, __ATOMIC_SEQ_CST);
	r = HIPTEST_CALL(hiptest_hip.hipStreamAddCallback, (hipStream_t)s, hiptest_hold, NULL, 0);
	hipError_t r2 = hiptest_leave(device, prev);
	return r != hipSuccess ? r : r2;
}

static void hiptest_release_streams(void) { __atomic_store_n(&hiptest_held_back, 0, __ATOMIC_SEQ_CST); }
*/
import "C"

import "github.com/memtrack/memtrack/internal/hipdrv"

// StreamCreate creates a stream of device (hipStreamCreate).
func StreamCreate(device int) (uintptr, hipdrv.Result) {
	return handleOf(C.hiptest_stream_create(C.int(device)))
}

// StreamDestroy destroys a stream (hipStreamDestroy).
func StreamDestroy(stream uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_stream_destroy(C.uintptr_t(stream)))
}

// StreamSynchronize waits for stream, with device current (which names
// the null stream, 0, and the per-thread one).
func StreamSynchronize(device int, stream uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_on(C.int(device), C.uintptr_t(stream), 0))
}

// StreamQuery asks whether stream has run all its work (hipStreamQuery).
func StreamQuery(device int, stream uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_on(C.int(device), C.uintptr_t(stream), 1))
}

// DeviceSynchronize waits for every stream of device
// (hipDeviceSynchronize).
func DeviceSynchronize(device int) hipdrv.Result {
	return hipdrv.Result(C.hiptest_on(C.int(device), 0, 2))
}

// RecordEvent creates an event of device and records it on stream.
func RecordEvent(device int, stream uintptr) (uintptr, hipdrv.Result) {
	return handleOf(C.hiptest_record(C.int(device), C.uintptr_t(stream)))
}

// EventSynchronize waits for an event of RecordEvent (hipEventSynchronize).
func EventSynchronize(event uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_event_sync(C.uintptr_t(event)))
}

// EventDestroy destroys an event of RecordEvent.
func EventDestroy(event uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_event_destroy(C.uintptr_t(event)))
}

// BeginCapture begins a capture on stream, in global mode
// (hipStreamBeginCapture).
func BeginCapture(stream uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_begin_capture(C.uintptr_t(stream)))
}

// EndCapture ends the capture of stream and destroys the graph it made.
func EndCapture(stream uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_end_capture(C.uintptr_t(stream)))
}

// Device returns the calling thread's current device (hipGetDevice): lock
// the goroutine to its thread around it.
func Device() (int, hipdrv.Result) {
	d, r := handleOf(C.hiptest_get_device())
	return int(d), r
}

// SetDevice sets the calling thread's current device (hipSetDevice).
func SetDevice(device int) hipdrv.Result { return hipdrv.Result(C.hiptest_set_device(C.int(device))) }

// HoldStream enqueues on stream a host callback (hipStreamAddCallback,
// which "will block later work in the stream until it is finished") that
// returns only once ReleaseStreams is called.
func HoldStream(device int, stream uintptr) hipdrv.Result {
	return hipdrv.Result(C.hiptest_hold_stream(C.int(device), C.uintptr_t(stream)))
}

// ReleaseStreams lets every host callback of HoldStream return.
func ReleaseStreams() { C.hiptest_release_streams() }
