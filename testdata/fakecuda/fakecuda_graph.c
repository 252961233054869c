// fakecuda_graph.c is the fake driver's graphs, built with fakecuda.c and
// fakecuda_stream.c: what a stream capture records, instantiation, upload
// and launch, and graph memory, the physical memory the driver keeps for
// graph allocations apart from every memory pool. RULES.md lists each rule
// with where NVIDIA documents it, or where the documents are silent, what
// an NVIDIA H200 (driver 580.159.04) answered.
//
// A capture's graph keeps its nodes in capture order: allocation and free
// nodes (cuMemAllocAsync and cuMemFreeAsync on a capturing stream), host
// functions and memsets, which each launch runs, and the rest (event
// records and waits), which it only counts. An allocation node's address is
// assigned when it is captured and stays fixed across instantiations and
// launches: host memory malloc'd then stands for its virtual range, kept
// while a graph or graph exec holds the node or the allocation is live.
//
// Graph memory, per device, is reserved in chunks (32 MiB, as the H200
// reserved it; FAKECUDA_GRAPH_CHUNK), and is of two kinds:
//
//   - mapped for the graphs of a stream (a binding): shared by every graph
//     launched or uploaded on that stream, since graphs launched one after
//     another in one stream never run at once;
//   - pinned: held by the graph allocations that outlive their launch,
//     until they are freed, when it returns to their stream's binding
//     ("physical pages cannot be reused if they are bound to ... a graph
//     allocation which remains unfreed").
//
// A launch needs on its stream the peak of its graph's own allocations in
// node order, their bytes rounded up to the chunk once (the H200: one
// allocation of 4 KiB to 32 MiB reserved 32 MiB, of 33 MiB 64; 100 of
// 4 KiB live at once 32; 4 of 20 MiB 96); what its stream's binding lacks
// it takes from the bindings of streams where no graph is executing or
// scheduled, then from the device, or it fails with
// CUDA_ERROR_OUT_OF_MEMORY and changes nothing. A graph's allocations lie
// at offsets in its memory, each at the lowest one where it fits among
// those live then, in node order (first fit); the allocations a launch
// leaves live pin every chunk they lie in (the H200: an 8 MiB allocation
// live after its launch held 32 MiB, and a 12 MiB graph launched after it
// took 32 more; 8 MiB left live after 30 MiB the graph freed held two
// chunks, after 40 MiB one), less as they are freed: the host sees them
// live from the launch, so that later stream work may use and free them. Memory stays mapped, and counted in USED_MEM_CURRENT as in
// RESERVED_MEM_CURRENT, until a trim or another stream's launch takes it:
// destroying a graph exec unmaps nothing (the H200: 32 MiB used before
// cuGraphExecDestroy, 32 after). cuDeviceGraphMemTrim returns to the device
// each binding's memory beyond what its launches in flight use (an upload
// not yet executed counts as one); pinned memory stays.
//
// Its environment variables, read once:
//
//	FAKECUDA_GRAPH_HIGH_RESET=r    what cuDeviceSetGraphMemAttribute of 0 makes
//	                               of a high-water mark, which the reference
//	                               does not settle: "current" (default, the
//	                               H200's), the figure's current value;
//	                               "zero", 0
//	FAKECUDA_GRAPH_CHUNK=b         the chunk in bytes in which graph memory is
//	                               reserved (default 33554432, the H200's);
//	                               a device of another chunk
#include <cuda.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16
#define MAX_BINDINGS 64

struct CUstream_st;

// From fakecuda.c.
CUresult fakecuda_ready(const char *fn);
CUresult fakecuda_in_context(const char *fn, int *device);
CUresult fakecuda_on_device(const char *fn, CUdevice dev, const void *out);
CUresult fakecuda_take(int dev, size_t n);
int fakecuda_devices(void);
void fakecuda_give(int dev, size_t n);

// From fakecuda_stream.c; all but the first two and the last two with the
// lock held.
void fakecuda_lock(void);
void fakecuda_unlock(void);
CUresult fakecuda_resolve(const char *fn, CUstream h, struct CUstream_st **s, int *dev);
int fakecuda_capturing(struct CUstream_st *s);
long fakecuda_enqueue_call(struct CUstream_st *s, void (*fn)(void *), void *data);
int fakecuda_ordered_after(struct CUstream_st *s, struct CUstream_st *t, long pos);
void fakecuda_unordered_free(struct CUstream_st *s, struct CUstream_st *t, const void *mem);
void fakecuda_run_hostfn(CUhostFn fn, void *data);
CUresult fakecuda_unsafe_call(void);

