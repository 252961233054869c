// fakecuda_stream.c is the stream-ordered half of the fake driver (see
// fakecuda.c, with which it is built): streams, events, host functions,
// cuMemsetD8Async, each device's default memory pool with cuMemAllocAsync
// and cuMemFreeAsync, and stream capture (the graphs it records, their
// memory nodes and their launches are fakecuda_graph.c's).
//
// Each stream has a worker thread that executes its operations in order,
// after a configurable delay per operation, so that "freed on the host,
// still held on the device" lasts long enough to observe. The legacy default
// stream (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) is one stream per
// device, created on first use; it does not synchronize with other streams.
//
// The pool of each device keeps what the driver's does: used bytes (each
// allocation's size, rounded up to FAKECUDA_POOL_ROUND: by default the size
// asked, as an H200's pool counted it) and reserved bytes (taken from the
// device in steps of FAKECUDA_POOL_STEP as the used bytes outgrow them:
// 32 MiB by default, as an H200's default pool reserved them), with the
// high-water mark of each. An allocation counts as used from
// cuMemAllocAsync's return; a free stops counting when its stream executes
// it, less what allocations on its stream took over before then: an
// allocation takes over the bytes of the frees enqueued on its stream, the
// newest first, before it takes anything more from the pool. Reserved
// memory above the release threshold (0 by default) returns to the device
// at cuStreamSynchronize and cuEventSynchronize, and cuMemPoolTrimTo
// returns what is free above its argument.
//
// A capture (cuStreamBeginCapture) has an ID unique over the process's
// lifetime (cuStreamGetCaptureInfo); a stream that waits for an event
// recorded in it joins it, and cuStreamEndCapture on the origin stream ends
// it for all of them. Work captured becomes nodes of the capture's graph
// (fakecuda_graph.c), which each launch of the graph runs.
//
// Its environment variables, read once:
//
//	FAKECUDA_STREAM_DELAY_US=n    each stream operation waits n µs (default 0)
//	FAKECUDA_STREAM_GATE=path     streams execute operations only while the
//	                              file path exists: a test holds every stream
//	                              back, then creates the file to let them run
//	FAKECUDA_POOL_ROUND=b         round each pool allocation up to b bytes (default 1)
//	FAKECUDA_POOL_STEP=b          a pool reserves device memory in steps of b
//	                              bytes (default 32 MiB, an H200's: RULES.md)
//	FAKECUDA_POOL_FREE=r          when a cuMemFreeAsync's bytes leave the pool's
//	                              USED_MEM_CURRENT, which the reference does not
//	                              settle: "executed" (default), when the stream
//	                              executes the free; "enqueued", at once, as
//	                              memory the pool may give to later allocations
//	                              on the same stream
//	FAKECUDA_TRIM_OBSERVED=r      what makes the host observe a stream's free
//	                              complete, so that cuMemPoolTrimTo may release
//	                              its memory: "sync" (default), a synchronize of
//	                              the stream or of an event after the free;
//	                              "query", also a cuEventQuery that finds such
//	                              an event reached
//	FAKECUDA_NO_POOLS=1           no device supports memory pools:
//	                              CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0
//	                              and the pool calls fail with CUDA_ERROR_NOT_SUPPORTED
//	FAKECUDA_FAIL_ALLOC_ASYNC=n   the n-th cuMemAllocAsync fails with
//	                              CUDA_ERROR_OUT_OF_MEMORY
//	FAKECUDA_FAIL_FREE_ASYNC=n    the n-th cuMemFreeAsync fails with
//	                              CUDA_ERROR_INVALID_VALUE and frees nothing
//	FAKECUDA_HOSTFN_DELAY_US=n    each host function waits n µs before it runs
//	                              (the driver runs them on a thread of its own,
//	                              later than the stream reaches them)
//	FAKECUDA_HOSTFN_SERIAL=0      host functions of different streams run at
//	                              once; by default one at a time, as the
//	                              reference allows ("may be serialized")
//	FAKECUDA_UNORDERED=allow      a cuMemFreeAsync on a stream not ordered
//	                              after the allocation passes; by default the
//	                              fake aborts the process, naming both streams
#include <cuda.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVICES 16

struct CUstream_st;

// From fakecuda_graph.c: a capture's graph and its nodes, and the graph
// allocations that outlive their launch (each with smu held but the first).
struct CUgraph_st *fakecuda_graph_new(void);
void fakecuda_graph_discard(struct CUgraph_st *g);
void fakecuda_graph_node(struct CUgraph_st *g);
void fakecuda_graph_host(struct CUgraph_st *g, CUhostFn fn, void *data);
void fakecuda_graph_memset(struct CUgraph_st *g, void *dst, unsigned char value, size_t n);
CUresult fakecuda_graph_alloc(struct CUgraph_st *g, int dev, size_t size, CUdeviceptr *dptr);
CUresult fakecuda_graph_free(struct CUgraph_st *g, CUdeviceptr dptr);
CUresult fakecuda_graph_free_async(struct CUstream_st *s, CUdeviceptr dptr);
CUresult fakecuda_graph_free_now(CUdeviceptr dptr);
void fakecuda_graph_stream_gone(struct CUstream_st *s);

// From fakecuda_vmm.c.
int fakecuda_vmm_supported(int dev);

// Below: the check of a potentially unsafe call during stream capture.
CUresult fakecuda_unsafe_call(void);

// From fakecuda.c.
CUresult fakecuda_ready(const char *fn);
CUcontext fakecuda_current(void);
CUresult fakecuda_poisoned(void);
int fakecuda_context_device(CUcontext ctx);
int fakecuda_version(void);

// From fakecuda_proc.c.
extern int fakecuda_gated;
void fakecuda_absent(const char *fn, void *variant);
CUresult fakecuda_in_context(const char *fn, int *device);
CUresult fakecuda_on_device(const char *fn, CUdevice dev, const void *out);
CUresult fakecuda_take(int dev, size_t n);
int fakecuda_devices(void);
void fakecuda_give(int dev, size_t n);

enum op_kind { OP_FREE, OP_RECORD, OP_WAIT, OP_HOSTFN, OP_MEMSET, OP_CALL };

struct op {
	struct op *next;
	enum op_kind kind;
	struct palloc *alloc;     // OP_FREE
	struct CUevent_st *event; // OP_RECORD, OP_WAIT
	long gen;                 // OP_RECORD, OP_WAIT: the event's record
	CUhostFn fn;              // OP_HOSTFN
	void *data;               // OP_HOSTFN, OP_CALL; OP_MEMSET: the memory
	unsigned char value;      // OP_MEMSET
	size_t n;                 // OP_MEMSET
	void (*call)(void *data); // OP_CALL: fakecuda_graph.c's work (a launch, a free)
};

// A capture sequence: begun on its origin stream, joined by the streams
// that wait for an event it captured, ended on the origin stream.
struct capture {
	unsigned long long id;     // unique over the process's lifetime
	int status;                // CU_STREAM_CAPTURE_STATUS_ACTIVE or _INVALIDATED
	CUstreamCaptureMode mode;
	pthread_t thread;          // the thread that began it
	struct CUstream_st *origin;
	struct CUgraph_st *graph;  // what it recorded (fakecuda_graph.c)
};

#define MAX_KNOWN 16

