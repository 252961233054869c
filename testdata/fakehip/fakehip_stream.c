// fakehip_stream.c: the fake runtime's streams, events, host callbacks,
// stream capture, memory pools with stream-ordered allocation, and graph
// memory, built with fakehip.c. RULES.md lists the rules with their
// sources. Its environment variables, read once (by fakehip.c's
// configuration):
//
//	FAKEHIP_POOLS=0          the devices have no memory pools
//	                         (hipDeviceAttributeMemoryPoolsSupported 0;
//	                         the pool calls answer hipErrorNotSupported)
//	FAKEHIP_POOL_GRANULE=b   the pool reserves device memory in granules of
//	                         b bytes (default 2 MiB)
//	FAKEHIP_POOL_FREE=r      when a hipFreeAsync's bytes leave
//	                         hipMemPoolAttrUsedMemCurrent: executed
//	                         (default), when the stream runs the free, or
//	                         enqueued, at once
//	FAKEHIP_TRIM_OBSERVED=r  what makes the host observe a stream's free
//	                         complete, so that hipMemPoolTrimTo may release
//	                         its memory: sync (default), a synchronize of
//	                         the stream, of an event recorded after the
//	                         free, or of the device; executed, the stream
//	                         running it
//	FAKEHIP_HIGH_RESET=r     what a high watermark reads once reset to 0
//	                         (hipMemPoolSetAttribute,
//	                         hipDeviceSetGraphMemAttribute): current
//	                         (default), the figure's current value, or
//	                         zero, until the figure next rises
//
// Each stream runs its work in order on a thread of its own: a host
// callback runs there and holds the stream's later work until it returns.
#include "fakehip_api.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "machine.h"

#define STREAM_MAGIC 0x5354524du // "STRM"
#define EVENT_MAGIC 0x45564e54u  // "EVNT"
#define POOL_MAGIC 0x504f4f4cu   // "POOL"
#define GRAPH_MAGIC 0x47524150u  // "GRAP"

static int pools_supported = 1;
static size_t granule = (size_t)2 << 20;
static int free_enqueued;     // FAKEHIP_POOL_FREE=enqueued
static int observed_executed; // FAKEHIP_TRIM_OBSERVED=executed
static int high_reset_zero;   // FAKEHIP_HIGH_RESET=zero

void fakehip_stream_configure(void) {
	const char *s = getenv("FAKEHIP_POOLS");
	pools_supported = !(s && strcmp(s, "0") == 0);
	s = getenv("FAKEHIP_POOL_GRANULE");
	if (s && *s && strtoull(s, NULL, 0) > 0) granule = (size_t)strtoull(s, NULL, 0);
	s = getenv("FAKEHIP_POOL_FREE");
	free_enqueued = s && strcmp(s, "enqueued") == 0;
	s = getenv("FAKEHIP_TRIM_OBSERVED");
	observed_executed = s && strcmp(s, "executed") == 0;
	s = getenv("FAKEHIP_HIGH_RESET");
	high_reset_zero = s && strcmp(s, "zero") == 0;
}

int fakehip_pools_supported(void) { return pools_supported; }

static size_t round_up(size_t n) { return (n + granule - 1) / granule * granule; }

// ---- pools

// The states of a stream-ordered allocation.
enum { LIVE, PENDING, DONE };

struct block {
	struct block *next;
	uintptr_t ptr;
	size_t size;
	int state;
	struct ihipStream_t *stream; // PENDING, DONE: the stream of its free
	uint64_t free_seq;           // and the free's place in it
};

struct ihipMemPoolHandle_t {
	unsigned magic;
	int device;
	size_t reserved, reserved_high, used, used_high;
	uint64_t threshold;
	int reuse[3]; // hipMemPoolReuse* (ints, default enabled)
	struct block *blocks;
};

// Everything of this file is under mu, but the streams' queues, which each
// stream's own lock guards.
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct ihipMemPoolHandle_t pools[MACHINE_DEVICES];