static pthread_once_t gconfig_once = PTHREAD_ONCE_INIT;
static int reset_to_zero;               // FAKECUDA_GRAPH_HIGH_RESET=zero
static size_t chunk = (size_t)32 << 20; // FAKECUDA_GRAPH_CHUNK

static void gconfigure(void) {
	const char *h = getenv("FAKECUDA_GRAPH_HIGH_RESET");
	reset_to_zero = h && strcmp(h, "zero") == 0;
	const char *c = getenv("FAKECUDA_GRAPH_CHUNK");
	if (c && strtoull(c, NULL, 10) > 0) chunk = (size_t)strtoull(c, NULL, 10);
}

static void gconfig(void) { pthread_once(&gconfig_once, gconfigure); }

// chunks rounds n bytes up to whole chunks, saturating.
static size_t chunks(size_t n) {
	if (n > SIZE_MAX - (chunk - 1)) return SIZE_MAX / chunk * chunk;
	return (n + chunk - 1) / chunk * chunk;
}

// ---- the state, guarded by fakecuda_lock

// A binding: the memory mapped for the graphs of one stream on one device.
struct gbind {
	int used;                  // the slot is taken
	int device;
	struct CUstream_st *stream; // NULL once the stream is destroyed
	size_t phys;               // mapped for the stream's graphs
	int execs;                 // graph execs bound to it (launched or uploaded there last)
	int busy;                  // launches and uploads on it not yet executed
	int pinned;                // live allocations whose memory came from it
};

// A device's graph memory: its bindings' and what is pinned, all of it
// mapped (USED_MEM_CURRENT) and reserved (RESERVED_MEM_CURRENT).
struct gdev {
	size_t pinned; // held by live allocations that outlive their launch
	size_t used_high, reserved_high;
	struct gbind binds[MAX_BINDINGS];
	struct glaunch *inflight; // its launches and uploads not yet executed
};

static struct gdev gdevs[MAX_DEVICES];

// A pin: the memory that the allocations left live by one launch hold,
// apart from their stream's binding until freed: every chunk of the
// graph's memory that one of them lies in, at its offset (galloc.off).
struct gpin {
	int live;                 // its allocations still live
	int n;                    // its allocations
	struct galloc **members;  // its allocations, live or not
	size_t phys;              // the memory it holds: the chunks its live allocations lie in
};

// An allocation node's allocation.
struct galloc {
	struct galloc *next;      // every allocation node that still exists
	void *mem;                // its fixed address
	size_t size;              // asked for
	size_t off;               // its offset in its graph's memory (instantiate)
	int device;
	struct CUgraph_st *graph; // the graph that allocates it, until destroyed
	int freed_in_own;         // its graph has a free node for it
	int freed_elsewhere;      // another graph has one
	int refs;                 // node lists (graphs, execs) and pending frees holding it
	int live;                 // allocated by a launch, not yet freed
	int freeing;              // a free of it is on its way (a stream's, another graph's)
	unsigned long gen;        // counts its launches: a pending free of an earlier one is void
	struct gbind *home;       // while live: the binding its memory is pinned from
	struct gpin *pin;         // while live: the memory it holds
	struct CUstream_st *stream; // while live: the launch's stream and position there
	long pos;
};

static struct galloc *gallocs;

enum gkind { N_ALLOC, N_FREE, N_HOST, N_MEMSET, N_OTHER };

struct gnode {
	enum gkind kind;
	struct galloc *alloc; // N_ALLOC, N_FREE
	CUhostFn fn;          // N_HOST
	void *data;           // N_HOST; N_MEMSET: the memory
	unsigned char value;  // N_MEMSET
	size_t n;             // N_MEMSET
};

struct nodes {
	struct gnode *v;
	long n, cap;
};

struct CUgraph_st {
	struct nodes nodes;
	int memory;                   // it has allocation or free nodes
	struct CUgraphExec_st *exec;  // its instantiation, where it has memory nodes
};

struct CUgraphExec_st {
	struct CUgraph_st *graph; // NULL once destroyed
	struct nodes nodes;
	int device;               // its allocations' device, or -1 for none
	size_t need;              // the peak of its own allocations' bytes in node order, in chunks
	unsigned long long flags;
	struct gbind *bind;       // where its memory is mapped: its last stream's
	int inflight;             // launches and uploads not yet executed
	int destroyed;            // cuGraphExecDestroy: freed once none is in flight
};