struct CUstream_st {
	int device;
	CUcontext ctx;   // the context it was created in; NULL for a legacy default stream
	int legacy;      // a device's legacy default stream
	int nonblocking; // CU_STREAM_NON_BLOCKING: no implicit order with the legacy stream
	int destroyed;   // cuStreamDestroy returned: the handle is released (atomic)
	long enq;        // operations enqueued so far, allocations included
	long host_seen;  // enq when the host last saw the stream drained (a synchronize)
	int capturing;   // CU_STREAM_CAPTURE_STATUS_ACTIVE or _INVALIDATED, or 0
	struct capture *cap; // the capture it takes part in, while capturing
	struct {         // what this stream waits for of others (cuStreamWaitEvent)
		struct CUstream_st *stream;
		long pos;
	} known[MAX_KNOWN];
	pthread_t thread;
	pthread_cond_t cond; // signalled on a new operation for a sleeping worker, and stop
	pthread_cond_t idle; // signalled when the stream runs dry while someone drains it
	struct op *head, *tail;
	int busy;     // the worker is executing operations it took
	int sleeping; // the worker waits for an operation
	int draining; // threads waiting in drain
	int stop;
	// The pool frees enqueued on it and not yet executed, oldest first
	// (palloc.fprev, .fnext), which an allocation on it takes over.
	struct palloc *fhead, *ftail;
};

struct CUevent_st {
	CUcontext ctx; // the context it was created in
	long recorded; // records so far
	long done;     // the last record its stream executed
	struct CUstream_st *stream; // the stream of the last record
	long pos;                   // that stream's enq at the last record
	int captured;               // the last record was captured into a graph
	unsigned long long capture_id; // that capture's
	int pending;                // records and waits enqueued, not yet executed
	int destroyed;              // cuEventDestroy was called: freed once nothing is pending
};

// release_event frees a destroyed event once no stream operation refers to
// it (smu held): the driver lets a destroyed event complete, and a stream
// waiting for it still waits.
static void release_event(struct CUevent_st *e) {
	if (e->destroyed && e->pending == 0) free(e);
}

struct palloc {
	struct palloc *next;
	void *mem;
	size_t size; // requested
	size_t used; // counted in the pool: size rounded up
	int device;
	int freeing; // a cuMemFreeAsync of it is enqueued
	int uncounted; // its bytes already left the pool's used figure (FAKECUDA_POOL_FREE=enqueued)
	// While its free is enqueued and not executed: the bytes of it the
	// pool still counts as used, less what allocations on the free's
	// stream took over, and its place in that stream's list of frees.
	size_t remaining;
	struct palloc *fprev, *fnext;
	int listed;
	struct CUstream_st *free_stream; // cuMemFreeAsync: its stream and its position there
	long free_pos;
	struct CUmemPoolHandle_st *pool;
	struct CUstream_st *stream; // the stream it was allocated on
	long pos;                   // that stream's enq after the allocation
};

struct CUmemPoolHandle_st {
	int device;
	int alive;
	size_t reserved, reserved_high, used, used_high, threshold;
	size_t unobserved; // freed by a stream, not yet seen complete by the host (a synchronize)
};

static pthread_once_t sconfig_once = PTHREAD_ONCE_INIT;
static long delay_us, fail_alloc_async, fail_free_async;
static const char *gate;
static size_t pool_round = 1;
static size_t pool_step = (size_t)32 << 20;
static int no_pools, allow_unordered, free_enqueued, trim_query;
static long hostfn_delay_us;
static int hostfn_serial = 1;
static pthread_mutex_t hostfn_mu = PTHREAD_MUTEX_INITIALIZER; // one host function at a time

// smu guards everything below and in the streams, events and pools.
static pthread_mutex_t smu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t event_cond = PTHREAD_COND_INITIALIZER; // an event was reached
static long nallocs_async, nfrees_async;
#define MAX_POOLS (MAX_DEVICES + 16)
// pools: each device's default pool first, then those cuMemPoolCreate made.
static struct CUmemPoolHandle_st pools[MAX_POOLS];
static struct CUmemPoolHandle_st *current_pool[MAX_DEVICES]; // cuDeviceSetMemPool; NULL: the default
static struct CUstream_st *default_streams[MAX_DEVICES];
#define MAX_STREAMS 1024
static struct CUstream_st *all_streams[MAX_STREAMS]; // the streams created, for the legacy stream's implicit order
static struct palloc *plive;

static long senv(const char *name, long def) {
	const char *s = getenv(name);
	return s && *s ? strtol(s, NULL, 0) : def;
}

static void sconfigure(void) {
	delay_us = senv("FAKECUDA_STREAM_DELAY_US", 0);
	gate = getenv("FAKECUDA_STREAM_GATE");
	if (gate && !*gate) gate = NULL;
	long r = senv("FAKECUDA_POOL_ROUND", 1);
	pool_round = r > 0 ? (size_t)r : 1;
	long step = senv("FAKECUDA_POOL_STEP", 32L << 20);
	if (step > 0) pool_step = (size_t)step;
	no_pools = senv("FAKECUDA_NO_POOLS", 0) != 0;
	hostfn_delay_us = senv("FAKECUDA_HOSTFN_DELAY_US", 0);
	hostfn_serial = senv("FAKECUDA_HOSTFN_SERIAL", 1) != 0;
	const char *u = getenv("FAKECUDA_UNORDERED");
	allow_unordered = u && strcmp(u, "allow") == 0;
	fail_alloc_async = senv("FAKECUDA_FAIL_ALLOC_ASYNC", 0);
	fail_free_async = senv("FAKECUDA_FAIL_FREE_ASYNC", 0);
	for (int i = 0; i < MAX_DEVICES; i++) pools[i].device = i, pools[i].alive = 1;
	const char *f = getenv("FAKECUDA_POOL_FREE");
	free_enqueued = f && strcmp(f, "enqueued") == 0;
	const char *tq = getenv("FAKECUDA_TRIM_OBSERVED");
	trim_query = tq && strcmp(tq, "query") == 0;
}

// sready is the prologue of every call named fn here: fakecuda.c's checks
// (configured errors and faults, cuInit).
static CUresult sready(const char *fn) {
	pthread_once(&sconfig_once, sconfigure);
	return fakecuda_ready(fn);
}

// sconfig reads this file's configuration, for the calls whose prologue is
// another of fakecuda.c's (fakecuda_in_context, fakecuda_on_device), so that
// each call passes one prologue and counts once for FAKECUDA_FAIL.
static void sconfig(void) { pthread_once(&sconfig_once, sconfigure); }

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// ---- pools (smu held)

// pool_release returns the pool's reserved memory above max(keep, used) to
// the device, in whole steps.
static void pool_release(struct CUmemPoolHandle_st *p, size_t keep) {
	// Frees whose completion the host has not observed can count as
	// outstanding (cuMemPoolTrimTo): the fake keeps them reserved.
	size_t out = p->used + p->unobserved;
	size_t want = round_up(out > keep ? out : keep, pool_step);
	if (p->reserved > want) {
		fakecuda_give(p->device, p->reserved - want);
		p->reserved = want;
	}
}

// A free a stream executed whose completion the host has not observed yet
// (smu held): cuMemPoolTrimTo keeps its memory.
struct unobs {
	struct unobs *next;
	struct CUmemPoolHandle_st *pool;
	struct CUstream_st *stream;
	long pos;
	size_t bytes;
};
static struct unobs *unobserved_list;

