//go:build rocm

package hipdrv

// Stream-ordered allocation (hipMallocAsync, hipFreeAsync), how a free is
// learned to have run (a reading of its stream), and the capture a stream
// takes part in. Each call makes the device current, operates and
// restores the thread's device, in one cgo call, so that the goroutine
// need not be locked to its thread.

/*
#include <stdint.h>

#include "device.h"

// memtrack_hip_alloc_async allocates size bytes on stream from the current
// pool of device, with device current; a stream of another device, or one
// that takes part in a capture, allocates nothing.
static memtrack_hip_result memtrack_hip_alloc_async(int device, size_t size, uintptr_t handle) {
	memtrack_hip_result a = {0};
	if (!memtrack_hip.hipMallocAsync) {
		a.op = hipErrorNotSupported;
		return a;
	}
	hipStream_t stream = (hipStream_t)handle;
	int prev;
	if ((a.enter = memtrack_hip_enter(device, &prev)) != hipSuccess) return a;
	a.op = memtrack_hip_check_stream(device, stream, &a);
	if (a.op == hipSuccess && !a.other_device && !a.capturing) a.op = memtrack_hip.hipMallocAsync(&a.ptr, size, stream);
	a.restore = memtrack_hip_leave(device, prev);
	return a;
}

// memtrack_hip_free_async frees ptr on stream. The free of a stream whose
// handle names one stream records nothing: a reading learns that the
// stream ran it (memtrack_hip_read_streams). On the per-thread default
// stream, whose handle names another stream on each thread, so that no
// later reading can ask it, it records event (created if NULL) after the
// free; where that event cannot be recorded, it waits for the stream and
// reports the free retired. A stream of another device, or one that takes
// part in a capture, frees nothing.
static memtrack_hip_result memtrack_hip_free_async(int device, uintptr_t ptr, uintptr_t handle, uintptr_t event) {
	memtrack_hip_result a = {0};
	if (!memtrack_hip.hipFreeAsync) {
		a.op = hipErrorNotSupported;
		return a;
	}
	hipStream_t stream = (hipStream_t)handle;
	a.event = (hipEvent_t)event;
	int prev;
	if ((a.enter = memtrack_hip_enter(device, &prev)) != hipSuccess) return a;
	a.op = memtrack_hip_check_stream(device, stream, &a);
	if (a.op != hipSuccess || a.other_device || a.capturing) {
		a.restore = memtrack_hip_leave(device, prev);
		return a;
	}
	a.op = memtrack_hip.hipFreeAsync((void *)ptr, stream);
	if (a.op == hipSuccess && stream == MEMTRACK_HIP_STREAM_PER_THREAD) {
		hipError_t r = a.event ? hipSuccess : memtrack_hip.hipEventCreateWithFlags(&a.event, hipEventDisableTiming);
		if (r == hipSuccess) r = memtrack_hip.hipEventRecord(a.event, stream);
		if (r != hipSuccess) {
			memtrack_hip.hipStreamSynchronize(stream);
			a.retired = 1;
		}
	}
	a.restore = memtrack_hip_leave(device, prev);
	return a;
}

// memtrack_hip_stream_info reports what memtrack_hip_alloc_async would find
// of stream (another device, a capture) without allocating.
static memtrack_hip_result memtrack_hip_stream_info(int device, uintptr_t handle) {
	memtrack_hip_result a = {0};
	int prev;
	if ((a.enter = memtrack_hip_enter(device, &prev)) != hipSuccess) return a;
	a.op = memtrack_hip_check_stream(device, (hipStream_t)handle, &a);
	a.restore = memtrack_hip_leave(device, prev);
	return a;
}

static void memtrack_hip_event_destroy(hipEvent_t e) { memtrack_hip.hipEventDestroy(e); }

// memtrack_hip_unknown reports whether r, the answer of a query, says
// nothing of the work queried: hipErrorNotReady (not done yet), or an
// error of stream capture (900 to 908: the query was refused while a
// capture is under way), after which the work is not known done.
static inline int memtrack_hip_unknown(hipError_t r) {
	return r == hipErrorNotReady || (r >= hipErrorStreamCaptureUnsupported && r <= hipErrorStreamCaptureWrongThread);
}

// memtrack_hip_reached_prefix returns how many of the n events ev of one
// stream, oldest first (n > 0), the stream has reached, and in *r the
// error of a query that failed, if one did. An event "Captures in event
// the contents of stream at the time of this call" and its query succeeds
// once "all commands in the appropriate stream (specified to
// hipEventRecord()) have completed" (hipEventRecord, hipEventQuery): the
// work of an older event of the stream is part of a newer one's, so where
// the newer is reached so is the older. The newest is queried first, and
// where the stream has not reached it, the first event not reached is
// found by bisection: at most 1 + ceil(log2 n) queries.
static int memtrack_hip_reached_prefix(const hipEvent_t *ev, int n, hipError_t *r) {
	hipError_t q = memtrack_hip.hipEventQuery(ev[n - 1]);
	if (!memtrack_hip_unknown(q)) {
		*r = q;
		return n;
	}
	int lo = 0, hi = n - 1; // ev[0..lo) reached, ev[hi] not
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		q = memtrack_hip.hipEventQuery(ev[mid]);
		if (memtrack_hip_unknown(q)) {
			hi = mid;
			continue;
		}
		lo = mid + 1;
		if (q != hipSuccess) *r = q;
	}
	return lo;
}

// memtrack_hip_stream_reading is a reading's question of one stream and
// its answer (held.Query, in the runtime's terms).
typedef struct {
	uintptr_t stream;   // the stream's handle; 0 for the null stream
	int first, n;       // its events, oldest first: events[first .. first+n)
	int ask;            // frees follow them: ask whether the stream is idle
	int record;         // and where it is not, record spare (or a new event) after them
	hipEvent_t spare;
	int reached;        // the answer: the events reached
	int idle;           // the stream had run all its work
	hipEvent_t recorded; // the event recorded after the frees, or NULL
	hipError_t result;  // hipSuccess, or the failure after which every free of the stream counts as executed
} memtrack_hip_stream_reading;

// memtrack_hip_read_stream answers one question, with the device current.
// The stream's capture is asked first where it is to be queried or
// recorded on: a stream that takes part in a capture is neither, since
// what is enqueued there is the graph's.
static void memtrack_hip_read_stream(const hipEvent_t *events, memtrack_hip_stream_reading *a) {
	hipStream_t stream = (hipStream_t)a->stream;
	a->reached = 0, a->idle = 0, a->recorded = NULL, a->result = hipSuccess;
	if (a->n > 0) a->reached = memtrack_hip_reached_prefix(events + a->first, a->n, &a->result);
	if (!a->ask || a->result != hipSuccess || (a->reached < a->n && !a->record)) return;
	hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
	hipError_t r = hipSuccess;
	if (memtrack_hip.hipStreamIsCapturing) r = memtrack_hip.hipStreamIsCapturing(stream, &st);
	if (memtrack_hip_unknown(r) || (r == hipSuccess && st != hipStreamCaptureStatusNone)) return;
	if (r != hipSuccess) {
		a->result = r;
		return;
	}
	if (a->reached == a->n) {
		r = memtrack_hip.hipStreamQuery(stream);
		if (r == hipSuccess) {
			a->idle = 1;
			return;
		}
		if (!memtrack_hip_unknown(r)) {
			a->result = r;
			return;
		}
		if (r != hipErrorNotReady) return; // refused: a capture is under way after all
	}
	if (!a->record) return;
	hipEvent_t e = a->spare;
	if (!e && memtrack_hip.hipEventCreateWithFlags(&e, hipEventDisableTiming) != hipSuccess) return;
	if (memtrack_hip.hipEventRecord(e, stream) == hipSuccess) {
		a->recorded = e;
	} else if (!a->spare) {
		memtrack_hip.hipEventDestroy(e);
	}
}

// memtrack_hip_read_streams answers, with device current and in one call,
// the questions of a reading of n streams (memtrack_hip_read_stream).
// Where the device cannot be made current, that failure is every stream's
// answer: every free counts as executed. It returns the result of making
// the thread's previous device current again. Everything runs in relaxed
// stream-capture mode, where the runtime has it, as memtrack's own calls.
static hipError_t memtrack_hip_read_streams(int device, const hipEvent_t *events, memtrack_hip_stream_reading *rs, int n) {
	int prev;
	hipStreamCaptureMode m = memtrack_hip_relaxed();
	hipError_t r = memtrack_hip_enter(device, &prev);
	for (int i = 0; i < n; i++) {
		if (r != hipSuccess) {
			rs[i].reached = rs[i].n, rs[i].idle = 0, rs[i].recorded = NULL, rs[i].result = r;
			continue;
		}
		memtrack_hip_read_stream(events, &rs[i]);
	}
	hipError_t back = r == hipSuccess ? memtrack_hip_leave(device, prev) : hipSuccess;
	memtrack_hip_unrelax(m);
	return back;
}
*/
import "C"

