//go:build rocm

package hipdrv

// Stream-ordered allocation (hipMallocAsync, hipFreeAsync), how a free is
// learned to have run (an event recorded after it), and the capture a
// stream takes part in. Each call makes the device current, operates and
// restores the thread's device, in one cgo call, so that the goroutine
// need not be locked to its thread.

/*
#include <pthread.h>
#include <stdint.h>

#include "device.h"

// The events FreeAsync records after its frees are numbered per stream, in
// the stream's order: a stream hashes to one of these locks, under which
// its event is recorded and numbered, so that of two threads that free on
// one stream at once, the one whose event comes first in the stream takes
// the lower number. Streams that share a lock share its numbers, which
// still rise along each stream.
#define MEMTRACK_HIP_RECORD_LOCKS 64
static pthread_mutex_t memtrack_hip_record_mu[MEMTRACK_HIP_RECORD_LOCKS] = {[0 ... MEMTRACK_HIP_RECORD_LOCKS - 1] = PTHREAD_MUTEX_INITIALIZER};
static unsigned long long memtrack_hip_record_seq[MEMTRACK_HIP_RECORD_LOCKS];

// memtrack_hip_record records event on stream and returns in *seq its
// number: 0 for the per-thread default stream, whose handle names another
// stream on each thread, so that its events are not numbered in one order.
static hipError_t memtrack_hip_record(hipEvent_t event, hipStream_t stream, unsigned long long *seq) {
	if (stream == MEMTRACK_HIP_STREAM_PER_THREAD) {
		*seq = 0;
		return memtrack_hip.hipEventRecord(event, stream);
	}
	unsigned i = (unsigned)((((uintptr_t)stream >> 4) * 0x9E3779B97F4A7C15ull) >> 58); // 64 locks
	pthread_mutex_lock(&memtrack_hip_record_mu[i]);
	hipError_t r = memtrack_hip.hipEventRecord(event, stream);
	*seq = ++memtrack_hip_record_seq[i];
	pthread_mutex_unlock(&memtrack_hip_record_mu[i]);
	return r;
}

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

// memtrack_hip_free_async frees ptr on stream and arranges to learn when
// the stream has executed the free: with event (created if NULL) recorded
// after the free, and numbered (memtrack_hip_record). Where the event
// cannot be recorded, it waits for the stream and reports the free retired.
// A stream of another device, or one that takes part in a capture, frees
// nothing.
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
	if (a.op == hipSuccess) {
		hipError_t r = a.event ? hipSuccess : memtrack_hip.hipEventCreateWithFlags(&a.event, hipEventDisableTiming);
		if (r == hipSuccess) r = memtrack_hip_record(a.event, stream, &a.seq);
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

// memtrack_hip_reached is, for the events of one stream, how many of them
// the stream has reached, from the oldest, and the answer that says so:
// hipSuccess, or the error of a query that failed, which counts as reached.
typedef struct {
	int reached;
	hipError_t result;
} memtrack_hip_reached;

// memtrack_hip_unknown reports whether r, the answer of a query, says
// nothing of the work queried: hipErrorNotReady (not done yet), or an
// error of stream capture (900 to 908: the query was refused while a
// capture is under way), after which the work is not known done.
static inline int memtrack_hip_unknown(hipError_t r) {
	return r == hipErrorNotReady || (r >= hipErrorStreamCaptureUnsupported && r <= hipErrorStreamCaptureWrongThread);
}

// memtrack_hip_reached_prefix answers for the n events of one stream,
// oldest first (n > 0). An event "Captures in event the contents of stream
// at the time of this call" and its query succeeds once "all commands in
// the appropriate stream (specified to hipEventRecord()) have completed"
// (hipEventRecord, hipEventQuery): the work of an older event of the
// stream is part of a newer one's, so where the newer is reached so is the
// older. The newest is queried first, and where the stream has not reached
// it, the first event not reached is found by bisection: at most
// 1 + ceil(log2 n) queries.
static memtrack_hip_reached memtrack_hip_reached_prefix(const hipEvent_t *ev, int n) {
	memtrack_hip_reached a = {n, memtrack_hip.hipEventQuery(ev[n - 1])};
	if (!memtrack_hip_unknown(a.result)) return a;
	a.result = hipSuccess;
	int lo = 0, hi = n - 1; // ev[0..lo) reached, ev[hi] not
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		hipError_t r = memtrack_hip.hipEventQuery(ev[mid]);
		if (memtrack_hip_unknown(r)) {
			hi = mid;
			continue;
		}
		lo = mid + 1;
		if (r != hipSuccess) a.result = r;
	}
	a.reached = lo;
	return a;
}

// memtrack_hip_streams_reached answers, with device current and in one
// call, for the events of nstreams streams: stream i's, oldest first, end
// at ends[i] in events (and start at ends[i-1], or 0). Where the device
// cannot be made current, that failure is every stream's answer, every
// event counting as reached. It returns the result of making the thread's
// previous device current again. The queries run in relaxed stream-capture
// mode, where the runtime has it, as memtrack's own calls.
static hipError_t memtrack_hip_streams_reached(int device, const hipEvent_t *events, const int *ends, int nstreams, memtrack_hip_reached *out) {
	int prev;
	hipStreamCaptureMode m = memtrack_hip_relaxed();
	hipError_t r = memtrack_hip_enter(device, &prev);
	for (int i = 0, start = 0; i < nstreams; start = ends[i++]) {
		out[i] = r == hipSuccess ? memtrack_hip_reached_prefix(events + start, ends[i] - start) : (memtrack_hip_reached){ends[i] - start, r};
	}
	hipError_t back = r == hipSuccess ? memtrack_hip_leave(device, prev) : hipSuccess;
	memtrack_hip_unrelax(m);
	return back;
}
*/
import "C"

