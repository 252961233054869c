//go:build cuda

package cudadrv

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync), how a free
// is learned to have run (an event recorded after it), and the capture a
// stream takes part in. Each call makes the stream's context current,
// operates and restores the thread's context, in one cgo call, so that the
// goroutine need not be locked to its thread.

/*
#include <pthread.h>
#include <stdint.h>

#include "context.h"

// What memtrack_alloc_async does on a stream that captures a graph
// (CaptureAlloc).
enum { MEMTRACK_CAPTURE_REFUSE, MEMTRACK_CAPTURE_ALLOW, MEMTRACK_CAPTURE_ONLY };

// The events FreeAsync records after its frees are numbered per stream, in
// the stream's order: a stream hashes to one of these locks, under which
// its event is recorded and numbered, so that of two threads that free on
// one stream at once, the one whose event comes first in the stream takes
// the lower number. Streams that share a lock share its numbers, which
// still rise along each stream.
#define MEMTRACK_RECORD_LOCKS 64
static pthread_mutex_t memtrack_record_mu[MEMTRACK_RECORD_LOCKS] = {[0 ... MEMTRACK_RECORD_LOCKS - 1] = PTHREAD_MUTEX_INITIALIZER};
static unsigned long long memtrack_record_seq[MEMTRACK_RECORD_LOCKS];

// memtrack_record records event on stream and returns in *seq its number:
// 0 for the per-thread default stream, whose handle names another stream
// on each thread, so that its events are not numbered in one order.
static CUresult memtrack_record(CUevent event, CUstream stream, unsigned long long *seq) {
	if (stream == MEMTRACK_STREAM_PER_THREAD) {
		*seq = 0;
		return memtrack_cu.cuEventRecord(event, stream);
	}
	uintptr_t h = stream == MEMTRACK_STREAM_LEGACY ? 0 : (uintptr_t)stream; // NULL names the same stream
	unsigned i = (unsigned)(((h >> 4) * 0x9E3779B97F4A7C15ull) >> 58); // 64 locks
	pthread_mutex_lock(&memtrack_record_mu[i]);
	CUresult r = memtrack_cu.cuEventRecord(event, stream);
	*seq = ++memtrack_record_seq[i];
	pthread_mutex_unlock(&memtrack_record_mu[i]);
	return r;
}

// memtrack_enter_capture enters the stream's context as
// memtrack_enter_stream does and, for a stream of ctx's device, asks for
// the stream's capture (memtrack_ask_capture, its result in a->op),
// unless entering found it invalidated. It returns what entering returned;
// where that succeeded, the caller leaves with memtrack_leave_stream.
static inline CUresult memtrack_enter_capture(CUcontext ctx, CUstream stream, CUcontext *prev, memtrack_result *a) {
	CUresult r = memtrack_enter_stream(ctx, stream, prev, a);
	if (r == CUDA_SUCCESS && !a->other_device && !a->capturing) a->op = memtrack_ask_capture(stream, a);
	return r;
}

// memtrack_refused_in reports in a->invalidated whether a->op, the result of
// a node that the active capture a->capture_id of stream was to get, left
// that capture invalidated: where the driver refused the node, its answer
// (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), or else the stream's status
// after it ("When an invalid operation is attempted during stream capture,
// any associated capture graphs are invalidated", CUDA Programming Guide,
// Stream Capture: Invalidation). The capture's ID is the one read in the
// same call, before the node: the driver gives none for an invalidated
// capture.
static void memtrack_refused_in(CUstream stream, memtrack_result *a) {
	if (a->op == CUDA_SUCCESS || a->capturing != CU_STREAM_CAPTURE_STATUS_ACTIVE || a->capture_id == 0) return;
	memtrack_result after = {0};
	a->invalidated = a->op == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
			 (memtrack_check_capture(stream, &after) == CUDA_SUCCESS && after.capturing == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
}

// memtrack_alloc_async allocates size bytes on stream from the current pool
// of the stream's device, in the stream's context; a stream of another
// device than ctx's allocates nothing (other_device). On a stream whose
// capture is active, the allocation is an allocation node of the capture's
// graph where mode allows it, and nothing otherwise; mode ONLY allocates
// nothing on a stream that is not capturing.
static memtrack_result memtrack_alloc_async(uintptr_t c, size_t size, uintptr_t handle, int mode) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result a = {0};
	if (!memtrack_cu.cuMemAllocAsync) {
		a.op = CUDA_ERROR_NOT_SUPPORTED;
		return a;
	}
	CUcontext prev;
	if ((a.enter = memtrack_enter_capture(ctx, (CUstream)handle, &prev, &a)) != CUDA_SUCCESS) return a;
	int run = a.capturing ? mode != MEMTRACK_CAPTURE_REFUSE && a.capturing == CU_STREAM_CAPTURE_STATUS_ACTIVE && a.capture_id != 0
			      : mode != MEMTRACK_CAPTURE_ONLY;
	if (!a.other_device && a.op == CUDA_SUCCESS && run) {
		a.op = memtrack_cu.cuMemAllocAsync(&a.ptr, size, (CUstream)handle);
		if (a.capturing) memtrack_refused_in((CUstream)handle, &a);
	}
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_free_graph frees ptr, a graph allocation, on stream
// (cuMemFreeAsync), in the stream's context and without an event: on a
// stream whose capture is active, a free node of the capture's graph; on
// one that is not capturing, the free of the allocation's last launch. A
// stream of another device, or one whose capture is invalidated, frees
// nothing.
static memtrack_result memtrack_free_graph(uintptr_t c, CUdeviceptr ptr, uintptr_t handle) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result a = {0};
	if (!memtrack_cu.cuMemFreeAsync) {
		a.op = CUDA_ERROR_NOT_SUPPORTED;
		return a;
	}
	CUstream stream = (CUstream)handle;
	CUcontext prev;
	if ((a.enter = memtrack_enter_capture(ctx, stream, &prev, &a)) != CUDA_SUCCESS) return a;
	if (!a.other_device && a.op == CUDA_SUCCESS && (!a.capturing || a.capturing == CU_STREAM_CAPTURE_STATUS_ACTIVE)) {
		a.op = memtrack_cu.cuMemFreeAsync(ptr, stream);
		memtrack_refused_in(stream, &a);
	}
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_free_async frees ptr on stream and arranges to learn when the
// stream has executed the free: with event (created if NULL, or where the
// stream is of another context than ctx) recorded after the free, and
// numbered (memtrack_record). Where the event cannot be recorded, it waits
// for the stream and reports the free retired.
static memtrack_result memtrack_free_async(uintptr_t c, CUdeviceptr ptr, uintptr_t handle, uintptr_t event) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result a = {0};
	if (!memtrack_cu.cuMemFreeAsync) {
		a.op = CUDA_ERROR_NOT_SUPPORTED;
		return a;
	}
	CUstream stream = (CUstream)handle;
	CUcontext prev;
	a.event = (CUevent)event;
	if ((a.enter = memtrack_enter_capture(ctx, stream, &prev, &a)) != CUDA_SUCCESS) return a;
	if (a.other_device || a.capturing || a.op != CUDA_SUCCESS) {
		a.restore = memtrack_leave_stream(ctx, prev, &a);
		return a;
	}
	if (a.foreign && a.event) {
		// The event given is of ctx; the stream's context needs its own.
		a.event = NULL;
		a.spare_unused = 1;
	}
	a.op = memtrack_cu.cuMemFreeAsync(ptr, stream);
	if (a.op == CUDA_SUCCESS) {
		// memtrack's own calls: the record (harmless during another
		// thread's capture, on an H200), and, rarely, an event created
		// or the stream synchronized, in relaxed mode.
		CUresult r = CUDA_SUCCESS;
		if (!a.event) {
			CUstreamCaptureMode m = memtrack_relaxed();
			r = memtrack_cu.cuEventCreate(&a.event, CU_EVENT_DISABLE_TIMING);
			memtrack_unrelax(m);
		}
		if (r == CUDA_SUCCESS) r = memtrack_record(a.event, stream, &a.seq);
		if (r != CUDA_SUCCESS) {
			CUstreamCaptureMode m = memtrack_relaxed();
			memtrack_cu.cuStreamSynchronize(stream);
			memtrack_unrelax(m);
			a.retired = 1;
		}
	}
	a.restore = memtrack_leave_stream(ctx, prev, &a);
	return a;
}

// memtrack_check_stream reports what memtrack_alloc_async would find of
// stream (another device, a capture) without allocating; where any_device,
// it asks for the capture of a stream of another device too.
// It runs in relaxed stream-capture mode: it reads, for memtrack.
static memtrack_result memtrack_check_stream(uintptr_t c, uintptr_t handle, int any_device) {
	CUcontext ctx = (CUcontext)c;
	memtrack_result a = {0};
	CUcontext prev;
	CUstreamCaptureMode m = memtrack_relaxed();
	if ((a.enter = memtrack_enter_stream(ctx, (CUstream)handle, &prev, &a)) == CUDA_SUCCESS) {
		if ((!a.other_device || any_device) && !a.capturing) a.op = memtrack_check_capture((CUstream)handle, &a);
		a.restore = memtrack_leave_stream(ctx, prev, &a);
	}
	memtrack_unrelax(m);
	return a;
}

// memtrack_event_destroy destroys an event memtrack keeps no more. It runs
// in relaxed stream-capture mode, as memtrack's own call.
static void memtrack_event_destroy(CUevent e) {
	CUstreamCaptureMode m = memtrack_relaxed();
	memtrack_cu.cuEventDestroy(e);
	memtrack_unrelax(m);
}

// memtrack_unknown reports whether r, the answer of a query, says
// nothing of the work queried: CUDA_ERROR_NOT_READY (not done yet), or an
// error of stream capture (900 to 908 in cuda.h: the query was refused
// while a capture is under way), after which the work is not known done.
static inline int memtrack_unknown(CUresult r) {
	return r == CUDA_ERROR_NOT_READY || (r >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && r <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
}

// memtrack_reached_prefix returns how many of the n events ev of one
// stream, oldest first (n > 0), the stream has reached, and in *r the
// error of a query that failed, if one did. A query that finds an event
// reached finds every older one reached too: an event captures all the
// work enqueued on its stream before it (cuEventRecord), so the work of an
// older event is part of a newer one's. The newest is queried first, and
// where the stream has not reached it, the first event not reached is
// found by bisection: at most 1 + ceil(log2 n) queries.
static int memtrack_reached_prefix(const CUevent *ev, int n, CUresult *r) {
	CUresult q = memtrack_cu.cuEventQuery(ev[n - 1]);
	if (!memtrack_unknown(q)) {
		*r = q;
		return n;
	}
	int lo = 0, hi = n - 1; // ev[0..lo) reached, ev[hi] not
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		q = memtrack_cu.cuEventQuery(ev[mid]);
		if (memtrack_unknown(q)) {
			hi = mid;
			continue;
		}
		lo = mid + 1;
		if (q != CUDA_SUCCESS) *r = q;
	}
	return lo;
}

// memtrack_streams_reached answers, in ctx and in one call, for the events
// of nstreams streams: stream i's, oldest first, end at ends[i] in events
// (and start at ends[i-1], or 0); out[i] is how many of them the stream
// has reached, and res[i] CUDA_SUCCESS or the error of a query that
// failed, or of making ctx current, after which the stream's frees count
// as executed. It returns the result of making the thread's previous
// context current again. The queries run in relaxed stream-capture mode:
// the driver prohibits cuEventQuery while any thread captures in global
// mode, failing it and invalidating the capture (on an H200;
// testdata/fakecuda/RULES.md), and a reading must neither fail nor
// invalidate the program's capture.
static CUresult memtrack_streams_reached(uintptr_t c, const CUevent *events, const int *ends, int nstreams, int *out, CUresult *res) {
	CUcontext ctx = (CUcontext)c;
	CUcontext prev;
	CUstreamCaptureMode m = memtrack_relaxed();
	CUresult r = memtrack_enter(ctx, &prev);
	for (int i = 0, start = 0; i < nstreams; start = ends[i++]) {
		res[i] = r;
		out[i] = ends[i] - start;
		if (r == CUDA_SUCCESS) out[i] = memtrack_reached_prefix(events + start, ends[i] - start, &res[i]);
	}
	CUresult back = r == CUDA_SUCCESS ? memtrack_leave(ctx, prev) : CUDA_SUCCESS;
	memtrack_unrelax(m);
	return back;
}
*/
import "C"