static void unobserved_add(struct CUmemPoolHandle_st *p, struct CUstream_st *s, long pos, size_t bytes) {
	struct unobs *u = malloc(sizeof *u);
	if (!u) return; // then the memory counts as observed: the fake errs on the lax side only here
	*u = (struct unobs){.next = unobserved_list, .pool = p, .stream = s, .pos = pos, .bytes = bytes};
	unobserved_list = u;
	p->unobserved += bytes;
}

// observe records that the host has seen the first pos operations of s
// complete (smu held); s NULL: every stream (a stream being destroyed).
static void observe(struct CUstream_st *s, long pos) {
	for (struct unobs **q = &unobserved_list; *q;) {
		struct unobs *u = *q;
		if ((s == NULL || u->stream == s) && u->pos <= pos) {
			u->pool->unobserved -= u->bytes;
			*q = u->next;
			free(u);
		} else {
			q = &u->next;
		}
	}
}

static void pool_free(struct palloc *a, int by_stream) {
	struct CUmemPoolHandle_st *p = a->pool ? a->pool : &pools[a->device];
	for (struct palloc **q = &plive; *q; q = &(*q)->next) {
		if (*q == a) {
			*q = a->next;
			break;
		}
	}
	// What an allocation took over of a free stays used: it is that
	// allocation's now. (A free uncounted when it was enqueued,
	// FAKECUDA_POOL_FREE=enqueued, is in no stream's list: nothing took
	// it over.)
	size_t back = a->listed ? a->remaining : a->used;
	if (a->listed) {
		struct CUstream_st *s = a->free_stream;
		if (a->fprev) a->fprev->fnext = a->fnext; else s->fhead = a->fnext;
		if (a->fnext) a->fnext->fprev = a->fprev; else s->ftail = a->fprev;
	}
	if (!a->uncounted) p->used -= back;
	if (by_stream) unobserved_add(p, a->free_stream, a->free_pos, back);
	free(a->mem);
	free(a);
}

// reusable returns how many of want bytes an allocation on s from pool p
// takes over of the frees enqueued on s and not yet executed (smu held):
// the pool hands a block freed on a stream to the next allocation on that
// stream at once, the allocation being ordered after the free there
// (RULES.md). With take, it takes them, from the newest free.
static size_t reusable(struct CUstream_st *s, struct CUmemPoolHandle_st *p, size_t want, int take) {
	size_t got = 0;
	for (struct palloc *x = s->ftail; x && got < want; x = x->fprev) {
		if (x->pool != p || x->remaining == 0) continue;
		size_t t = want - got < x->remaining ? want - got : x->remaining;
		if (take) x->remaining -= t;
		got += t;
	}
	return got;
}

// ---- streams