// A launch or an upload, from cuGraphLaunch to the stream's execution of it.
struct glaunch {
	struct glaunch *next;   // its device's in flight
	struct CUgraphExec_st *exec;
	struct gbind *bind;     // NULL for a graph without memory nodes
	size_t use;             // the memory of bind it uses while in flight
	int upload;
	struct gfree *frees;    // the allocations of other graphs it frees
};

// A free on its way: of a stream (cuMemFreeAsync) or of a launch (a free
// node of another graph's allocation).
struct gfree {
	struct gfree *next;
	struct galloc *a;
	unsigned long gen;
};

// ---- figures and bindings

static size_t used_of(struct gdev *d) {
	size_t n = d->pinned;
	for (int i = 0; i < MAX_BINDINGS; i++)
		if (d->binds[i].used) n += d->binds[i].phys;
	return n;
}

static void raise_highs(struct gdev *d) {
	size_t u = used_of(d);
	if (u > d->used_high) d->used_high = u;
	if (u > d->reserved_high) d->reserved_high = u;
}

// settle frees a binding's slot once it holds nothing: no memory, no graph
// exec bound, nothing in flight, nothing pinned from it. A binding no graph
// exec is bound to keeps its memory mapped until a trim or another stream
// takes it (the H200 kept a destroyed graph exec's 32 MiB used).
static void settle(struct gbind *b) {
	if (b->phys == 0 && b->execs == 0 && b->busy == 0 && b->pinned == 0) b->used = 0;
}

// bind returns the binding of stream s on device dev, made if need be, or
// NULL where every slot is taken.
static struct gbind *bind(int dev, struct CUstream_st *s) {
	struct gdev *d = &gdevs[dev];
	struct gbind *free_slot = NULL;
	for (int i = 0; i < MAX_BINDINGS; i++) {
		struct gbind *b = &d->binds[i];
		if (b->used && b->stream == s) return b;
		if (!b->used && !free_slot) free_slot = b;
	}
	if (free_slot) *free_slot = (struct gbind){.used = 1, .device = dev, .stream = s};
	return free_slot;
}

// provide grows b's memory to want: from the bindings where nothing is in
// flight ("CUDA may reuse physical memory from a graph whose execution has
// already finished -- even if the new graph is being launched in a
// different stream"), then from the device. It fails with
// CUDA_ERROR_OUT_OF_MEMORY, changing nothing, where the device has not
// enough.
static CUresult provide(struct gbind *b, size_t want) {
	if (b->phys >= want) return CUDA_SUCCESS;
	struct gdev *d = &gdevs[b->device];
	size_t lack = want - b->phys, avail = 0;
	for (int i = 0; i < MAX_BINDINGS; i++) {
		struct gbind *o = &d->binds[i];
		if (o->used && o != b && o->busy == 0) avail += o->phys;
	}
	if (lack > avail) {
		CUresult r = fakecuda_take(b->device, lack - avail);
		if (r != CUDA_SUCCESS) return r;
		b->phys += lack - avail;
		lack = avail;
	}
	for (int i = 0; i < MAX_BINDINGS && lack > 0; i++) {
		struct gbind *o = &d->binds[i];
		if (!o->used || o == b || o->busy != 0) continue;
		size_t t = lack < o->phys ? lack : o->phys;
		o->phys -= t, b->phys += t, lack -= t;
		settle(o);
	}
	return CUDA_SUCCESS;
}

// rebind binds e to b, leaving its former binding.
static void rebind(struct CUgraphExec_st *e, struct gbind *b) {
	if (e->bind == b) return;
	struct gbind *old = e->bind;
	e->bind = b;
	b->execs++;
	if (old) {
		old->execs--;
		settle(old);
	}
}

// ---- allocations

static void unref(struct galloc *a) {
	if (--a->refs > 0 || a->live) return;
	for (struct galloc **q = &gallocs; *q; q = &(*q)->next) {
		if (*q == a) {
			*q = a->next;
			break;
		}
	}
	free(a->mem);
	free(a);
}

// spanned returns the memory of the chunks that p's live allocations lie
// in, each at its offset in its graph's memory, each chunk once.
static size_t spanned(const struct gpin *p) {
	size_t *first = malloc((size_t)p->n * 2 * sizeof *first), *last = first + p->n;
	size_t n = 0;
	int k = 0;
	for (int i = 0; i < p->n; i++) {
		const struct galloc *a = p->members[i];
		if (!a->live || a->pin != p) continue;
		size_t f = a->off / chunk, e = (a->off + a->size - 1) / chunk;
		if (!first) { // no memory to sort them: at most their chunks each
			n += e - f + 1;
			continue;
		}
		int j = k++;
		for (; j > 0 && first[j - 1] > f; j--) first[j] = first[j - 1], last[j] = last[j - 1];
		first[j] = f, last[j] = e;
	}
	size_t covered = 0; // the last chunk counted, where i > 0
	for (int i = 0; i < k; i++) {
		size_t f = i > 0 && first[i] <= covered ? covered + 1 : first[i];
		if (last[i] >= f) n += last[i] - f + 1;
		if (i == 0 || last[i] > covered) covered = last[i];
	}
	free(first);
	return n * chunk;
}