import "unsafe"

// Event is a HIP event (hipEvent_t); the zero Event is none.
type Event struct{ p C.hipEvent_t }

// IsZero reports whether e is no event.
func (e Event) IsZero() bool { return e.p == nil }

// StreamPerThread is the handle of the calling thread's own default stream
// (hipStreamPerThread); 0 is the device's null stream.
const StreamPerThread uintptr = 0x2

// StreamCall is what a stream-ordered operation reports.
type StreamCall struct {
	Call
	Ptr          uintptr // AllocAsync: the allocation
	Event        Event   // FreeAsync on the per-thread default stream: the event recorded after the free
	Retired      bool    // FreeAsync on the per-thread default stream: the free is known to have run (the stream was synchronized)
	OtherDevice  bool    // the stream is of another device than the one named: nothing ran
	StreamDevice int     // the stream's device, where OtherDevice
	// Capture is the stream's part in a capture, asked in the same call:
	// where its Status is not CaptureNone, nothing ran.
	Capture Capture
}

func streamCallOf(r C.memtrack_hip_result) StreamCall {
	return StreamCall{
		Call: callOf(r), Ptr: uintptr(r.ptr), Event: Event{r.event}, Retired: r.retired != 0,
		OtherDevice: r.other_device != 0, StreamDevice: int(r.stream_device),
		Capture: Capture{Status: CaptureStatus(r.capturing), ID: uint64(r.capture_id)},
	}
}