static struct ihipMemPoolHandle_t *device_pool(int dev) {
	struct ihipMemPoolHandle_t *p = &pools[dev];
	if (p->magic != POOL_MAGIC) {
		memset(p, 0, sizeof *p);
		p->magic = POOL_MAGIC;
		p->device = dev;
		p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
	}
	return p;
}

static int valid_pool(hipMemPool_t pool) {
	for (int d = 0; d < MACHINE_DEVICES; d++) {
		if (pool == &pools[d] && pools[d].magic == POOL_MAGIC) return 1;
	}
	return 0;
}

// note_used and note_reserved keep the high watermarks; mu is held.
static void note_used(struct ihipMemPoolHandle_t *p) {
	if (p->used > p->used_high) p->used_high = p->used;
}

static void note_reserved(struct ihipMemPoolHandle_t *p) {
	if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
}

// committed is what the pool cannot hand out again: live allocations and
// frees not yet run; outstanding is what a trim cannot release: those and
// frees run but not observed by the host. mu is held.
static size_t committed(const struct ihipMemPoolHandle_t *p) {
	size_t n = 0;
	for (const struct block *b = p->blocks; b; b = b->next) n += b->state != DONE ? b->size : 0;
	return n;
}

static size_t outstanding(const struct ihipMemPoolHandle_t *p) {
	size_t n = 0;
	for (const struct block *b = p->blocks; b; b = b->next) n += b->size;
	return n;
}

// shrink returns to the device what p reserves above keep, never below
// what is outstanding; mu is held.
static void shrink(struct ihipMemPoolHandle_t *p, size_t keep) {
	size_t floor = round_up(outstanding(p));
	size_t target = round_up(keep) > floor ? round_up(keep) : floor;
	if (target >= p->reserved) return;
	fakehip_uncharge(p->device, p->reserved - target);
	p->reserved = target;
}

// observe drops the blocks whose free completion the host has observed:
// those of stream s freed at or before seq (s NULL: every stream of dev);
// mu is held.
static void observe(int dev, struct ihipStream_t *s, uint64_t seq) {
	struct ihipMemPoolHandle_t *p = device_pool(dev);
	for (struct block **bp = &p->blocks; *bp;) {
		struct block *b = *bp;
		if (b->state == DONE && (!s || (b->stream == s && b->free_seq <= seq))) {
			*bp = b->next;
			free(b);
			continue;
		}
		bp = &b->next;
	}
}

// synchronized is what a synchronize does to the pool of dev: it observes
// the frees it waited for, and the pool returns what it reserves above its
// release threshold ("When more than the release threshold bytes of memory
// are held by the memory pool, the allocator will try to release memory
// back to the OS on the next call to stream, event or context
// synchronize"); mu is held.
static void synchronized(int dev, struct ihipStream_t *s, uint64_t seq) {
	observe(dev, s, seq);
	struct ihipMemPoolHandle_t *p = device_pool(dev);
	if (p->reserved > p->threshold) shrink(p, (size_t)p->threshold);
}

// ---- streams

enum { OP_FREE, OP_RECORD, OP_CALLBACK };

struct op {
	struct op *next;
	int kind;
	uint64_t seq;
	struct block *block;       // OP_FREE
	hipStreamCallback_t cb;    // OP_CALLBACK
	void *data;
	hipStream_t handle;        // the handle the callback is given
};

struct ihipStream_t {
	unsigned magic;
	int device;
	int destroyed;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct op *head, *tail;
	uint64_t enqueued, executed;
	int capturing; // hipStreamCaptureStatus
	unsigned long long capture_id;
	struct ihipStream_t *all; // the registry's chain
};

struct ihipEvent_t {
	unsigned magic;
	int device;
	struct ihipStream_t *stream; // the stream of its last record, or NULL
	uint64_t seq;                // and the record's place in it
};

struct ihipGraph_t {
	unsigned magic;
};