import "unsafe"

// Event is a CUDA event (CUevent); the zero Event is none.
type Event struct{ p C.CUevent }

// IsZero reports whether e is no event.
func (e Event) IsZero() bool { return e.p == nil }

// The handles of the default streams: 0 and StreamLegacy name the legacy
// default stream of the calling thread's current context, StreamPerThread
// the thread's own default stream (cuda.h's CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD).
const (
	StreamLegacy    uintptr = 0x1
	StreamPerThread uintptr = 0x2
)

// StreamCall is what a stream-ordered operation reports.
type StreamCall struct {
	Call
	Ptr          uintptr // AllocAsync: the allocation
	Event        Event   // FreeAsync: the event recorded after the free
	Seq          uint64  // FreeAsync: the event's number, which rises along its stream's order
	Retired      bool    // FreeAsync: the free is known to have run (the stream was synchronized)
	StreamCtx    Context // the stream's context
	Foreign      bool    // the stream is of another context than ctx
	SpareUnused  bool    // FreeAsync: the event given was not used (another context's stream)
	OtherDevice  bool    // the stream is of another device than ctx's: nothing ran
	StreamDevice int     // the stream's device, where OtherDevice
	Capturing    bool    // the stream takes part in a capture: nothing ran, unless AllocAsyncIn or FreeGraph added a node
	// CaptureStatus is the stream's capture status where Capturing: active,
	// or invalidated.
	CaptureStatus CaptureStatus
	CaptureID     uint64 // where the capture is active: its ID, unique in the process (0 where the driver cannot say, before CUDA 11.3)
	// Invalidated says, for AllocAsyncIn and FreeGraph in the active
	// capture CaptureID, that the driver refused the node and the capture
	// is invalidated since: the one way to learn which capture the driver
	// invalidated, since it gives no ID for an invalidated one.
	Invalidated bool
}