// AllocAsync allocates size bytes on stream (hipMallocAsync) from "the
// memory pool associated with the stream's device", with device current.
// A stream of another device (hipStreamGetDevice, ROCm 5.6), or one that
// takes part in a capture (hipStreamGetCaptureInfo, which gives the
// capture's ID in the same call), allocates nothing. Where the runtime
// lacks hipMallocAsync the result is hipErrorNotSupported (MemPools says
// why); so for FreeAsync and hipFreeAsync.
func AllocAsync(device int, size int64, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_hip_alloc_async(C.int(device), C.size_t(size), C.uintptr_t(stream)))
}

// FreeAsync frees ptr on stream (hipFreeAsync), with device current. It
// records nothing on a stream whose handle names one stream: a reading
// learns that the stream ran the free (Readings). On the per-thread
// default stream (StreamPerThread), whose handle names another stream on
// each thread, which no reading made on another thread can ask about, it
// records event (created where zero) after the free; where that event
// cannot be recorded it synchronizes the stream and reports the free
// retired. A stream of another device, or one that takes part in a
// capture, frees nothing.
func FreeAsync(device int, ptr uintptr, stream uintptr, event Event) StreamCall {
	// The event crosses as a number, which cgo need not check as it checks
	// a pointer: it is the runtime's handle, not Go memory.
	return streamCallOf(C.memtrack_hip_free_async(C.int(device), C.uintptr_t(ptr), C.uintptr_t(stream), C.uintptr_t(uintptr(unsafe.Pointer(event.p)))))
}