static struct ihipStream_t *registry; // every stream, under mu; never freed
static struct ihipStream_t null_streams[MACHINE_DEVICES];
static __thread struct ihipStream_t *per_thread[MACHINE_DEVICES];
static __thread hipStreamCaptureMode capture_mode = hipStreamCaptureModeGlobal;
static unsigned long long capture_ids;

// run executes op on stream s, the stream's lock not held.
static void run(struct ihipStream_t *s, struct op *op) {
	switch (op->kind) {
	case OP_FREE:
		pthread_mutex_lock(&mu);
		op->block->state = DONE;
		struct ihipMemPoolHandle_t *p = device_pool(s->device);
		if (!free_enqueued) p->used -= op->block->size;
		if (observed_executed) observe(s->device, s, op->seq);
		pthread_mutex_unlock(&mu);
		break;
	case OP_CALLBACK:
		op->cb(op->handle, hipSuccess, op->data);
		break;
	default: // OP_RECORD: the event is reached once executed passes it
		break;
	}
}

static void *worker(void *arg) {
	struct ihipStream_t *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->destroyed) pthread_cond_wait(&s->cv, &s->mu);
		if (!s->head) break;
		struct op *op = s->head;
		pthread_mutex_unlock(&s->mu);
		run(s, op);
		pthread_mutex_lock(&s->mu);
		s->head = op->next;
		if (!s->head) s->tail = NULL;
		s->executed = op->seq;
		free(op);
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

// start makes s a stream of dev with its thread running; mu is held.
static hipError_t start(struct ihipStream_t *s, int dev) {
	memset(s, 0, sizeof *s);
	s->device = dev;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	int err = pthread_create(&t, &a, worker, s);
	pthread_attr_destroy(&a);
	if (err) return hipErrorOutOfMemory;
	s->all = registry;
	registry = s;
	__atomic_store_n(&s->magic, STREAM_MAGIC, __ATOMIC_RELEASE);
	fakehip_note_queue(dev);
	return hipSuccess;
}