import (
	"slices"
	"unsafe"
)

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
	Event        Event   // FreeAsync: the event recorded after the free
	Seq          uint64  // FreeAsync: the event's number, which rises along its stream's order
	Retired      bool    // FreeAsync: the free is known to have run (the stream was synchronized)
	OtherDevice  bool    // the stream is of another device than the one named: nothing ran
	StreamDevice int     // the stream's device, where OtherDevice
	// Capture is the stream's part in a capture, asked in the same call:
	// where its Status is not CaptureNone, nothing ran.
	Capture Capture
}

func streamCallOf(r C.memtrack_hip_result) StreamCall {
	return StreamCall{
		Call: callOf(r), Ptr: uintptr(r.ptr), Event: Event{r.event}, Seq: uint64(r.seq), Retired: r.retired != 0,
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

// FreeAsync frees ptr on stream (hipFreeAsync), with device current, and
// arranges to learn when it has run: with event (created where zero)
// recorded after the free, and numbered so that of two events of FreeAsync
// on one stream, the one the stream reaches first has the lower Seq,
// whichever threads recorded them (the per-thread default stream's are not
// numbered: Seq 0). Where the event cannot be recorded it synchronizes the
// stream and reports the free retired. A stream of another device, or one
// that takes part in a capture, frees nothing.
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

// EventDestroy destroys an event (hipEventDestroy).
func EventDestroy(e Event) { C.memtrack_hip_event_destroy(e.p) }

// StreamEvents holds events recorded on streams of one device, grouped by
// stream, each stream's in the order the stream reaches them, and, once
// Query has asked the runtime, how many of each stream's events, from the
// oldest, the stream has reached. Its buffers are kept from one use to the
// next.
type StreamEvents struct {
	events []C.hipEvent_t
	ends   []C.int // where each stream's events end in events
	out    []C.memtrack_hip_reached
}

// Reset empties s, keeping its buffers.
func (s *StreamEvents) Reset() {
	s.events, s.ends, s.out = s.events[:0], s.ends[:0], s.out[:0]
}

// Add adds e, the next event of the stream being added; EndStream ends
// the stream.
func (s *StreamEvents) Add(e Event) { s.events = append(s.events, e.p) }

// EndStream ends the stream being added; the next Add starts another.
func (s *StreamEvents) EndStream() {
	if n := len(s.events); len(s.ends) == 0 || int(s.ends[len(s.ends)-1]) < n {
		s.ends = append(s.ends, C.int(n))
	}
}

// Streams returns how many streams s holds.
func (s *StreamEvents) Streams() int { return len(s.ends) }

// Len returns how many events stream i holds.
func (s *StreamEvents) Len(i int) int {
	if i == 0 {
		return int(s.ends[0])
	}
	return int(s.ends[i] - s.ends[i-1])
}

// Query asks, with device current and in one call, how far each stream
// has come through its events (hipEventQuery): the newest event of each
// stream first, all older ones being reached where it is, and, where it is
// not, the first event not reached found by bisection, in at most
// 1 + ceil(log2 n) queries for n events. A query that fails counts as
// reached; one refused because a capture is under way, as not reached. It
// returns the result of making the thread's previous device current again.
func (s *StreamEvents) Query(device int) Result {
	s.out = slices.Grow(s.out[:0], len(s.ends))[:len(s.ends)]
	if len(s.ends) == 0 {
		return Success
	}
	return Result(C.memtrack_hip_streams_reached(C.int(device), &s.events[0], &s.ends[0], C.int(len(s.ends)), &s.out[0]))
}

// Reached returns how many of stream i's events, from the oldest, the
// stream has reached, as Query found, and the answer that said so:
// Success, or the error of a failed query (or of making the device
// current).
func (s *StreamEvents) Reached(i int) (int, Result) {
	return int(s.out[i].reached), Result(s.out[i].result)
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