func streamCallOf(r C.memtrack_result) StreamCall {
	return StreamCall{
		Call: callOf(r), Ptr: uintptr(r.ptr), Event: Event{r.event}, Seq: uint64(r.seq), Retired: r.retired != 0,
		StreamCtx: Context(uintptr(unsafe.Pointer(r.stream_ctx))), Foreign: r.foreign != 0, SpareUnused: r.spare_unused != 0, OtherDevice: r.other_device != 0,
		StreamDevice: int(r.stream_device), Capturing: r.capturing != 0, CaptureStatus: CaptureStatus(r.capturing),
		CaptureID: uint64(r.capture_id), Invalidated: r.invalidated != 0,
	}
}

// AllocAsync allocates size bytes on stream (cuMemAllocAsync), from the
// current pool of the stream's device, in the stream's context
// (cuStreamGetCtx; ctx itself for a default stream's handle, which the
// driver is not asked about). A stream of another device than ctx's, or
// one that is capturing a graph (cuStreamIsCapturing, and where it
// captures cuStreamGetCaptureInfo_v2, which gives the capture's ID; before
// CUDA 11.3 no ID), allocates nothing. Where the driver lacks cuMemAllocAsync the result is
// CUDA_ERROR_NOT_SUPPORTED (MemPools says why); so for FreeAsync and
// cuMemFreeAsync.
//
// cuMemAllocAsync runs in the calling thread's stream-capture mode, as the
// program made it: on a stream that does not capture, while another
// thread captures in global mode (or this one has a capture of its own),
// the driver refuses it (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and
// invalidates the capture, as it would the raw call; a thread made relaxed
// (cuThreadExchangeStreamCaptureMode) allocates. The calls AllocAsync adds
// (the context switch, cuStreamGetCtx, cuStreamIsCapturing) change
// nothing of that: the H200 refused none of them during another thread's
// global capture (cuStreamGetCtx, which it was not asked about, reads the
// stream's handle as they do). So for FreeAsync and cuMemFreeAsync.
func AllocAsync(ctx Context, size int64, stream uintptr) StreamCall {
	return AllocAsyncIn(ctx, size, stream, RefuseCapture)
}