// resolve finds the stream of handle h for the calling thread: NULL and
// hipStreamLegacy name the current device's null stream, hipStreamPerThread
// the thread's own stream of the current device; anything else must be a
// live stream the fake made (hipErrorInvalidHandle otherwise).
static hipError_t resolve(hipStream_t h, struct ihipStream_t **out) {
	int dev = fakehip_current_device();
	hipError_t r = hipSuccess;
	pthread_mutex_lock(&mu);
	if (h == NULL || h == FAKEHIP_STREAM_LEGACY) {
		*out = &null_streams[dev];
		if (null_streams[dev].magic != STREAM_MAGIC) r = start(&null_streams[dev], dev);
	} else if (h == hipStreamPerThread) {
		if (!per_thread[dev]) {
			struct ihipStream_t *s = calloc(1, sizeof *s);
			r = s ? start(s, dev) : hipErrorOutOfMemory;
			if (r == hipSuccess) per_thread[dev] = s;
		}
		*out = per_thread[dev];
	} else {
		struct ihipStream_t *s = registry;
		while (s && s != h) s = s->all;
		if (!s || s->destroyed) r = hipErrorInvalidHandle;
		*out = s;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

// enqueue adds op to s and returns its place in the stream.
static uint64_t enqueue(struct ihipStream_t *s, struct op *op) {
	pthread_mutex_lock(&s->mu);
	op->seq = ++s->enqueued;
	if (s->tail) {
		s->tail->next = op;
	} else {
		s->head = op;
	}
	s->tail = op;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return op->seq;
}

// wait waits until s has run its work up to seq.
static void wait(struct ihipStream_t *s, uint64_t seq) {
	pthread_mutex_lock(&s->mu);
	while (s->executed < seq) pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

static uint64_t enqueued(struct ihipStream_t *s) {
	pthread_mutex_lock(&s->mu);
	uint64_t n = s->enqueued;
	pthread_mutex_unlock(&s->mu);
	return n;
}

hipError_t hipStreamCreate(hipStream_t *stream) {
	hipError_t r = fakehip_ready("hipStreamCreate");
	if (r != hipSuccess) return r;
	if (!stream) return hipErrorInvalidValue;
	struct ihipStream_t *s = calloc(1, sizeof *s);
	if (!s) return hipErrorOutOfMemory;
	pthread_mutex_lock(&mu);
	r = start(s, fakehip_current_device());
	pthread_mutex_unlock(&mu);
	if (r != hipSuccess) {
		free(s);
		return r;
	}
	*stream = s;
	return hipSuccess;
}

// hipStreamDestroy returns at once; the stream's work enqueued before runs
// to its end (RULES.md).
hipError_t hipStreamDestroy(hipStream_t stream) {
	hipError_t r = fakehip_ready("hipStreamDestroy");
	if (r != hipSuccess) return r;
	if (stream == NULL || stream == FAKEHIP_STREAM_LEGACY || stream == hipStreamPerThread) return hipErrorInvalidHandle;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	pthread_mutex_lock(&s->mu);
	s->destroyed = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return hipSuccess;
}

hipError_t hipStreamQuery(hipStream_t stream) {
	hipError_t r = fakehip_ready("hipStreamQuery");
	if (r != hipSuccess) return r;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	pthread_mutex_lock(&s->mu);
	int done = s->executed == s->enqueued;
	pthread_mutex_unlock(&s->mu);
	return done ? hipSuccess : hipErrorNotReady;
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
	hipError_t r = fakehip_ready("hipStreamSynchronize");
	if (r != hipSuccess) return r;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	uint64_t seq = enqueued(s);
	wait(s, seq);
	pthread_mutex_lock(&mu);
	synchronized(s->device, s, seq);
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

hipError_t fakehip_sync_device(int dev) {
	for (;;) {
		pthread_mutex_lock(&mu);
		struct ihipStream_t *list = registry;
		pthread_mutex_unlock(&mu);
		int waited = 0;
		for (struct ihipStream_t *s = list; s; s = s->all) {
			if (s->device != dev) continue;
			uint64_t seq = enqueued(s);
			pthread_mutex_lock(&s->mu);
			int behind = s->executed < seq;
			pthread_mutex_unlock(&s->mu);
			if (behind) {
				wait(s, seq);
				waited = 1;
			}
		}
		if (!waited) break;
	}
	pthread_mutex_lock(&mu);
	synchronized(dev, NULL, 0);
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) {
	hipError_t r = fakehip_ready("hipDeviceSynchronize");
	if (r != hipSuccess) return r;
	return fakehip_sync_device(fakehip_current_device());
}

// hipStreamAddCallback: "The callback will block later work in the stream
// until it is finished".
hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback, void *userData, unsigned int flags) {
	hipError_t r = fakehip_ready("hipStreamAddCallback");
	if (r != hipSuccess) return r;
	if (!callback || flags != 0) return hipErrorInvalidValue;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	if (s->capturing) return hipErrorStreamCaptureUnsupported;
	struct op *op = calloc(1, sizeof *op);
	if (!op) return hipErrorOutOfMemory;
	*op = (struct op){.kind = OP_CALLBACK, .cb = callback, .data = userData, .handle = stream};
	enqueue(s, op);
	return hipSuccess;
}

#if FAKEHIP_ABI >= 506
hipError_t hipStreamGetDevice(hipStream_t stream, hipDevice_t *device) {
	hipError_t r = fakehip_ready("hipStreamGetDevice");
	if (r != hipSuccess) return r;
	if (!device) return hipErrorInvalidValue;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	*device = s->device;
	return hipSuccess;
}
#endif

// ---- stream capture: begun and ended, asked, and refused to stream-ordered
// work (the fake makes no graph nodes)

hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode) {
	hipError_t r = fakehip_ready("hipStreamBeginCapture");
	if (r != hipSuccess) return r;
	if (stream == NULL || stream == FAKEHIP_STREAM_LEGACY) return hipErrorStreamCaptureUnsupported;
	if (mode < hipStreamCaptureModeGlobal || mode > hipStreamCaptureModeRelaxed) return hipErrorInvalidValue;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	pthread_mutex_lock(&mu);
	if (s->capturing) {
		r = hipErrorIllegalState;
	} else {
		s->capturing = hipStreamCaptureStatusActive;
		s->capture_id = ++capture_ids;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph) {
	hipError_t r = fakehip_ready("hipStreamEndCapture");
	if (r != hipSuccess) return r;
	if (!pGraph) return hipErrorInvalidValue;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	pthread_mutex_lock(&mu);
	int was = s->capturing;
	s->capturing = hipStreamCaptureStatusNone;
	s->capture_id = 0;
	pthread_mutex_unlock(&mu);
	if (!was) return hipErrorIllegalState;
	struct ihipGraph_t *g = calloc(1, sizeof *g);
	if (!g) return hipErrorOutOfMemory;
	g->magic = GRAPH_MAGIC;
	*pGraph = (hipGraph_t)g;
	return hipSuccess;
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
	hipError_t r = fakehip_ready("hipGraphDestroy");
	if (r != hipSuccess) return r;
	struct ihipGraph_t *g = (struct ihipGraph_t *)graph;
	if (!g || g->magic != GRAPH_MAGIC) return hipErrorInvalidValue;
	g->magic = 0;
	free(g);
	return hipSuccess;
}

static hipError_t capture_of(const char *fn, hipStream_t stream, hipStreamCaptureStatus *status, unsigned long long *id) {
	hipError_t r = fakehip_ready(fn);
	if (r != hipSuccess) return r;
	if (!status) return hipErrorInvalidValue;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	pthread_mutex_lock(&mu);
	*status = (hipStreamCaptureStatus)s->capturing;
	if (id) *id = s->capture_id;
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus) {
	return capture_of("hipStreamIsCapturing", stream, pCaptureStatus, NULL);
}

hipError_t hipStreamGetCaptureInfo(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus, unsigned long long *pId) {
	return capture_of("hipStreamGetCaptureInfo", stream, pCaptureStatus, pId);
}

hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode *mode) {
	hipError_t r = fakehip_ready("hipThreadExchangeStreamCaptureMode");
	if (r != hipSuccess) return r;
	if (!mode || *mode < hipStreamCaptureModeGlobal || *mode > hipStreamCaptureModeRelaxed) return hipErrorInvalidValue;
	hipStreamCaptureMode old = capture_mode;
	capture_mode = *mode;
	*mode = old;
	return hipSuccess;
}

// ---- events

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags) {
	hipError_t r = fakehip_ready("hipEventCreateWithFlags");
	if (r != hipSuccess) return r;
	if (!event || (flags & ~(unsigned)(hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess)) != 0) return hipErrorInvalidValue;
	struct ihipEvent_t *e = calloc(1, sizeof *e);
	if (!e) return hipErrorOutOfMemory;
	e->magic = EVENT_MAGIC;
	e->device = fakehip_current_device();
	*event = e;
	return hipSuccess;
}

// hipEventRecord "Captures in event the contents of stream at the time of
// this call"; a record overwrites the event's earlier one.
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
	hipError_t r = fakehip_ready("hipEventRecord");
	if (r != hipSuccess) return r;
	if (!event || event->magic != EVENT_MAGIC) return hipErrorInvalidHandle;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	if (s->capturing) return hipErrorStreamCaptureUnsupported;
	struct op *op = calloc(1, sizeof *op);
	if (!op) return hipErrorOutOfMemory;
	op->kind = OP_RECORD;
	pthread_mutex_lock(&mu);
	uint64_t seq = enqueue(s, op);
	event->stream = s;
	event->seq = seq;
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

// hipEventQuery: "hipSuccess if all commands in the appropriate stream
// (specified to hipEventRecord()) have completed. If any execution has not
// completed, then hipErrorNotReady"; "This API returns hipSuccess, if
// hipEventRecord() is not called before this API".
hipError_t hipEventQuery(hipEvent_t event) {
	hipError_t r = fakehip_ready("hipEventQuery");
	if (r != hipSuccess) return r;
	if (!event || event->magic != EVENT_MAGIC) return hipErrorInvalidHandle;
	pthread_mutex_lock(&mu);
	struct ihipStream_t *s = event->stream;
	uint64_t seq = event->seq;
	pthread_mutex_unlock(&mu);
	if (!s) return hipSuccess;
	pthread_mutex_lock(&s->mu);
	int done = s->executed >= seq;
	pthread_mutex_unlock(&s->mu);
	return done ? hipSuccess : hipErrorNotReady;
}

hipError_t hipEventSynchronize(hipEvent_t event) {
	hipError_t r = fakehip_ready("hipEventSynchronize");
	if (r != hipSuccess) return r;
	if (!event || event->magic != EVENT_MAGIC) return hipErrorInvalidHandle;
	pthread_mutex_lock(&mu);
	struct ihipStream_t *s = event->stream;
	uint64_t seq = event->seq;
	pthread_mutex_unlock(&mu);
	if (!s) return hipSuccess;
	wait(s, seq);
	pthread_mutex_lock(&mu);
	synchronized(s->device, s, seq);
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

hipError_t hipEventDestroy(hipEvent_t event) {
	hipError_t r = fakehip_ready("hipEventDestroy");
	if (r != hipSuccess) return r;
	if (!event || event->magic != EVENT_MAGIC) return hipErrorInvalidHandle;
	event->magic = 0;
	free(event);
	return hipSuccess;
}

// ---- stream-ordered allocation

static hipError_t pool_call(const char *fn) {
	hipError_t r = fakehip_ready(fn);
	if (r != hipSuccess) return r;
	return pools_supported ? hipSuccess : hipErrorNotSupported;
}

// hipMallocAsync: "The allocation comes from the memory pool associated
// with the stream's device"; the pool reserves more device memory, in
// granules, where what it holds free is not enough, or answers
// hipErrorOutOfMemory, taking nothing.
hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream) {
	hipError_t r = pool_call("hipMallocAsync");
	if (r != hipSuccess) return r;
	if (!dev_ptr) return hipErrorInvalidValue;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	if (s->capturing) return hipErrorStreamCaptureUnsupported;
	if (size == 0) {
		*dev_ptr = NULL;
		return hipSuccess;
	}
	struct block *b = calloc(1, sizeof *b);
	if (!b) return hipErrorOutOfMemory;
	pthread_mutex_lock(&mu);
	struct ihipMemPoolHandle_t *p = device_pool(s->device);
	size_t held = committed(p), spare = p->reserved > held ? p->reserved - held : 0;
	size_t grow = spare >= size ? 0 : round_up(size - spare);
	if (grow > 0 && (r = fakehip_charge(s->device, grow)) != hipSuccess) {
		pthread_mutex_unlock(&mu);
		free(b);
		return r;
	}
	p->reserved += grow;
	note_reserved(p);
	*b = (struct block){.ptr = fakehip_address(size), .size = size, .state = LIVE, .next = p->blocks};
	p->blocks = b;
	p->used += size;
	note_used(p);
	pthread_mutex_unlock(&mu);
	*dev_ptr = (void *)b->ptr;
	return hipSuccess;
}

// find_block finds the live allocation ptr of any device's pool; mu is
// held.
static struct block *find_block(uintptr_t ptr, int *dev) {
	for (int d = 0; d < MACHINE_DEVICES; d++) {
		if (pools[d].magic != POOL_MAGIC) continue;
		for (struct block *b = pools[d].blocks; b; b = b->next) {
			if (b->ptr == ptr && b->state == LIVE) {
				*dev = d;
				return b;
			}
		}
	}
	return NULL;
}

// hipFreeAsync "Inserts a free operation into stream"; the stream runs it
// in order (RULES.md: when its bytes leave the pool's used figure).
hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream) {
	hipError_t r = pool_call("hipFreeAsync");
	if (r != hipSuccess) return r;
	struct ihipStream_t *s;
	if ((r = resolve(stream, &s)) != hipSuccess) return r;
	if (s->capturing) return hipErrorStreamCaptureUnsupported;
	if (!dev_ptr) return hipErrorInvalidValue;
	struct op *op = calloc(1, sizeof *op);
	if (!op) return hipErrorOutOfMemory;
	pthread_mutex_lock(&mu);
	int dev = 0;
	struct block *b = find_block((uintptr_t)dev_ptr, &dev);
	if (!b) {
		pthread_mutex_unlock(&mu);
		free(op);
		return hipErrorInvalidValue;
	}
	b->state = PENDING;
	b->stream = s;
	if (free_enqueued) device_pool(dev)->used -= b->size;
	op->kind = OP_FREE;
	op->block = b;
	b->free_seq = enqueue(s, op);
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

// fakehip_pool_free_now frees a stream-ordered allocation at once (hipFree,
// after its implicit device synchronize).
hipError_t fakehip_pool_free_now(uintptr_t ptr) {
	pthread_mutex_lock(&mu);
	int dev = 0;
	struct block *b = find_block(ptr, &dev);
	if (!b) {
		pthread_mutex_unlock(&mu);
		return hipErrorInvalidDevicePointer;
	}
	struct ihipMemPoolHandle_t *p = device_pool(dev);
	p->used -= b->size;
	for (struct block **bp = &p->blocks; *bp; bp = &(*bp)->next) {
		if (*bp == b) {
			*bp = b->next;
			break;
		}
	}
	free(b);
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

// hipDeviceGetMemPool: the current pool, the default one (the fake has no
// pools of one's own).
hipError_t hipDeviceGetMemPool(hipMemPool_t *mem_pool, int device) {
	hipError_t r = pool_call("hipDeviceGetMemPool");
	if (r != hipSuccess) return r;
	if (device < 0 || device >= fakehip_devices()) return hipErrorInvalidDevice;
	if (!mem_pool) return hipErrorInvalidValue;
	pthread_mutex_lock(&mu);
	*mem_pool = device_pool(device);
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

hipError_t hipMemPoolGetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void *value) {
	hipError_t r = pool_call("hipMemPoolGetAttribute");
	if (r != hipSuccess) return r;
	if (!value) return hipErrorInvalidValue;
	pthread_mutex_lock(&mu);
	if (!valid_pool(mem_pool)) {
		pthread_mutex_unlock(&mu);
		return hipErrorInvalidValue;
	}
	struct ihipMemPoolHandle_t *p = mem_pool;
	switch (attr) {
	case hipMemPoolReuseFollowEventDependencies:
	case hipMemPoolReuseAllowOpportunistic:
	case hipMemPoolReuseAllowInternalDependencies:
		*(int *)value = p->reuse[attr - hipMemPoolReuseFollowEventDependencies];
		break;
	case hipMemPoolAttrReleaseThreshold:
		*(uint64_t *)value = p->threshold;
		break;
	case hipMemPoolAttrReservedMemCurrent:
		*(uint64_t *)value = p->reserved;
		break;
	case hipMemPoolAttrReservedMemHigh:
		*(uint64_t *)value = p->reserved_high;
		break;
	case hipMemPoolAttrUsedMemCurrent:
		*(uint64_t *)value = p->used;
		break;
	case hipMemPoolAttrUsedMemHigh:
		*(uint64_t *)value = p->used_high;
		break;
	default:
		r = hipErrorInvalidValue;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

// hipMemPoolSetAttribute: the reuse flags and the release threshold may be
// set; "High watermark can only be reset to zero" (hipMemPoolAttr); the
// current figures cannot be set.
hipError_t hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void *value) {
	hipError_t r = pool_call("hipMemPoolSetAttribute");
	if (r != hipSuccess) return r;
	if (!value) return hipErrorInvalidValue;
	pthread_mutex_lock(&mu);
	if (!valid_pool(mem_pool)) {
		pthread_mutex_unlock(&mu);
		return hipErrorInvalidValue;
	}
	struct ihipMemPoolHandle_t *p = mem_pool;
	switch (attr) {
	case hipMemPoolReuseFollowEventDependencies:
	case hipMemPoolReuseAllowOpportunistic:
	case hipMemPoolReuseAllowInternalDependencies:
		p->reuse[attr - hipMemPoolReuseFollowEventDependencies] = *(int *)value;
		break;
	case hipMemPoolAttrReleaseThreshold:
		p->threshold = *(uint64_t *)value;
		break;
	case hipMemPoolAttrReservedMemHigh:
		if (*(uint64_t *)value != 0) {
			r = hipErrorInvalidValue;
			break;
		}
		p->reserved_high = high_reset_zero ? 0 : p->reserved;
		break;
	case hipMemPoolAttrUsedMemHigh:
		if (*(uint64_t *)value != 0) {
			r = hipErrorInvalidValue;
			break;
		}
		p->used_high = high_reset_zero ? 0 : p->used;
		break;
	default:
		r = hipErrorInvalidValue;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

// hipMemPoolTrimTo: "Releases memory back to the OS until the pool
// contains fewer than min_bytes_to_keep reserved bytes, or there is no
// more memory that the allocator can safely release"; it "cannot release
// OS allocations that back outstanding asynchronous allocations", and
// "Allocations that have been asynchronously freed but whose completion has
// not been observed on the host (eg. by a synchronize) can count as
// outstanding"; "If the pool has less than min_bytes_to_hold reserved, then
// the TrimTo operation is a no-op".
hipError_t hipMemPoolTrimTo(hipMemPool_t mem_pool, size_t min_bytes_to_hold) {
	hipError_t r = pool_call("hipMemPoolTrimTo");
	if (r != hipSuccess) return r;
	pthread_mutex_lock(&mu);
	if (!valid_pool(mem_pool)) {
		pthread_mutex_unlock(&mu);
		return hipErrorInvalidValue;
	}
	struct ihipMemPoolHandle_t *p = mem_pool;
	if (p->reserved > min_bytes_to_hold) shrink(p, min_bytes_to_hold);
	pthread_mutex_unlock(&mu);
	return hipSuccess;
}

// ---- graph memory (ROCm 5.3): the fake makes no graphs, so every figure
// is 0; the attributes' rules hold.

#if FAKEHIP_ABI >= 503
hipError_t hipDeviceGetGraphMemAttribute(int device, hipGraphMemAttributeType attr, void *value) {
	hipError_t r = fakehip_ready("hipDeviceGetGraphMemAttribute");
	if (r != hipSuccess) return r;
	if (device < 0 || device >= fakehip_devices()) return hipErrorInvalidDevice;
	if (!value || attr < hipGraphMemAttrUsedMemCurrent || attr > hipGraphMemAttrReservedMemHigh) return hipErrorInvalidValue;
	*(uint64_t *)value = 0;
	return hipSuccess;
}

hipError_t hipDeviceSetGraphMemAttribute(int device, hipGraphMemAttributeType attr, void *value) {
	hipError_t r = fakehip_ready("hipDeviceSetGraphMemAttribute");
	if (r != hipSuccess) return r;
	if (device < 0 || device >= fakehip_devices()) return hipErrorInvalidDevice;
	if (!value || (attr != hipGraphMemAttrUsedMemHigh && attr != hipGraphMemAttrReservedMemHigh) || *(uint64_t *)value != 0)
		return hipErrorInvalidValue;
	return hipSuccess;
}

hipError_t hipDeviceGraphMemTrim(int device) {
	hipError_t r = fakehip_ready("hipDeviceGraphMemTrim");
	if (r != hipSuccess) return r;
	return device < 0 || device >= fakehip_devices() ? hipErrorInvalidDevice : hipSuccess;
}
#endif