// run_hostfn runs a host function as a stream or a graph launch reaches it.
// A host function is not called after an error in the context
// (cuLaunchHostFunc); host functions of different streams may be
// serialized, and the fake serializes them unless FAKECUDA_HOSTFN_SERIAL=0;
// each waits FAKECUDA_HOSTFN_DELAY_US first.
static void run_hostfn(CUhostFn fn, void *data) {
	if (fakecuda_poisoned() != CUDA_SUCCESS) return;
	if (hostfn_delay_us > 0) {
		struct timespec ts = {hostfn_delay_us / 1000000, (hostfn_delay_us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
	if (hostfn_serial) pthread_mutex_lock(&hostfn_mu);
	fn(data);
	if (hostfn_serial) pthread_mutex_unlock(&hostfn_mu);
}

static void execute(struct CUstream_st *s, struct op *o) {
	switch (o->kind) {
	case OP_FREE:
		pthread_mutex_lock(&smu);
		pool_free(o->alloc, 1);
		pthread_mutex_unlock(&smu);
		break;
	case OP_RECORD:
		pthread_mutex_lock(&smu);
		if (o->gen > o->event->done) o->event->done = o->gen;
		o->event->pending--;
		release_event(o->event);
		pthread_cond_broadcast(&event_cond);
		pthread_mutex_unlock(&smu);
		break;
	case OP_WAIT:
		pthread_mutex_lock(&smu);
		while (o->event->done < o->gen) pthread_cond_wait(&event_cond, &smu);
		o->event->pending--;
		release_event(o->event);
		pthread_mutex_unlock(&smu);
		break;
	case OP_HOSTFN:
		run_hostfn(o->fn, o->data);
		break;
	case OP_MEMSET:
		memset(o->data, o->value, o->n);
		break;
	case OP_CALL:
		o->call(o->data);
		break;
	}
}

// worker executes the operations of s in order: it takes every operation
// enqueued so far at once and executes them one by one, so that a caller
// enqueueing behind a busy stream neither wakes it nor waits for its lock
// more than once per batch (a driver appends to a queue that the device
// reads; it does not wake a thread per operation).
static void *worker(void *arg) {
	struct CUstream_st *s = arg;
	pthread_mutex_lock(&smu);
	for (;;) {
		while (!s->head && !s->stop) {
			s->sleeping = 1;
			pthread_cond_wait(&s->cond, &smu);
			s->sleeping = 0;
		}
		if (!s->head) break;
		struct op *o = s->head;
		s->head = s->tail = NULL;
		s->busy = 1;
		pthread_mutex_unlock(&smu);
		while (o) {
			struct op *next = o->next;
			while (gate && access(gate, F_OK) != 0) {
				struct timespec ms = {0, 1000000};
				nanosleep(&ms, NULL);
			}
			if (delay_us > 0) {
				struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
				nanosleep(&ts, NULL);
			}
			execute(s, o);
			free(o);
			o = next;
		}
		pthread_mutex_lock(&smu);
		s->busy = 0;
		if (s->draining && !s->head) pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&smu);
	return NULL;
}

static struct CUstream_st *stream_new(int device) {
	struct CUstream_st *s = calloc(1, sizeof *s);
	if (!s) return NULL;
	int slot = -1;
	for (int i = 0; i < MAX_STREAMS && slot < 0; i++)
		if (!all_streams[i]) slot = i;
	if (slot < 0) {
		free(s);
		return NULL;
	}
	s->device = device;
	pthread_cond_init(&s->cond, NULL);
	pthread_cond_init(&s->idle, NULL);
	if (pthread_create(&s->thread, NULL, worker, s) != 0) {
		free(s);
		return NULL;
	}
	all_streams[slot] = s;
	return s;
}

// special reports whether h is one of the handles that name the calling
// thread's current context's default stream.
static int special(CUstream h) { return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD; }

// stream_ctx returns the context of stream s as the handle h named it: its
// own, or the current one for a default stream.
static CUcontext stream_ctx(CUstream h, struct CUstream_st *s) { return special(h) ? fakecuda_current() : s->ctx; }

// fakecuda_stream_check stops the process where h is the handle of a
// stream that cuStreamDestroy destroyed: the handle is released ("Destroys
// the stream specified by hStream"; of cudaStreamDestroy, the runtime's
// form of the call: "Use of the handle after this call is undefined
// behavior"). An NVIDIA H200 (driver 580.159.04), asked by memtrack
// (cuStreamGetCtx) about a stream destroyed earlier, stopped the process
// with SIGSEGV in the call; a driver that gave the handle to a new stream
// would answer for that one instead. The fake never gives a destroyed
// stream's handle to another (the stream is kept, marked, never freed), so
// that every later call with it is caught, as a sanitizer would: the
// message names the call and the handle. Every call that takes a stream
// handle checks it first, before its context.
void fakecuda_stream_check(const char *fn, CUstream h) {
	if (special(h) || !__atomic_load_n(&h->destroyed, __ATOMIC_ACQUIRE)) return;
	fprintf(stderr,
		"fakecuda: %s with stream %p, which cuStreamDestroy destroyed: the handle is released, and a call with it is "
		"undefined behaviour on a real driver (an H200 stopped the process with SIGSEGV)\n",
		fn, (void *)h);
	abort();
}

// resolve returns the stream a handle names: the legacy default stream of
// the current context's device for the special handles. It needs a current
// context, as every call on a stream does.
static CUresult resolve(const char *fn, CUstream h, struct CUstream_st **out, int *devp) {
	int dev;
	fakecuda_stream_check(fn, h);
	CUresult r = fakecuda_in_context(fn, &dev);
	if (r == CUDA_SUCCESS && devp) *devp = dev;
	if (r != CUDA_SUCCESS) return r;
	if (!special(h)) {
		*out = h;
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&smu);
	if (!default_streams[dev] && (default_streams[dev] = stream_new(dev))) default_streams[dev]->legacy = 1;
	*out = default_streams[dev];
	pthread_mutex_unlock(&smu);
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

// enqueue appends o to s (smu held).
static void append(struct CUstream_st *s, struct op *o);
static void implicit_order(struct CUstream_st *s);
static void invalidate(struct capture *c);
static struct capture *active_capture(unsigned long long id);
static void join(struct CUstream_st *s, struct capture *c);

static void enqueue(struct CUstream_st *s, struct op *o) {
	if (!s->capturing) implicit_order(s);
	append(s, o);
}

// barrier makes the work enqueued on `to` from now on wait for the work
// enqueued on `from` so far, with an event of the fake's own (smu held).
static void barrier(struct CUstream_st *from, struct CUstream_st *to) {
	struct CUevent_st *e = calloc(1, sizeof *e);
	struct op *rec = malloc(sizeof *rec), *wait = malloc(sizeof *wait);
	if (!e || !rec || !wait) {
		free(e), free(rec), free(wait);
		return;
	}
	e->recorded = 1;
	e->pending = 2;
	e->destroyed = 1; // freed once both have executed
	*rec = (struct op){.kind = OP_RECORD, .event = e, .gen = 1};
	*wait = (struct op){.kind = OP_WAIT, .event = e, .gen = 1};
	append(from, rec);
	append(to, wait);
}

// implicit_order gives work enqueued on s the order the legacy default
// stream imposes (smu held): work on the legacy stream waits for all work
// enqueued before on the blocking streams of its device, and work on a
// blocking stream waits for the work enqueued before on the legacy stream
// ("Stream synchronization behavior" of the driver API reference;
// CU_STREAM_NON_BLOCKING streams are exempt). A stream that has run
// everything it was given needs no barrier.
static void implicit_order(struct CUstream_st *s) {
	if (s->nonblocking) return;
	if (s->legacy) {
		for (int i = 0; i < MAX_STREAMS; i++) {
			struct CUstream_st *t = all_streams[i];
			if (t && t != s && !t->legacy && !t->nonblocking && !t->capturing && t->device == s->device && (t->head || t->busy))
				barrier(t, s);
		}
		return;
	}
	struct CUstream_st *l = default_streams[s->device];
	if (l && (l->head || l->busy)) barrier(l, s);
}

// append adds o to the end of s (smu held).
static void append(struct CUstream_st *s, struct op *o) {
	if (s->capturing) {
		// Captured into the graph, not executed (cuStreamBeginCapture): a
		// host function or a memset runs when the graph is launched, on
		// every launch.
		struct CUgraph_st *g = s->cap->graph;
		if (o->kind == OP_HOSTFN)
			fakecuda_graph_host(g, o->fn, o->data);
		else if (o->kind == OP_MEMSET)
			fakecuda_graph_memset(g, o->data, o->value, o->n);
		else
			fakecuda_graph_node(g);
		free(o);
		return;
	}
	s->enq++;
	o->next = NULL;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	if (s->sleeping) pthread_cond_signal(&s->cond);
}

static CUresult push(const char *fn, CUstream h, struct op *tmpl) {
	struct CUstream_st *s;
	CUresult r = resolve(fn, h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	struct op *o = malloc(sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	*o = *tmpl;
	pthread_mutex_lock(&smu);
	enqueue(s, o);
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

// drain waits until s has executed everything enqueued (smu held).
static void drain(struct CUstream_st *s) {
	s->draining++;
	while (s->head || s->busy) pthread_cond_wait(&s->idle, &smu);
	s->draining--;
}

// fakecuda_device_drain waits until every stream of device dev has
// executed what was enqueued on it: the implicit synchronization of
// cuMemFree (fakecuda.c).
void fakecuda_device_drain(int dev) {
	sconfig();
	pthread_mutex_lock(&smu);
	for (int i = 0; i < MAX_STREAMS; i++) {
		struct CUstream_st *s = all_streams[i];
		if (s && s->device == dev) drain(s);
	}
	pthread_mutex_unlock(&smu);
}

// synchronized releases what the pools reserve above their thresholds, as
// the driver does at a synchronization (smu held).
static void synchronized(void) {
	for (int i = 0; i < MAX_POOLS; i++) {
		if (!pools[i].alive) continue;
		pool_release(&pools[i], pools[i].threshold);
	}
}

// invalidate invalidates capture c, and with it every stream that takes
// part in it: "When an invalid operation is attempted during stream
// capture, any associated capture graphs are invalidated" (smu held).
static void invalidate(struct capture *c) {
	c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	for (int i = 0; i < MAX_STREAMS; i++) {
		struct CUstream_st *t = all_streams[i];
		if (t && t->cap == c) __atomic_store_n(&t->capturing, CU_STREAM_CAPTURE_STATUS_INVALIDATED, __ATOMIC_RELEASE);
	}
}

// node_call is whether a stream operation that adds a node to the graph of
// s's capture may: not where the capture is invalidated, which "will return
// an error, until stream capture is ended"
// (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: "the current capture sequence on
// the stream has been invalidated due to a previous error") (smu held).
static CUresult node_call(struct CUstream_st *s) {
	if (!s->cap) return CUDA_ERROR_ILLEGAL_STATE;
	return s->capturing == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *ph, unsigned int flags) {
	int dev;
	sconfig();
	CUresult r = fakecuda_in_context("cuStreamCreate", &dev);
	if (r != CUDA_SUCCESS) return r;
	if (!ph) return CUDA_ERROR_INVALID_VALUE;
	if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&smu);
	struct CUstream_st *s = stream_new(dev);
	pthread_mutex_unlock(&smu);
	if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
	s->nonblocking = (flags & CU_STREAM_NON_BLOCKING) != 0;
	s->ctx = fakecuda_current();
	*ph = s;
	return CUDA_SUCCESS;
}

// cuStreamDestroy drains the stream, stops its worker and releases the
// handle: a later call with it stops the process (fakecuda_stream_check).
// The stream's memory is kept, so that no new stream gets its handle, and
// so that what still refers to it (an event recorded on it, an allocation
// made on it) reads a stream that has run everything it was given.
CUresult CUDAAPI cuStreamDestroy(CUstream h) {
	CUresult r = sready("cuStreamDestroy");
	if (r != CUDA_SUCCESS) return r;
	if (special(h)) return CUDA_ERROR_INVALID_HANDLE;
	fakecuda_stream_check("cuStreamDestroy", h);
	pthread_mutex_lock(&smu);
	drain(h);
	observe(h, h->enq);
	fakecuda_graph_stream_gone(h);
	for (int i = 0; i < MAX_STREAMS; i++)
		if (all_streams[i] == h) all_streams[i] = NULL;
	h->stop = 1;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&smu);
	pthread_join(h->thread, NULL);
	__atomic_store_n(&h->destroyed, 1, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream h) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve("cuStreamSynchronize", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&smu);
	if (s->capturing) {
		// Not permitted while the stream captures; it invalidates the capture.
		invalidate(s->cap);
		pthread_mutex_unlock(&smu);
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	pthread_mutex_unlock(&smu);
	// A synchronize of a stream that does not capture is potentially
	// unsafe while a capture is under way elsewhere (the H200, RULES.md).
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&smu);
	long enq = s->enq;
	drain(s);
	if (enq > s->host_seen) s->host_seen = enq;
	observe(s, enq);
	synchronized();
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

// cuStreamGetCtx returns the context a stream was created in; for the
// special handles, the calling thread's current context. On a stream whose
// capture is invalidated it answers CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
// until the capture ends ("further use of any streams which are being
// captured ... is invalid and will return an error, until stream capture
// is ended"), as the H200 answered, on every thread (cuCtxGetCurrent
// answered 0).
CUresult CUDAAPI cuStreamGetCtx(CUstream h, CUcontext *pctx) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve("cuStreamGetCtx", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	if (!pctx) return CUDA_ERROR_INVALID_VALUE;
	if (__atomic_load_n(&s->capturing, __ATOMIC_ACQUIRE) == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	*pctx = stream_ctx(h, s);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamQuery(CUstream h) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve("cuStreamQuery", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&smu);
	if (s->capturing) {
		invalidate(s->cap);
		pthread_mutex_unlock(&smu);
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	pthread_mutex_unlock(&smu);
	// A query of a stream that does not capture is potentially unsafe
	// while a capture is under way elsewhere (the H200, RULES.md).
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&smu);
	int idle = !s->head && !s->busy;
	pthread_mutex_unlock(&smu);
	return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// learn records that s waits for stream t's first pos operations (smu held).
static void learn(struct CUstream_st *s, struct CUstream_st *t, long pos) {
	int free_slot = -1;
	for (int i = 0; i < MAX_KNOWN; i++) {
		if (s->known[i].stream == t) {
			if (pos > s->known[i].pos) s->known[i].pos = pos;
			return;
		}
		if (!s->known[i].stream && free_slot < 0) free_slot = i;
	}
	if (free_slot < 0) free_slot = (int)(t->enq % MAX_KNOWN); // forget one: stricter, never laxer
	s->known[free_slot].stream = t;
	s->known[free_slot].pos = pos;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
	struct CUstream_st *s;
	sconfig();
	fakecuda_stream_check("cuStreamWaitEvent", h);
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = resolve("cuStreamWaitEvent", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	struct op *o = malloc(sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&smu);
	*o = (struct op){.kind = OP_WAIT, .event = e, .gen = e->recorded};
	struct capture *c = e->captured ? active_capture(e->capture_id) : NULL;
	if (c && !s->capturing) join(s, c);
	if (e->stream) learn(s, e->stream, e->pos);
	if (!s->capturing) e->pending++;
	enqueue(s, o);
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data) {
	sconfig();
	fakecuda_stream_check("cuLaunchHostFunc", h);
	if (!fn) return CUDA_ERROR_INVALID_VALUE;
	struct op o = {.kind = OP_HOSTFN, .fn = fn, .data = data};
	return push("cuLaunchHostFunc", h, &o);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h) {
	sconfig();
	fakecuda_stream_check("cuMemsetD8Async", h);
	if (!dst) return CUDA_ERROR_INVALID_VALUE;
	struct op o = {.kind = OP_MEMSET, .data = (void *)(uintptr_t)dst, .value = uc, .n = n};
	return push("cuMemsetD8Async", h, &o);
}

// ---- stream capture

// Each thread's capture interaction mode (cuThreadExchangeStreamCaptureMode),
// and how many captures it began that were not relaxed.
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static __thread int own_strict_captures;
static int global_captures; // captures begun in CU_STREAM_CAPTURE_MODE_GLOBAL, by any thread (smu)
#define MAX_CAPTURES 64
static struct capture *captures[MAX_CAPTURES]; // the captures begun and not ended (smu)
static unsigned long long capture_ids;        // the last capture's ID (smu)

// active_capture returns the capture of ID id that has not ended, or NULL
// (smu held).
static struct capture *active_capture(unsigned long long id) {
	for (int i = 0; i < MAX_CAPTURES; i++)
		if (captures[i] && captures[i]->id == id) return captures[i];
	return NULL;
}

// join places s, which waits for an event recorded in capture c, into
// capture mode, capturing into c's graph ("When a captured event is waited
// on by a stream, it places the stream in capture mode if it is not
// already"; smu held).
static void join(struct CUstream_st *s, struct capture *c) {
	s->cap = c;
	__atomic_store_n(&s->capturing, c->status, __ATOMIC_RELEASE);
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve("cuStreamBeginCapture", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
	// Capture may not be initiated on the legacy default stream.
	if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	struct capture *c = calloc(1, sizeof *c);
	struct CUgraph_st *g = fakecuda_graph_new();
	if (!c || !g) {
		free(c);
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&smu);
	int slot = -1;
	for (int i = 0; i < MAX_CAPTURES && slot < 0; i++)
		if (!captures[i]) slot = i;
	if (s->capturing || slot < 0) {
		// Only a stream not already capturing may begin.
		pthread_mutex_unlock(&smu);
		free(c);
		free(g);
		return s->capturing ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_OUT_OF_MEMORY;
	}
	*c = (struct capture){.id = ++capture_ids, .status = CU_STREAM_CAPTURE_STATUS_ACTIVE, .mode = mode,
			      .thread = pthread_self(), .origin = s, .graph = g};
	captures[slot] = c;
	join(s, c);
	if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL) global_captures++;
	pthread_mutex_unlock(&smu);
	if (mode != CU_STREAM_CAPTURE_MODE_RELAXED) own_strict_captures++;
	return CUDA_SUCCESS;
}

// cuStreamEndCapture ends a capture on its origin stream and takes every
// stream that joined it out of capture mode; on another stream of the
// capture it fails with CUDA_ERROR_STREAM_CAPTURE_UNMATCHED ("the capture
// was not initiated in this stream").
CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph *phGraph) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve("cuStreamEndCapture", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&smu);
	struct capture *c = s->cap;
	if (!s->capturing) {
		pthread_mutex_unlock(&smu);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	if (c->origin != s) {
		pthread_mutex_unlock(&smu);
		return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	}
	if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
		pthread_mutex_unlock(&smu);
		return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
	}
	if (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) global_captures--;
	for (int i = 0; i < MAX_CAPTURES; i++)
		if (captures[i] == c) captures[i] = NULL;
	for (int i = 0; i < MAX_STREAMS; i++) {
		struct CUstream_st *t = all_streams[i];
		if (t && t->cap == c) {
			t->cap = NULL;
			__atomic_store_n(&t->capturing, 0, __ATOMIC_RELEASE);
		}
	}
	int invalidated = c->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	if (invalidated) fakecuda_graph_discard(c->graph);
	pthread_mutex_unlock(&smu);
	if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) own_strict_captures--;
	*phGraph = invalidated ? NULL : c->graph;
	free(c);
	return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve("cuStreamIsCapturing", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	if (!status) return CUDA_ERROR_INVALID_VALUE;
	*status = (CUstreamCaptureStatus)__atomic_load_n(&s->capturing, __ATOMIC_ACQUIRE);
	return CUDA_SUCCESS;
}

// capture_info is what both forms of cuStreamGetCaptureInfo share: the
// stream's capture status, and, only while it is active ("A valid id is
// returned only if ... captureStatus is set to
// CU_STREAM_CAPTURE_STATUS_ACTIVE"), the capture's ID, unique over the
// process's lifetime, and its graph.
static CUresult capture_info(const char *fn, CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve(fn, h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	if (!status) return CUDA_ERROR_INVALID_VALUE;
	*status = (CUstreamCaptureStatus)__atomic_load_n(&s->capturing, __ATOMIC_ACQUIRE);
	if (*status != CU_STREAM_CAPTURE_STATUS_ACTIVE || (!id && !graph)) return CUDA_SUCCESS; // no lock: the common case
	pthread_mutex_lock(&smu);
	*status = (CUstreamCaptureStatus)s->capturing;
	if (s->capturing == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
		if (id) *id = s->cap->id;
		if (graph) *graph = s->cap->graph;
	}
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

// cuStreamGetCaptureInfo, CUDA 10.1's form: the status and the ID.
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id) {
	return capture_info("cuStreamGetCaptureInfo", h, status, id, NULL);
}

// cuStreamGetCaptureInfo_v2, CUDA 11.3's form, which 12.0 makes the base
// name's: also the graph being captured and the nodes the next one will
// depend on, which the fake does not keep (CUDA_ERROR_NOT_SUPPORTED where
// they are asked for).
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
					   const CUgraphNode **deps, size_t *ndeps) {
	sconfig();
	if (fakecuda_gated) fakecuda_absent("cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo_v2);
	CUresult r = capture_info("cuStreamGetCaptureInfo", h, status, id, graph);
	if (r == CUDA_SUCCESS && (deps || ndeps)) r = CUDA_ERROR_NOT_SUPPORTED;
	return r;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
	CUresult r = sready("cuThreadExchangeStreamCaptureMode");
	if (r != CUDA_SUCCESS) return r;
	if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = thread_mode;
	thread_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

// fakecuda_unsafe_call is the check of a potentially unsafe call on the
// calling thread: cuMemAlloc and cuMemFree, which
// cuThreadExchangeStreamCaptureMode names, and those an H200 refused
// (RULES.md): cuMemPoolGetAttribute, cuMemPoolSetAttribute,
// cuMemPoolTrimTo, cuEventQuery of an event not captured, cuStreamQuery,
// cuStreamSynchronize, cuMemAllocAsync and cuMemFreeAsync of a stream
// that does not capture, cuGraphInstantiateWithFlags, cuGraphExecDestroy.
// Prohibited, unless the thread's mode is relaxed, while the thread has a
// capture of its own that is not relaxed, or, in global mode, while any
// thread has a capture begun in global mode. A prohibited call fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates those captures.
CUresult fakecuda_unsafe_call(void) {
	pthread_once(&sconfig_once, sconfigure);
	if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
	if (own_strict_captures == 0 && (thread_mode != CU_STREAM_CAPTURE_MODE_GLOBAL || !__atomic_load_n(&global_captures, __ATOMIC_ACQUIRE)))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&smu);
	pthread_t self = pthread_self();
	for (int i = 0; i < MAX_CAPTURES; i++) {
		struct capture *c = captures[i];
		if (!c) continue;
		int own = pthread_equal(c->thread, self) && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
		int global = c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
		if (own || global) invalidate(c);
	}
	pthread_mutex_unlock(&smu);
	return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// ---- events

// cuEventCreate creates an event in the current context.
CUresult CUDAAPI cuEventCreate(CUevent *pe, unsigned int flags) {
	int dev;
	sconfig();
	CUresult r = fakecuda_in_context("cuEventCreate", &dev);
	if (r != CUDA_SUCCESS) return r;
	if (!pe) return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e = calloc(1, sizeof *e);
	if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
	e->ctx = fakecuda_current();
	*pe = e;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent e) {
	CUresult r = sready("cuEventDestroy");
	if (r != CUDA_SUCCESS) return r;
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&smu);
	e->destroyed = 1;
	release_event(e);
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream h) {
	struct CUstream_st *s;
	sconfig();
	fakecuda_stream_check("cuEventRecord", h);
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = resolve("cuEventRecord", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	// The event and the stream must be of one context (cuEventRecord).
	if (e->ctx != stream_ctx(h, s)) return CUDA_ERROR_INVALID_HANDLE;
	struct op *o = malloc(sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&smu);
	if (s->capturing) {
		// A node of the graph, a captured event: cuEventQuery now refuses
		// it, and a stream that waits for it joins the capture.
		e->captured = 1;
		e->capture_id = s->cap->id;
		fakecuda_graph_node(s->cap->graph);
		pthread_mutex_unlock(&smu);
		free(o);
		return CUDA_SUCCESS;
	}
	e->captured = 0;
	*o = (struct op){.kind = OP_RECORD, .event = e, .gen = ++e->recorded};
	e->pending++;
	enqueue(s, o);
	e->stream = s;
	e->pos = s->enq;
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent e) {
	CUresult r = sready("cuEventQuery");
	if (r != CUDA_SUCCESS) return r;
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&smu);
	int captured_now = e->captured;
	pthread_mutex_unlock(&smu);
	// A query of an event recorded outside a capture is potentially unsafe
	// while a capture is under way (the H200, RULES.md).
	if (!captured_now && (r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&smu);
	int reached = e->done >= e->recorded, captured = e->captured;
	// FAKECUDA_TRIM_OBSERVED=query: a query that finds the event reached is
	// an observation by the host, as a synchronize is.
	if (reached && !captured && trim_query && e->stream) observe(e->stream, e->pos);
	pthread_mutex_unlock(&smu);
	if (captured) return CUDA_ERROR_CAPTURED_EVENT;
	return reached ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent e) {
	CUresult r = sready("cuEventSynchronize");
	if (r != CUDA_SUCCESS) return r;
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&smu);
	if (e->captured) {
		pthread_mutex_unlock(&smu);
		return CUDA_ERROR_CAPTURED_EVENT;
	}
	while (e->done < e->recorded) pthread_cond_wait(&event_cond, &smu);
	if (e->stream && e->pos > e->stream->host_seen) e->stream->host_seen = e->pos;
	if (e->stream) observe(e->stream, e->pos);
	synchronized();
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

// ---- memory pools

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
	sconfig();
	CUresult r = fakecuda_on_device("cuDeviceGetAttribute", dev, pi);
	if (r != CUDA_SUCCESS) return r;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
		*pi = !no_pools;
		return CUDA_SUCCESS;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		*pi = fakecuda_vmm_supported(dev); // FAKECUDA_VMM (fakecuda_vmm.c)
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
	sconfig();
	CUresult r = fakecuda_on_device("cuDeviceGetDefaultMemPool", dev, pool);
	if (r != CUDA_SUCCESS) return r;
	if (no_pools) return CUDA_ERROR_NOT_SUPPORTED;
	*pool = &pools[dev];
	return CUDA_SUCCESS;
}

// cuDeviceGetMemPool returns the device's current pool: its default pool
// until cuDeviceSetMemPool sets another.
CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
	sconfig();
	CUresult r = fakecuda_on_device("cuDeviceGetMemPool", dev, pool);
	if (r != CUDA_SUCCESS) return r;
	if (no_pools) return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&smu);
	*pool = current_pool[dev] ? current_pool[dev] : &pools[dev];
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
	sconfig();
	CUresult r = fakecuda_on_device("cuDeviceSetMemPool", dev, pool);
	if (r != CUDA_SUCCESS) return r;
	if (no_pools) return CUDA_ERROR_NOT_SUPPORTED;
	if (pool < &pools[0] || pool >= &pools[MAX_POOLS] || !pool->alive || pool->device != dev) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&smu);
	current_pool[dev] = pool;
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

// cuMemPoolCreate makes a pool of device memory on props->location.id.
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
	CUresult r = sready("cuMemPoolCreate");
	if (r != CUDA_SUCCESS) return r;
	if (no_pools) return CUDA_ERROR_NOT_SUPPORTED;
	if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
	    props->location.id >= MAX_DEVICES || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	int dev = props->location.id;
	if (dev >= fakecuda_devices()) return CUDA_ERROR_INVALID_DEVICE; // sready was the call's one prologue
	pthread_mutex_lock(&smu);
	struct CUmemPoolHandle_st *p = NULL;
	for (int i = MAX_DEVICES; i < MAX_POOLS && !p; i++)
		if (!pools[i].alive) p = &pools[i];
	if (p) *p = (struct CUmemPoolHandle_st){.device = dev, .alive = 1};
	pthread_mutex_unlock(&smu);
	if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
	*pool = p;
	return CUDA_SUCCESS;
}

// cuMemPoolDestroy: a pool current to its device stays usable until another
// is set; the fake, like the driver, makes the default pool current again.
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool p) {
	CUresult r = sready("cuMemPoolDestroy");
	if (r != CUDA_SUCCESS) return r;
	if (p < &pools[MAX_DEVICES] || p >= &pools[MAX_POOLS] || !p->alive) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&smu);
	if (current_pool[p->device] == p) current_pool[p->device] = NULL;
	pool_release(p, 0);
	p->alive = 0;
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

static CUresult valid_pool(const char *fn, CUmemoryPool p) {
	CUresult r = sready(fn);
	if (r != CUDA_SUCCESS) return r;
	if (no_pools) return CUDA_ERROR_NOT_SUPPORTED;
	if (p < &pools[0] || p >= &pools[MAX_POOLS] || !p->alive) return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute attr, void *value) {
	CUresult r = valid_pool("cuMemPoolGetAttribute", p);
	if (r != CUDA_SUCCESS) return r;
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	if (!value) return CUDA_ERROR_INVALID_VALUE;
	cuuint64_t v;
	pthread_mutex_lock(&smu);
	switch (attr) {
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = p->threshold; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = p->reserved; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = p->reserved_high; break;
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = p->used; break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = p->used_high; break;
	default: r = CUDA_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_unlock(&smu);
	if (r == CUDA_SUCCESS) *(cuuint64_t *)value = v;
	return r;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute attr, void *value) {
	CUresult r = valid_pool("cuMemPoolSetAttribute", p);
	if (r != CUDA_SUCCESS) return r;
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	if (!value) return CUDA_ERROR_INVALID_VALUE;
	cuuint64_t v = *(cuuint64_t *)value;
	pthread_mutex_lock(&smu);
	switch (attr) {
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = v; break;
	// The driver accepts only 0 for the high-water marks, which resets them
	// to the current figures.
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		if (v != 0) r = CUDA_ERROR_INVALID_VALUE;
		else p->reserved_high = p->reserved;
		break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		if (v != 0) r = CUDA_ERROR_INVALID_VALUE;
		else p->used_high = p->used;
		break;
	default: r = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&smu);
	return r;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool p, size_t keep) {
	CUresult r = valid_pool("cuMemPoolTrimTo", p);
	if (r != CUDA_SUCCESS) return r;
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	pthread_mutex_lock(&smu);
	pool_release(p, keep);
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

// alloc_async is cuMemAllocAsync, named fn, and, where from is not NULL,
// cuMemAllocFromPoolAsync from the pool from.
static CUresult alloc_async(const char *fn, CUdeviceptr *dptr, size_t size, CUstream h, struct CUmemPoolHandle_st *from) {
	struct CUstream_st *s;
	sconfig();
	int dev;
	CUresult r = resolve(fn, h, &s, &dev);
	if (r != CUDA_SUCCESS) return r;
	if (no_pools) return CUDA_ERROR_NOT_SUPPORTED;
	if (!dptr) return CUDA_ERROR_INVALID_VALUE;
	if (from && (from < &pools[0] || from >= &pools[MAX_POOLS] || !from->alive)) return CUDA_ERROR_INVALID_VALUE;
	// The allocation comes from the pool current to the stream's device,
	// whatever the current context's device (cuMemAllocAsync); or from the
	// pool given, which "may be from a device different than that of the
	// specified hStream" (cuMemAllocFromPoolAsync).
	dev = from ? from->device : s->device;
	if (__atomic_load_n(&s->capturing, __ATOMIC_ACQUIRE)) {
		// An allocation node of the capture's graph (fakecuda_graph.c),
		// which needs a driver of CUDA 11.4 ("Graph memory nodes are only
		// supported on driver versions 11.4 and newer").
		if (fakecuda_version() < 11040) return CUDA_ERROR_NOT_SUPPORTED;
		pthread_mutex_lock(&smu);
		r = node_call(s);
		// An allocation node of 0 bytes is accepted, as an H200 accepted
		// it (scripts/driver-probes/refused-nodes.py).
		if (r == CUDA_SUCCESS) r = fakecuda_graph_alloc(s->cap->graph, dev, size, dptr); // refused, it leaves the capture as it was
		pthread_mutex_unlock(&smu);
		return r;
	}
	if (size == 0) return CUDA_ERROR_INVALID_VALUE;
	// On a stream that does not capture, potentially unsafe while a
	// capture is under way elsewhere (the H200, RULES.md).
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	struct palloc *a = calloc(1, sizeof *a);
	if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
	a->size = size;
	a->used = round_up(size, pool_round);
	a->device = dev;
	pthread_mutex_lock(&smu);
	// From the device's current pool (cuDeviceGetMemPool), or the one given.
	struct CUmemPoolHandle_st *p = from ? from : current_pool[dev] ? current_pool[dev] : &pools[dev];
	a->pool = p;
	long n = ++nallocs_async;
	if (n == fail_alloc_async || a->used > SIZE_MAX - pool_step - p->used) r = CUDA_ERROR_OUT_OF_MEMORY;
	size_t reused = r == CUDA_SUCCESS ? reusable(s, p, a->used, 0) : 0; // already counted in used
	size_t want = r == CUDA_SUCCESS ? round_up(p->used + a->used - reused, pool_step) : 0;
	if (r == CUDA_SUCCESS && want > p->reserved) {
		// Take the steps from the device; if it has no room, release
		// what the pool keeps free first, as the driver does, and retry.
		r = fakecuda_take(dev, want - p->reserved);
		if (r != CUDA_SUCCESS) {
			pool_release(p, 0);
			r = fakecuda_take(dev, want - p->reserved);
		}
		if (r == CUDA_SUCCESS) p->reserved = want;
	}
	if (r == CUDA_SUCCESS) {
		// Host memory stands for device memory, mapped lazily by malloc.
		a->mem = malloc(size);
		if (!a->mem) r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (r != CUDA_SUCCESS) {
		pthread_mutex_unlock(&smu);
		free(a);
		return r;
	}
	reusable(s, p, reused, 1);
	p->used += a->used - reused;
	if (p->used > p->used_high) p->used_high = p->used;
	if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
	a->next = plive;
	plive = a;
	a->stream = s;
	a->pos = ++s->enq; // the allocation is an operation of the stream
	pthread_mutex_unlock(&smu);
	*dptr = (CUdeviceptr)(uintptr_t)a->mem;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream h) {
	return alloc_async("cuMemAllocAsync", dptr, size, h, NULL);
}

// cuMemAllocFromPoolAsync "Allocates memory from a specified pool with
// stream ordered semantics": as cuMemAllocAsync, from pool, not from the
// device's current pool.
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h) {
	if (!pool) return CUDA_ERROR_INVALID_VALUE;
	return alloc_async("cuMemAllocFromPoolAsync", dptr, size, h, pool);
}

// fakecuda_ordered_after reports whether work enqueued on s now runs
// after the work enqueued on t up to position pos, an allocation (smu
// held): s is t; or the host has seen t drained past it
// (cuStreamSynchronize, cuEventSynchronize); or s waits for an event
// recorded on t after it (cuStreamWaitEvent); or one of the two is the
// legacy default stream and the other a blocking stream, which the legacy
// stream synchronizes with.
int fakecuda_ordered_after(struct CUstream_st *s, struct CUstream_st *t, long pos) {
	if (!t || t == s || t->host_seen >= pos) return 1;
	if ((t->legacy && !s->nonblocking) || (s->legacy && !t->nonblocking)) return 1;
	for (int i = 0; i < MAX_KNOWN; i++)
		if (s->known[i].stream == t && s->known[i].pos >= pos) return 1;
	return 0;
}

// fakecuda_unordered_free stops the process: the driver API's
// stream-ordered allocator requires every access of an allocation, its free
// included, to come between the stream executions of the allocation and
// the free; a free on stream s not ordered after the allocation of mem on
// stream t is undefined behaviour, which the fake reports as a sanitizer
// would, unless FAKECUDA_UNORDERED=allow.
void fakecuda_unordered_free(struct CUstream_st *s, struct CUstream_st *t, const void *mem) {
	if (allow_unordered) return;
	fprintf(stderr,
		"fakecuda: cuMemFreeAsync of %p (allocated on stream %p) on stream %p, which is not ordered after the "
		"allocation: record an event after it and cuStreamWaitEvent, or synchronize (undefined behaviour on a "
		"real driver)\n",
		mem, (void *)t, (void *)s);
	abort();
}

// find returns the live pool allocation at dptr (smu held).
static struct palloc *find(CUdeviceptr dptr) {
	for (struct palloc *a = plive; a; a = a->next)
		if ((CUdeviceptr)(uintptr_t)a->mem == dptr) return a;
	return NULL;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream h) {
	struct CUstream_st *s;
	sconfig();
	CUresult r = resolve("cuMemFreeAsync", h, &s, NULL);
	if (r != CUDA_SUCCESS) return r;
	if (__atomic_load_n(&s->capturing, __ATOMIC_ACQUIRE)) {
		// A free node of the capture's graph (fakecuda_graph.c).
		pthread_mutex_lock(&smu);
		r = node_call(s);
		if (r == CUDA_SUCCESS) r = fakecuda_graph_free(s->cap->graph, dptr); // refused, it leaves the capture as it was
		pthread_mutex_unlock(&smu);
		return r;
	}
	// On a stream that does not capture, potentially unsafe as
	// cuMemAllocAsync is (RULES.md).
	if ((r = fakecuda_unsafe_call()) != CUDA_SUCCESS) return r;
	struct op *o = calloc(1, sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&smu);
	long n = ++nfrees_async;
	struct palloc *a = find(dptr);
	if (n != fail_free_async && !a) {
		// A graph allocation that outlived its launch, or nothing.
		r = fakecuda_graph_free_async(s, dptr);
		pthread_mutex_unlock(&smu);
		free(o);
		return r;
	}
	if (n == fail_free_async || !a || a->freeing) {
		pthread_mutex_unlock(&smu);
		free(o);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!fakecuda_ordered_after(s, a->stream, a->pos)) fakecuda_unordered_free(s, a->stream, a->mem);
	a->freeing = 1;
	if (free_enqueued) {
		// The reading where the pool counts the bytes free as soon as the
		// free is enqueued, and may give them at once to later
		// allocations on the same stream.
		struct CUmemPoolHandle_st *p = a->pool ? a->pool : &pools[a->device];
		p->used -= a->used;
		a->uncounted = 1;
	}
	o->kind = OP_FREE;
	o->alloc = a;
	enqueue(s, o);
	a->free_stream = s; // its position: the worker executes it only after smu is released
	a->free_pos = s->enq;
	if (!a->uncounted) {
		// Counted until the stream executes the free, and the next
		// allocations on the stream take it over first.
		a->remaining = a->used;
		a->listed = 1;
		a->fprev = s->ftail, a->fnext = NULL;
		if (s->ftail) s->ftail->fnext = a; else s->fhead = a;
		s->ftail = a;
	}
	pthread_mutex_unlock(&smu);
	return CUDA_SUCCESS;
}

// fakecuda_pool_free_now is cuMemFree of pool memory, or of a graph
// allocation that outlived its launch, called by fakecuda.c: at once,
// without waiting for any stream, as the driver does.
CUresult fakecuda_pool_free_now(CUdeviceptr dptr) {
	pthread_once(&sconfig_once, sconfigure);
	pthread_mutex_lock(&smu);
	struct palloc *a = find(dptr);
	CUresult r = CUDA_SUCCESS;
	if (!a)
		r = fakecuda_graph_free_now(dptr);
	else if (a->freeing)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		pool_free(a, 0);
	pthread_mutex_unlock(&smu);
	return r;
}

// ---- for fakecuda_graph.c

// fakecuda_lock and fakecuda_unlock take and give smu, which guards the
// graphs too.
void fakecuda_lock(void) {
	pthread_once(&sconfig_once, sconfigure);
	pthread_mutex_lock(&smu);
}

void fakecuda_unlock(void) { pthread_mutex_unlock(&smu); }

// fakecuda_resolve returns the stream a handle names, as every call on a
// stream finds it (resolve), and the current context's device.
CUresult fakecuda_resolve(const char *fn, CUstream h, struct CUstream_st **out, int *dev) {
	sconfig();
	return resolve(fn, h, out, dev);
}

// fakecuda_capturing reports whether s takes part in a capture (smu held).
int fakecuda_capturing(struct CUstream_st *s) { return s->capturing != 0; }

// fakecuda_enqueue_call enqueues on s an operation that calls fn(data) as
// the stream reaches it, and returns the stream's position after it, or -1
// where there is no memory for it (smu held; s is not capturing).
long fakecuda_enqueue_call(struct CUstream_st *s, void (*fn)(void *), void *data) {
	struct op *o = calloc(1, sizeof *o);
	if (!o) return -1;
	o->kind = OP_CALL;
	o->call = fn;
	o->data = data;
	enqueue(s, o);
	return s->enq;
}

// fakecuda_run_hostfn runs a graph's host function node as a launch
// reaches it, as a stream runs its own (run_hostfn).
void fakecuda_run_hostfn(CUhostFn fn, void *data) { run_hostfn(fn, data); }