// CaptureAlloc says what AllocAsyncIn does on a stream that captures a
// graph.
type CaptureAlloc int

// The choices of AllocAsyncIn.
const (
	// RefuseCapture allocates nothing on a capturing stream, as AllocAsync.
	RefuseCapture CaptureAlloc = C.MEMTRACK_CAPTURE_REFUSE
	// AllowCapture allocates on a stream whose capture is active too:
	// cuMemAllocAsync then adds an allocation node to the capture's graph
	// and returns its address, fixed across the graph's launches
	// (cuGraphAddMemAllocNode). An invalidated capture, or one whose ID
	// the driver does not give (before CUDA 11.3), gets nothing.
	AllowCapture CaptureAlloc = C.MEMTRACK_CAPTURE_ALLOW
	// OnlyCapture is AllowCapture on a capturing stream, and allocates
	// nothing on a stream that is not capturing.
	OnlyCapture CaptureAlloc = C.MEMTRACK_CAPTURE_ONLY
)

// AllocAsyncIn is AllocAsync, with mode saying what it does on a stream
// that captures a graph. Where it allocated in a capture, the result has
// Capturing set, the capture's ID and the node's address (Ptr).
func AllocAsyncIn(ctx Context, size int64, stream uintptr, mode CaptureAlloc) StreamCall {
	return streamCallOf(C.memtrack_alloc_async(C.uintptr_t(ctx), C.size_t(size), C.uintptr_t(stream), C.int(mode)))
}