// release ends the life of a live allocation: the memory its pin holds no
// more returns, still mapped, to the binding it was pinned from.
static void release(struct galloc *a) {
	struct gdev *d = &gdevs[a->device];
	struct gbind *b = a->home;
	struct gpin *p = a->pin;
	a->live = a->freeing = 0;
	a->home = NULL;
	a->pin = NULL;
	p->live--;
	size_t keep = spanned(p);
	d->pinned -= p->phys - keep;
	b->phys += p->phys - keep;
	p->phys = keep;
	if (p->live == 0) {
		free(p->members);
		free(p);
	}
	b->pinned--;
	settle(b);
	if (a->refs == 0) {
		a->refs = 1;
		unref(a);
	}
}

static struct galloc *find(CUdeviceptr dptr) {
	for (struct galloc *a = gallocs; a; a = a->next)
		if ((CUdeviceptr)(uintptr_t)a->mem == dptr) return a;
	return NULL;
}

// pending returns a free of a's present life, to run later; a->refs keeps a.
static struct gfree *pending(struct galloc *a) {
	struct gfree *f = calloc(1, sizeof *f);
	if (!f) return NULL;
	f->a = a;
	f->gen = a->gen;
	a->refs++;
	a->freeing = 1;
	return f;
}

// run_free runs a pending free: the allocation's life ends, unless a
// relaunch already ended it.
static void run_free(struct gfree *f) {
	if (f->a->live && f->a->gen == f->gen) release(f->a);
	unref(f->a);
	free(f);
}

static void freed_by_stream(void *data) {
	fakecuda_lock();
	run_free(data);
	fakecuda_unlock();
}

// ---- nodes

static int add(struct nodes *l, struct gnode n) {
	if (l->n == l->cap) {
		long cap = l->cap ? 2 * l->cap : 16;
		struct gnode *v = realloc(l->v, (size_t)cap * sizeof *v);
		if (!v) return 0;
		l->v = v, l->cap = cap;
	}
	l->v[l->n++] = n;
	if (n.alloc) n.alloc->refs++;
	return 1;
}