// StreamInfo reports what AllocAsync would find of stream, with device
// current, without allocating: whether it is of another device, or takes
// part in a capture, and which capture.
func StreamInfo(device int, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_hip_stream_info(C.int(device), C.uintptr_t(stream)))
}

// EventDestroy destroys an event (hipEventDestroy); the zero Event is
// none, and nothing is done.
func EventDestroy(e Event) {
	if e.p != nil {
		C.memtrack_hip_event_destroy(e.p)
	}
}

// Readings asks, in one call, how far streams have come past the frees
// enqueued on them, and holds the answers: the questions of a reading of
// the device-side figure (internal/held's Query), in the runtime's terms.
// Its buffers are kept from one reading to the next.
type Readings struct {
	rs     []C.memtrack_hip_stream_reading
	events []C.hipEvent_t
}

// Reset empties r, keeping its buffers.
func (r *Readings) Reset() { r.rs, r.events = r.rs[:0], r.events[:0] }

// Add adds a question of stream (its handle; 0 for the null stream): how
// many of events, recorded on it earlier, oldest first, it has reached;
// where ask, whether it has run all its work (hipStreamQuery) once it has
// reached them all; and where record, and the stream has not, to record
// spare (a new event where zero) on it.
func (r *Readings) Add(stream uintptr, events []Event, ask, record bool, spare Event) {
	first := len(r.events)
	for _, e := range events {
		r.events = append(r.events, e.p)
	}
	r.rs = append(r.rs, C.memtrack_hip_stream_reading{
		stream: C.uintptr_t(stream), first: C.int(first), n: C.int(len(events)),
		ask: cbool(ask), record: cbool(record), spare: spare.p,
	})
}

// Read asks the questions added, with device current and in one cgo call,
// in relaxed stream-capture mode where the runtime has it: the newest
// event of each stream first, all older ones being reached where it is,
// and, where it is not, the first event not reached by bisection, in at
// most 1 + ceil(log2 n) queries for n events; then, where asked, whether
// the stream is idle, and where it is not, an event recorded. Neither is
// made of a stream that takes part in a capture. It returns the result of
// making the thread's previous device current again.
func (r *Readings) Read(device int) Result {
	if len(r.rs) == 0 {
		return Success
	}
	var events *C.hipEvent_t
	if len(r.events) > 0 {
		events = &r.events[0]
	}
	return Result(C.memtrack_hip_read_streams(C.int(device), events, &r.rs[0], C.int(len(r.rs))))
}

// Answer returns the answer to question i: how many of its events the
// stream has reached; whether it had run all its work; the event recorded
// on it (zero where none); and Success, or the failure after which every
// free of the stream counts as executed.
func (r *Readings) Answer(i int) (reached int, idle bool, recorded Event, res Result) {
	a := &r.rs[i]
	return int(a.reached), a.idle != 0, Event{a.recorded}, Result(a.result)
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// CaptureStatus is a stream's capture status (hipStreamCaptureStatus).
type CaptureStatus int

// The capture statuses of hip_runtime_api.h.
const (
	CaptureNone        CaptureStatus = C.hipStreamCaptureStatusNone        // not capturing
	CaptureOngoing     CaptureStatus = C.hipStreamCaptureStatusActive      // capturing
	CaptureInvalidated CaptureStatus = C.hipStreamCaptureStatusInvalidated // capturing, but the capture failed
)

// Capture is a stream's part in a capture.
type Capture struct {
	Status CaptureStatus
	// ID is the capture's "unique ID" (hipStreamGetCaptureInfo) where
	// Status is CaptureOngoing and the runtime has the call (ROCm 5.1);
	// 0 otherwise.
	ID uint64
}