// FreeGraph frees ptr, an allocation of a graph, on stream
// (cuMemFreeAsync) in the stream's context, recording no event: on a
// stream whose capture is active it adds a free node to the capture's
// graph; on one that is not capturing it frees the allocation of the
// graph's last launch, which outlived it, when the stream reaches the free
// (cuGraphAddMemAllocNode). It reports the stream's capture, and its ID,
// from the same call. A stream of another device, or one whose capture is
// invalidated, frees nothing.
func FreeGraph(ctx Context, ptr uintptr, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_free_graph(C.uintptr_t(ctx), C.CUdeviceptr(ptr), C.uintptr_t(stream)))
}

// CheckStream reports what AllocAsync would find of stream, in ctx, without
// allocating: whether it is of another device, or capturing a graph, and
// which capture. It runs in relaxed stream-capture mode, as CaptureInfo
// does. As every call here that takes a stream, it is for a stream the
// program passes in the call it serves: a destroyed stream's handle is
// undefined behaviour to the driver (doc.go, "Stream handles").
func CheckStream(ctx Context, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_check_stream(C.uintptr_t(ctx), C.uintptr_t(stream), 0))
}

// FreeAsync frees ptr on stream (cuMemFreeAsync) in the stream's context
// and arranges to learn when it has run: with event (created where zero, or
// where the stream is of another context) recorded after the free, and
// numbered so that of two events of FreeAsync on one stream, the one the
// stream reaches first has the lower Seq, whichever threads recorded them
// (the per-thread default stream's are not numbered: Seq 0). Where the
// event cannot be recorded it synchronizes the stream and reports the free
// retired. The event's creation and that synchronization run in relaxed
// stream-capture mode; the free, in the caller's (AllocAsync).
func FreeAsync(ctx Context, ptr uintptr, stream uintptr, event Event) StreamCall {
	// The event crosses as a number, which cgo need not check as it checks
	// a pointer: it is the driver's handle, not Go memory.
	return streamCallOf(C.memtrack_free_async(C.uintptr_t(ctx), C.CUdeviceptr(ptr), C.uintptr_t(stream), C.uintptr_t(uintptr(unsafe.Pointer(event.p)))))
}