static void drop(struct nodes *l) {
	for (long i = 0; i < l->n; i++)
		if (l->v[i].alloc) unref(l->v[i].alloc);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

// ---- what fakecuda_stream.c calls as a stream captures (lock held but the first)

struct CUgraph_st *fakecuda_graph_new(void) { return calloc(1, sizeof(struct CUgraph_st)); }

// fakecuda_graph_discard frees the graph of an invalidated capture.
void fakecuda_graph_discard(struct CUgraph_st *g) {
	for (long i = 0; i < g->nodes.n; i++) {
		struct galloc *a = g->nodes.v[i].alloc;
		if (a && a->graph == g) a->graph = NULL;
	}
	drop(&g->nodes);
	free(g);
}

void fakecuda_graph_node(struct CUgraph_st *g) { add(&g->nodes, (struct gnode){.kind = N_OTHER}); }

void fakecuda_graph_host(struct CUgraph_st *g, CUhostFn fn, void *data) {
	add(&g->nodes, (struct gnode){.kind = N_HOST, .fn = fn, .data = data});
}

void fakecuda_graph_memset(struct CUgraph_st *g, void *dst, unsigned char value, size_t n) {
	add(&g->nodes, (struct gnode){.kind = N_MEMSET, .data = dst, .value = value, .n = n});
}

// fakecuda_graph_alloc is cuMemAllocAsync during a capture: an allocation
// node, whose address is assigned now and stays fixed across
// instantiations and launches (cuGraphAddMemAllocNode). No memory is
// reserved until a launch or an upload.
CUresult fakecuda_graph_alloc(struct CUgraph_st *g, int dev, size_t size, CUdeviceptr *dptr) {
	gconfig();
	struct galloc *a = calloc(1, sizeof *a);
	if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
	a->mem = malloc(size ? size : 1); // host memory stands for the range, mapped lazily; an address of its own for 0 bytes
	if (!a->mem) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->size = size;
	a->device = dev;
	a->graph = g;
	a->next = gallocs;
	gallocs = a;
	if (!add(&g->nodes, (struct gnode){.kind = N_ALLOC, .alloc = a})) {
		a->refs = 1;
		unref(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	g->memory = 1;
	*dptr = (CUdeviceptr)(uintptr_t)a->mem;
	return CUDA_SUCCESS;
}

// frees reports whether g has a free node of a.
static int frees(const struct CUgraph_st *g, const struct galloc *a) {
	for (long i = 0; i < g->nodes.n; i++)
		if (g->nodes.v[i].kind == N_FREE && g->nodes.v[i].alloc == a) return 1;
	return 0;
}

// fakecuda_graph_free is cuMemFreeAsync during a capture: a free node,
// refused (CUDA_ERROR_INVALID_VALUE) for an address no allocation node
// returned, an allocation freed twice in the same graph (its own or
// another), or freed both in its graph and in another
// (cuGraphAddMemFreeNode, cuGraphAddMemAllocNode). A refusal leaves the
// capture as it was, as the H200 left it.
CUresult fakecuda_graph_free(struct CUgraph_st *g, CUdeviceptr dptr) {
	struct galloc *a = find(dptr);
	int own = a && a->graph == g;
	if (!a || a->freed_in_own || (own && a->freed_elsewhere) || frees(g, a)) return CUDA_ERROR_INVALID_VALUE;
	if (!add(&g->nodes, (struct gnode){.kind = N_FREE, .alloc = a})) return CUDA_ERROR_OUT_OF_MEMORY;
	if (own)
		a->freed_in_own = 1;
	else
		a->freed_elsewhere = 1;
	g->memory = 1;
	return CUDA_SUCCESS;
}

// fakecuda_graph_free_async is cuMemFreeAsync of a graph allocation that
// outlived its launch: its life ends when the stream reaches the free.
CUresult fakecuda_graph_free_async(struct CUstream_st *s, CUdeviceptr dptr) {
	struct galloc *a = find(dptr);
	if (!a || !a->live || a->freeing) return CUDA_ERROR_INVALID_VALUE;
	if (!fakecuda_ordered_after(s, a->stream, a->pos)) fakecuda_unordered_free(s, a->stream, a->mem);
	struct gfree *f = pending(a);
	if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
	if (fakecuda_enqueue_call(s, freed_by_stream, f) < 0) {
		a->freeing = 0;
		unref(a);
		free(f);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

// fakecuda_graph_free_now is cuMemFree of a graph allocation that outlived
// its launch: its life ends at once ("immediately upon the freeing call to
// cudaFree()").
CUresult fakecuda_graph_free_now(CUdeviceptr dptr) {
	struct galloc *a = find(dptr);
	if (!a || !a->live || a->freeing) return CUDA_ERROR_INVALID_VALUE;
	release(a);
	return CUDA_SUCCESS;
}

// fakecuda_graph_stream_gone forgets a destroyed stream: the memory mapped
// for its graphs stays theirs until a trim or another stream takes it.
void fakecuda_graph_stream_gone(struct CUstream_st *s) {
	for (int dev = 0; dev < MAX_DEVICES; dev++)
		for (int i = 0; i < MAX_BINDINGS; i++)
			if (gdevs[dev].binds[i].used && gdevs[dev].binds[i].stream == s) gdevs[dev].binds[i].stream = NULL;
}

// ---- graphs and graph execs

// cuGraphGetNodes reports how many nodes the graph holds; the fake gives
// no node handles, so nodes must be NULL.
CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *numNodes) {
	CUresult r = fakecuda_ready("cuGraphGetNodes");
	if (r != CUDA_SUCCESS) return r;
	if (!g || !numNodes) return CUDA_ERROR_INVALID_VALUE;
	if (nodes) return CUDA_ERROR_NOT_SUPPORTED;
	fakecuda_lock();
	*numNodes = (size_t)g->nodes.n;
	fakecuda_unlock();
	return CUDA_SUCCESS;
}

// cuGraphDestroy destroys a graph and its nodes, but no live graph
// allocation: "Graph destruction does not automatically free any live
// graph-allocated memory". A graph exec instantiated from it lives on.
CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
	CUresult r = fakecuda_ready("cuGraphDestroy");
	if (r != CUDA_SUCCESS) return r;
	if (!g) return CUDA_ERROR_INVALID_VALUE;
	fakecuda_lock();
	if (g->exec) g->exec->graph = NULL;
	fakecuda_graph_discard(g);
	fakecuda_unlock();
	return CUDA_SUCCESS;
}

// cuGraphInstantiateWithFlags (CUDA 11.4) makes a graph exec; it reserves
// no memory ("Physical memory cannot be allocated or mapped during graph
// instantiation because the stream in which the graph will execute is
// unknown"). A graph with allocation or free nodes has "at most one
// executable graph in existence ... at a time": a second instantiation
// before cuGraphExecDestroy of the first "will result in an error", which
// the reference does not name: CUDA_ERROR_NOT_SUPPORTED, the H200's. It is
// potentially unsafe during a capture (fakecuda_unsafe_call): the H200
// answered it with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and invalidated
// the capture, where another thread had begun one in global mode and the
// calling thread was not in relaxed mode.
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g, unsigned long long flags) {
	int dev;
	gconfig();
	CUresult r = fakecuda_in_context("cuGraphInstantiateWithFlags", &dev);
	if (r == CUDA_SUCCESS) r = fakecuda_unsafe_call();
	if (r != CUDA_SUCCESS) return r;
	const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	if (!pe || !g || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphExec_st *e = calloc(1, sizeof *e);
	if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
	fakecuda_lock();
	if (g->memory && g->exec) {
		fakecuda_unlock();
		free(e);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	e->device = -1;
	// Its own allocations' bytes live at once, in node order, and their
	// layout: each at the lowest offset where it fits among those live
	// (first fit), which keeps the footprint at the peak for every graph
	// the H200 was measured on.
	size_t bytes = 0, peak = 0, top = 0;
	struct galloc **placed = calloc((size_t)g->nodes.n + 1, sizeof *placed); // the live ones, by offset
	long nplaced = 0;
	if (!placed) {
		fakecuda_unlock();
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (long i = 0; i < g->nodes.n; i++) {
		struct gnode n = g->nodes.v[i];
		if (!add(&e->nodes, n)) {
			drop(&e->nodes);
			fakecuda_unlock();
			free(placed);
			free(e);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (n.kind == N_ALLOC) {
			struct galloc *a = n.alloc;
			if (e->device < 0) e->device = a->device;
			bytes += a->size;
			if (bytes > peak) peak = bytes;
			size_t off = 0;
			long j = 0;
			for (; j < nplaced && placed[j]->off < off + a->size; j++)
				if (placed[j]->off + placed[j]->size > off) off = placed[j]->off + placed[j]->size;
			a->off = off;
			memmove(placed + j + 1, placed + j, (size_t)(nplaced - j) * sizeof *placed);
			placed[j] = a;
			nplaced++;
			if (off + a->size > top) top = off + a->size;
		} else if (n.kind == N_FREE && n.alloc->freed_in_own) {
			bytes -= n.alloc->size; // its own: another graph's is freed_elsewhere
			for (long j = 0; j < nplaced; j++) {
				if (placed[j] != n.alloc) continue;
				memmove(placed + j, placed + j + 1, (size_t)(nplaced - j - 1) * sizeof *placed);
				nplaced--;
				break;
			}
		}
	}
	free(placed);
	// Its need: the peak of those bytes rounded up to the chunk once (the
	// footprint where first fit leaves a gap).
	e->need = chunks(peak > top ? peak : top);
	e->graph = g;
	e->flags = flags;
	if (g->memory) g->exec = e;
	fakecuda_unlock();
	*pe = e;
	return CUDA_SUCCESS;
}

static void exec_free(struct CUgraphExec_st *e) {
	drop(&e->nodes);
	free(e);
}

// outliving reports whether a graph exec's node allocates memory that its
// graph does not free, which outlives each launch.
static int outliving(const struct gnode *n) { return n->kind == N_ALLOC && !n->alloc->freed_in_own; }

// launched is a stream's execution of a launch or an upload: the graph's
// host functions and memsets run in node order, the allocations of other
// graphs that it frees end, and it is no longer in flight.
static void launched(void *data) {
	struct glaunch *l = data;
	struct CUgraphExec_st *e = l->exec; // kept by e->inflight; its nodes do not change
	for (long i = 0; !l->upload && i < e->nodes.n; i++) {
		struct gnode *n = &e->nodes.v[i];
		if (n->kind == N_HOST) fakecuda_run_hostfn(n->fn, n->data);
		if (n->kind == N_MEMSET) memset(n->data, n->value, n->n);
	}
	fakecuda_lock();
	for (struct gfree *f = l->frees, *next; f; f = next) {
		next = f->next;
		run_free(f);
	}
	if (l->bind) {
		struct gdev *d = &gdevs[l->bind->device];
		for (struct glaunch **q = &d->inflight; *q; q = &(*q)->next) {
			if (*q == l) {
				*q = l->next;
				break;
			}
		}
		l->bind->busy--;
		settle(l->bind);
	}
	if (--e->inflight == 0 && e->destroyed) exec_free(e);
	fakecuda_unlock();
	free(l);
}

// launch is cuGraphLaunch, or cuGraphUpload where upload: on the stream's
// binding, the memory the graph needs is mapped now ("Calling
// cudaGraphUpload can separate out the cost of allocation from the launch
// by performing all mappings for that graph immediately and associating
// the graph with the upload stream"), taken from what finished graphs hold
// before the device, or the call fails with CUDA_ERROR_OUT_OF_MEMORY. A
// launch refuses a graph exec whose earlier allocations are still live
// (CUDA_ERROR_INVALID_VALUE), unless it was instantiated with
// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, which frees them first.
static CUresult launch(const char *fn, CUgraphExec e, CUstream h, int upload) {
	struct CUstream_st *s;
	int unused;
	gconfig();
	CUresult r = fakecuda_resolve(fn, h, &s, &unused);
	if (r != CUDA_SUCCESS) return r;
	if (!e) return CUDA_ERROR_INVALID_VALUE;
	struct glaunch *l = calloc(1, sizeof *l);
	if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
	*l = (struct glaunch){.exec = e, .upload = upload};
	fakecuda_lock();
	if (e->destroyed)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (fakecuda_capturing(s))
		r = CUDA_ERROR_NOT_SUPPORTED; // a child graph node: not modelled
	for (long i = 0; r == CUDA_SUCCESS && !upload && i < e->nodes.n; i++) {
		struct galloc *a = e->nodes.v[i].alloc;
		if (outliving(&e->nodes.v[i]) && a->live && !a->freeing && !(e->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
			r = CUDA_ERROR_INVALID_VALUE;
	}
	struct gbind *b = NULL;
	if (r == CUDA_SUCCESS && e->device >= 0) {
		// The earlier life of its allocations ends before this one begins:
		// a free on its way (then void), or AUTO_FREE_ON_LAUNCH's.
		for (long i = 0; !upload && i < e->nodes.n; i++)
			if (outliving(&e->nodes.v[i]) && e->nodes.v[i].alloc->live) release(e->nodes.v[i].alloc);
		b = bind(e->device, s);
		r = b ? provide(b, e->need) : CUDA_ERROR_OUT_OF_MEMORY;
	}
	// The pin of the allocations it leaves live, which share it.
	struct gpin *pin = NULL;
	int nout = 0;
	for (long i = 0; r == CUDA_SUCCESS && b && !upload && i < e->nodes.n; i++)
		nout += outliving(&e->nodes.v[i]);
	if (nout > 0) {
		pin = calloc(1, sizeof *pin);
		if (pin) pin->members = calloc((size_t)nout, sizeof *pin->members);
		if (!pin || !pin->members) r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (r == CUDA_SUCCESS && !upload) {
		// The allocations of other graphs that its free nodes free.
		for (long i = 0; i < e->nodes.n; i++) {
			struct galloc *a = e->nodes.v[i].alloc;
			if (e->nodes.v[i].kind != N_FREE || a->freed_in_own || !a->live || a->freeing) continue;
			struct gfree *f = pending(a);
			if (f) f->next = l->frees, l->frees = f;
		}
	}
	long pos = r == CUDA_SUCCESS ? fakecuda_enqueue_call(s, launched, l) : 0;
	if (r == CUDA_SUCCESS && pos < 0) {
		for (struct gfree *f = l->frees, *next; f; f = next) {
			next = f->next;
			f->a->freeing = 0;
			unref(f->a);
			free(f);
		}
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (r != CUDA_SUCCESS) {
		if (b) settle(b);
		fakecuda_unlock();
		if (pin) free(pin->members);
		free(pin);
		free(l);
		return r;
	}
	e->inflight++;
	if (b) {
		struct gdev *d = &gdevs[b->device];
		rebind(e, b);
		b->busy++;
		l->bind = b;
		l->use = e->need;
		// Its allocations that it does not free live on from here, pinned
		// together: the chunks they lie in (the H200: 8 MiB left live after
		// 30 MiB freed in the graph held two chunks, 64 MiB; after 40 MiB,
		// one).
		for (long i = 0; pin && i < e->nodes.n; i++) {
			if (!outliving(&e->nodes.v[i])) continue;
			struct galloc *a = e->nodes.v[i].alloc;
			pin->members[pin->n++] = a;
			pin->live++;
			a->live = 1;
			a->gen++;
			a->home = b;
			a->pin = pin;
			a->stream = s;
			a->pos = pos;
			b->pinned++;
		}
		if (pin) {
			pin->phys = spanned(pin);
			b->phys -= pin->phys;
			d->pinned += pin->phys;
			l->use -= pin->phys;
		}
		l->next = d->inflight;
		d->inflight = l;
		raise_highs(d);
	}
	fakecuda_unlock();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec e, CUstream h) { return launch("cuGraphLaunch", e, h, 0); }

CUresult CUDAAPI cuGraphUpload(CUgraphExec e, CUstream h) { return launch("cuGraphUpload", e, h, 1); }

// cuGraphExecDestroy destroys a graph exec, in flight or not ("freed
// asynchronously on completion"); its graph may be instantiated again. It
// frees no live allocation, and the memory mapped for it stays mapped,
// for later graphs, until a trim: the H200 read 32 MiB used before
// cuGraphExecDestroy of a launched 8 MiB graph, and 32 after. It is
// potentially unsafe during a capture, as cuGraphInstantiateWithFlags is.
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec e) {
	gconfig();
	CUresult r = fakecuda_ready("cuGraphExecDestroy");
	if (r == CUDA_SUCCESS) r = fakecuda_unsafe_call();
	if (r != CUDA_SUCCESS) return r;
	if (!e) return CUDA_ERROR_INVALID_VALUE;
	fakecuda_lock();
	if (e->destroyed) {
		fakecuda_unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	e->destroyed = 1;
	if (e->graph && e->graph->exec == e) e->graph->exec = NULL;
	e->graph = NULL;
	if (e->bind) {
		struct gbind *b = e->bind;
		e->bind = NULL;
		b->execs--;
		settle(b);
	}
	if (e->inflight == 0) exec_free(e);
	fakecuda_unlock();
	return CUDA_SUCCESS;
}

// ---- graph memory: trim and figures

// cuDeviceGraphMemTrim returns to the device the graph memory "not in use
// by a graph that is either currently executing or scheduled to execute";
// "Allocations that have not been freed ... are considered to be actively
// using the physical memory".
CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice dev) {
	int unused;
	gconfig();
	CUresult r = fakecuda_on_device("cuDeviceGraphMemTrim", dev, &unused);
	if (r != CUDA_SUCCESS) return r;
	fakecuda_lock();
	struct gdev *d = &gdevs[dev];
	size_t give = 0;
	for (int i = 0; i < MAX_BINDINGS; i++) {
		struct gbind *b = &d->binds[i];
		if (!b->used) continue;
		size_t keep = 0;
		for (struct glaunch *l = d->inflight; l; l = l->next)
			if (l->bind == b && l->use > keep) keep = l->use;
		if (b->phys > keep) give += b->phys - keep, b->phys = keep;
		settle(b);
	}
	if (give > 0) fakecuda_give(dev, give);
	fakecuda_unlock();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value) {
	gconfig();
	CUresult r = fakecuda_on_device("cuDeviceGetGraphMemAttribute", dev, value);
	if (r != CUDA_SUCCESS) return r;
	fakecuda_lock();
	struct gdev *d = &gdevs[dev];
	cuuint64_t used = used_of(d), v = 0;
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: v = used; break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: v = d->used_high; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: v = used; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: v = d->reserved_high; break;
	default: r = CUDA_ERROR_INVALID_VALUE;
	}
	fakecuda_unlock();
	if (r == CUDA_SUCCESS) *(cuuint64_t *)value = v;
	return r;
}

// cuDeviceSetGraphMemAttribute sets the high-water marks alone, and only
// to 0 ("High watermark can only be reset to zero"): to the figure's
// current value, or to 0 (FAKECUDA_GRAPH_HIGH_RESET).
CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value) {
	gconfig();
	CUresult r = fakecuda_on_device("cuDeviceSetGraphMemAttribute", dev, value);
	if (r != CUDA_SUCCESS) return r;
	if (*(cuuint64_t *)value != 0) return CUDA_ERROR_INVALID_VALUE;
	fakecuda_lock();
	struct gdev *d = &gdevs[dev];
	size_t used = used_of(d);
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: d->used_high = reset_to_zero ? 0 : used; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: d->reserved_high = reset_to_zero ? 0 : used; break;
	default: r = CUDA_ERROR_INVALID_VALUE;
	}
	fakecuda_unlock();
	return r;
}
