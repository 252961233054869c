//go:build cuda

package cudadrv

// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync), how a free
// is learned to have run (a reading of its stream), and the capture a
// stream takes part in. Each call makes the stream's context current,
// operates and restores the thread's context, in one cgo call, so that the
// goroutine need not be locked to its thread.

/*
#include <stdint.h>

#include "context.h"

// What memtrack_alloc_async does on a stream that captures a graph
// (CaptureAlloc).
enum { MEMTRACK_CAPTURE_REFUSE, MEMTRACK_CAPTURE_ALLOW, MEMTRACK_CAPTURE_ONLY };

// memtrack_enter_capture enters the stream's context as
// memtrack_enter_stream does and, for a stream of ctx's device, asks for
// the stream's capture (memtrack_ask_capture, its result in a->op). It
// returns what entering returned; where that succeeded, the caller leaves
// with memtrack_leave_stream.
static inline CUresult memtrack_enter_capture(CUcontext ctx, CUstream stream, CUcontext *prev, memtrack_result *a) {
	CUresult r = memtrack_enter_stream(ctx, stream, prev, a);
	if (r == CUDA_SUCCESS && !a->other_device) a->op = memtrack_ask_capture(stream, a);
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

// memtrack_free_async frees ptr on stream. The free of a stream whose
// handle names one stream records nothing: a reading learns that the
// stream ran it (memtrack_read_streams). On the per-thread default stream,
// whose handle names another stream on each thread, so that no later
// reading can ask it, it records event (created if NULL) after the free;
// where that event cannot be recorded, it waits for the stream and reports
// the free retired.
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
	a.op = memtrack_cu.cuMemFreeAsync(ptr, stream);
	if (a.op == CUDA_SUCCESS && stream == MEMTRACK_STREAM_PER_THREAD) {
		// memtrack's own calls: the record (harmless during another
		// thread's capture, on an H200), and, rarely, an event created
		// or the stream synchronized, in relaxed mode.
		CUresult r = CUDA_SUCCESS;
		if (!a.event) {
			CUstreamCaptureMode m = memtrack_relaxed();
			r = memtrack_cu.cuEventCreate(&a.event, CU_EVENT_DISABLE_TIMING);
			memtrack_unrelax(m);
		}
		if (r == CUDA_SUCCESS) r = memtrack_cu.cuEventRecord(a.event, stream);
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
		if (!a.other_device || any_device) a.op = memtrack_check_capture((CUstream)handle, &a);
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

// memtrack_stream_reading is a reading's question of one stream and its
// answer (held.Query, in the driver's terms).
typedef struct {
	uintptr_t stream; // the stream's handle; 0 for the legacy default stream
	uintptr_t ctx;    // the stream's context (a CUcontext)
	int first, n;     // its events, oldest first: events[first .. first+n)
	int ask;          // frees follow them: ask whether the stream is idle
	int record;       // and where it is not, record spare (or a new event) after them
	CUevent spare;
	int reached;      // the answer: the events reached
	int idle;         // the stream had run all its work
	CUevent recorded; // the event recorded after the frees, or NULL
	CUresult result;  // CUDA_SUCCESS, or the failure after which every free of the stream counts as executed
} memtrack_stream_reading;

// memtrack_read_stream answers one question, in the stream's context,
// current. The stream's capture is asked first where it is to be queried
// or recorded on: on a stream that takes part in a capture (or the legacy
// stream while a blocking stream captures, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
// neither is made, since what is enqueued there is the graph's, and a
// query of it fails and invalidates the capture. A query refused for a
// capture says nothing: its frees stay counted.
static void memtrack_read_stream(const CUevent *events, memtrack_stream_reading *a) {
	CUstream stream = (CUstream)a->stream;
	a->reached = 0, a->idle = 0, a->recorded = NULL, a->result = CUDA_SUCCESS;
	if (a->n > 0) a->reached = memtrack_reached_prefix(events + a->first, a->n, &a->result);
	if (!a->ask || a->result != CUDA_SUCCESS || (a->reached < a->n && !a->record)) return;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult r = memtrack_cu.cuStreamIsCapturing(stream, &st);
	if (memtrack_unknown(r) || (r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE)) return;
	if (r != CUDA_SUCCESS) {
		a->result = r;
		return;
	}
	if (a->reached == a->n) {
		r = memtrack_cu.cuStreamQuery(stream);
		if (r == CUDA_SUCCESS) {
			a->idle = 1;
			return;
		}
		if (!memtrack_unknown(r)) {
			a->result = r;
			return;
		}
		if (r != CUDA_ERROR_NOT_READY) return; // refused: a capture is under way after all
	}
	if (!a->record) return;
	CUevent e = a->spare;
	if (!e && memtrack_cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
	if (memtrack_cu.cuEventRecord(e, stream) == CUDA_SUCCESS) {
		a->recorded = e;
	} else if (!a->spare) {
		memtrack_cu.cuEventDestroy(e);
	}
}

// memtrack_read_streams answers, in one call, the questions of a reading
// of n streams (memtrack_read_stream), each in its stream's context, made
// current where it is not. Where a context cannot be made current, that
// failure is its streams' answer: every free of them counts as executed.
// It returns the result of making the thread's previous context current
// again. Everything runs in relaxed stream-capture mode: the driver
// prohibits cuEventQuery and cuStreamQuery while any thread captures in
// global mode, failing them and invalidating the capture (on an H200;
// testdata/fakecuda/RULES.md).
static CUresult memtrack_read_streams(uintptr_t c, const CUevent *events, memtrack_stream_reading *rs, int n) {
	CUcontext ctx = (CUcontext)c, prev = NULL, cur;
	CUstreamCaptureMode m = memtrack_relaxed();
	CUresult r = memtrack_cu.cuCtxGetCurrent(&prev);
	cur = prev;
	for (int i = 0; i < n; i++) {
		memtrack_stream_reading *a = &rs[i];
		CUcontext want = a->ctx ? (CUcontext)a->ctx : ctx;
		if (r == CUDA_SUCCESS && want != cur) {
			CUresult s = memtrack_cu.cuCtxSetCurrent(want);
			if (s != CUDA_SUCCESS) {
				a->reached = a->n, a->idle = 0, a->recorded = NULL, a->result = s;
				continue;
			}
			cur = want;
		}
		if (r != CUDA_SUCCESS) {
			a->reached = a->n, a->idle = 0, a->recorded = NULL, a->result = r;
			continue;
		}
		memtrack_read_stream(events, a);
	}
	CUresult back = r == CUDA_SUCCESS && cur != prev ? memtrack_cu.cuCtxSetCurrent(prev) : CUDA_SUCCESS;
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
	Event        Event   // FreeAsync on the per-thread default stream: the event recorded after the free
	Retired      bool    // FreeAsync on the per-thread default stream: the free is known to have run (the stream was synchronized)
	StreamCtx    Context // the stream's context
	Foreign      bool    // the stream is of another context than ctx
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
		Call: callOf(r), Ptr: uintptr(r.ptr), Event: Event{r.event}, Retired: r.retired != 0,
		StreamCtx: Context(uintptr(unsafe.Pointer(r.stream_ctx))), Foreign: r.foreign != 0, OtherDevice: r.other_device != 0,
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
// does.
func CheckStream(ctx Context, stream uintptr) StreamCall {
	return streamCallOf(C.memtrack_check_stream(C.uintptr_t(ctx), C.uintptr_t(stream), 0))
}

// FreeAsync frees ptr on stream (cuMemFreeAsync) in the stream's context.
// It records nothing on a stream whose handle names one stream: a reading
// learns that the stream ran the free (Readings). On the per-thread default
// stream (StreamPerThread), whose handle names another stream on each
// thread, which no reading made on another thread can ask about, it records
// event (created where zero) after the free; where that event cannot be
// recorded it synchronizes the stream and reports the free retired. The
// event's creation and that synchronization run in relaxed stream-capture
// mode; the free, in the caller's (AllocAsync).
func FreeAsync(ctx Context, ptr uintptr, stream uintptr, event Event) StreamCall {
	// The event crosses as a number, which cgo need not check as it checks
	// a pointer: it is the driver's handle, not Go memory.
	return streamCallOf(C.memtrack_free_async(C.uintptr_t(ctx), C.CUdeviceptr(ptr), C.uintptr_t(stream), C.uintptr_t(uintptr(unsafe.Pointer(event.p)))))
}

// Readings asks, in one call, how far streams have come past the frees
// enqueued on them, and holds the answers: the questions of a reading of
// the device-side figure (internal/held's Query), in the driver's terms.
// Its buffers are kept from one reading to the next.
type Readings struct {
	rs     []C.memtrack_stream_reading
	events []C.CUevent
}

// Reset empties r, keeping its buffers.
func (r *Readings) Reset() { r.rs, r.events = r.rs[:0], r.events[:0] }

// Add adds a question of stream (its handle; 0 for the legacy default
// stream), of context streamCtx: how many of events, recorded on it
// earlier, oldest first, it has reached; where ask, whether it has run all
// its work (cuStreamQuery) once it has reached them all; and where record,
// and the stream has not, to record spare (a new event where zero) on it.
func (r *Readings) Add(stream uintptr, streamCtx Context, events []Event, ask, record bool, spare Event) {
	first := len(r.events)
	for _, e := range events {
		r.events = append(r.events, e.p)
	}
	r.rs = append(r.rs, C.memtrack_stream_reading{
		stream: C.uintptr_t(stream), ctx: C.uintptr_t(streamCtx),
		first: C.int(first), n: C.int(len(events)), ask: cbool(ask), record: cbool(record), spare: spare.p,
	})
}

// Read asks the questions added, in one cgo call, each in its stream's
// context, made current where it is not (ctx, the device's primary
// context, where a question names none), in relaxed stream-capture mode:
// the newest event of each stream first, all older ones being reached
// where it is (an event captures all the work enqueued on its stream
// before it), and, where it is not, the first event not reached by
// bisection, in at most 1 + ceil(log2 n) queries for n events; then, where
// asked, whether the stream is idle, and where it is not, an event
// recorded. Neither is made of a stream that takes part in a capture. It
// returns the result of making the thread's previous context current
// again.
func (r *Readings) Read(ctx Context) Result {
	if len(r.rs) == 0 {
		return Success
	}
	var events *C.CUevent
	if len(r.events) > 0 {
		events = &r.events[0]
	}
	return Result(C.memtrack_read_streams(C.uintptr_t(ctx), events, &r.rs[0], C.int(len(r.rs))))
}

// Answer returns the answer to question i: how many of its events the
// stream has reached; whether it had run all its work; the event recorded
// on it (zero where none); and Success, or the failure after which every
// free of the stream counts as executed (a query that failed, its context
// not made current).
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