// StreamEvents asks how far streams have come through events recorded on
// them, and holds the answers: for each stream, how many of its events,
// from the oldest, the stream has reached. Its buffers are kept from one
// query to the next.
type StreamEvents struct {
	events  []C.CUevent
	ends    []C.int // where each stream's events end
	reached []C.int
	res     []C.CUresult
}

// Reset empties s, keeping its buffers.
func (s *StreamEvents) Reset() {
	s.events, s.ends, s.reached, s.res = s.events[:0], s.ends[:0], s.reached[:0], s.res[:0]
}

// Add adds a stream's events, in the order the stream reaches them; a
// stream of no event is not added.
func (s *StreamEvents) Add(events []Event) {
	if len(events) == 0 {
		return
	}
	for _, e := range events {
		s.events = append(s.events, e.p)
	}
	s.ends = append(s.ends, C.int(len(s.events)))
}

// Streams returns how many streams s holds.
func (s *StreamEvents) Streams() int { return len(s.ends) }

// Query asks, in ctx and in one call, how far each stream added has come
// through its events (cuEventQuery), in relaxed stream-capture mode: the
// newest event of each stream first, all older ones being reached where it
// is (an event captures all the work enqueued on its stream before it),
// and, where it is not, the first event not reached by bisection, in at
// most 1 + ceil(log2 n) queries for n events. A query refused because a
// capture is under way answers "not reached". It returns the result of
// making the thread's previous context current again.
func (s *StreamEvents) Query(ctx Context) Result {
	n := len(s.ends)
	s.reached = append(s.reached[:0], make([]C.int, n)...)
	s.res = append(s.res[:0], make([]C.CUresult, n)...)
	if n == 0 {
		return Success
	}
	return Result(C.memtrack_streams_reached(C.uintptr_t(ctx), &s.events[0], &s.ends[0], C.int(n), &s.reached[0], &s.res[0]))
}

// Reached returns how many of stream i's events, from the oldest, the
// stream has reached, as Query found, and the answer that said so:
// Success, or the error of a query that failed (or of making ctx
// current), after which the stream's frees count as executed and its
// events are not to be recorded again.
func (s *StreamEvents) Reached(i int) (int, Result) {
	return int(s.reached[i]), Result(s.res[i])
}

// EventDestroy destroys an event (cuEventDestroy), in relaxed
// stream-capture mode; the zero Event is none, and nothing is done.
func EventDestroy(e Event) {
	if e.p != nil {
		C.memtrack_event_destroy(e.p)
	}
}

// CaptureStatus is a stream's capture status (CUstreamCaptureStatus).
type CaptureStatus int

// The capture statuses of cuda.h.
const (
	CaptureNone        CaptureStatus = C.CU_STREAM_CAPTURE_STATUS_NONE        // not capturing
	CaptureOngoing     CaptureStatus = C.CU_STREAM_CAPTURE_STATUS_ACTIVE      // capturing
	CaptureInvalidated CaptureStatus = C.CU_STREAM_CAPTURE_STATUS_INVALIDATED // capturing, but the capture failed: it will end with no graph
)

// Capture is a stream's part in a capture (cuStreamGetCaptureInfo_v2).
type Capture struct {
	Status CaptureStatus
	// ID is the capture's ID, "unique over the lifetime of the process",
	// where Status is CaptureOngoing; 0 otherwise. Streams that joined a
	// capture by waiting for an event recorded in it share its ID.
	ID uint64
}

// CaptureInfo returns stream's capture status and, where it is active,
// the capture's ID, asked in the stream's context (cuStreamGetCtx), a
// stream of another device's too, in the one driver call AllocAsync makes
// (cuStreamGetCaptureInfo_v2; cuStreamIsCapturing, which gives no ID,
// before CUDA 11.3), in relaxed stream-capture mode.
func CaptureInfo(ctx Context, stream uintptr) (Capture, Call) {
	r := C.memtrack_check_stream(C.uintptr_t(ctx), C.uintptr_t(stream), 1)
	return Capture{Status: CaptureStatus(r.capturing), ID: uint64(r.capture_id)}, callOf(r)
}
