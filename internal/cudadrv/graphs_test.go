//go:build cuda

package cudadrv_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/memtrack/memtrack/internal/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rules of graph memory (doc.go), on the driver the process loads: the
// fake's figures are known to the byte (graph memory in chunks of 32 MiB,
// FAKECUDA_GRAPH_CHUNK, as an H200 reserved it), a GPU's only within the
// bounds the documentation sets, so each test checks the bounds, the exact
// figures on the fake, and logs the driver's figures beside what each
// graph needs, so that a GPU run (scripts/gpu-check.sh) shows what the real
// driver does.

const (
	mib          = 1 << 20
	invalidValue = cudadrv.Result(1) // CUDA_ERROR_INVALID_VALUE
)

// fakeChunk is the fake driver's graph chunk (FAKECUDA_GRAPH_CHUNK, 32 MiB
// by default, the H200's).
func fakeChunk(t *testing.T) int64 {
	t.Helper()
	chunk := int64(32 * mib)
	if v := os.Getenv("FAKECUDA_GRAPH_CHUNK"); v != "" {
		_, err := fmt.Sscan(v, &chunk)
		require.NoError(t, err)
	}
	return chunk
}

// graphKit captures, instantiates and launches graphs on device 0 for one
// test, and destroys, when the test ends, the graph execs and graphs it
// made that the test did not destroy.
type graphKit struct {
	t      *testing.T
	ctx    cudadrv.Context
	fake   bool                    // the fake driver, under its own name: its figures are exact
	base   cudadrv.GraphAttributes // the figures when the test began, trimmed
	chunk  int64                   // the device's graph chunk, as GraphChunk learns it
	graphs map[uintptr]bool
	execs  map[uintptr]bool
}

// newGraphKit retains device 0's primary context, or skips where the
// driver has no graph memory, trims the device's graph memory, so that the
// test starts from what no graph holds, learns the graph chunk
// (GraphChunk, the fake's exactly) and reads the figures then (k.base); it
// returns a stream of the device too, destroyed when the test ends.
func newGraphKit(t *testing.T) (*graphKit, uintptr) {
	t.Helper()
	ctx := primary(t, 0)
	if err := cudadrv.GraphMem(); err != nil {
		t.Skip(err)
	}
	if ok, r := cudadrv.PoolsSupported(0); r != cudadrv.Success || !ok {
		t.Skip("no memory pools, so no graph memory nodes (CUDA Programming Guide, Graph Memory Nodes)")
	}
	name, _, r := cudadrv.DeviceInfo(0)
	require.Equal(t, cudadrv.Success, r)
	k := &graphKit{t: t, ctx: ctx, fake: strings.HasPrefix(name, "memtrack fakecuda"),
		graphs: map[uintptr]bool{}, execs: map[uintptr]bool{}}
	t.Cleanup(func() {
		for e := range k.execs {
			assert.Equal(t, cudadrv.Success, cudatest.GraphExecDestroy(e))
		}
		for g := range k.graphs {
			assert.Equal(t, cudadrv.Success, cudatest.GraphDestroy(g))
		}
	})
	require.Equal(t, cudadrv.Call{}, cudadrv.GraphTrim(ctx))
	p, c := cudadrv.GraphChunk(ctx)
	require.Equal(t, cudadrv.Call{}, c)
	require.True(t, p.Ran, "the device holds no graph memory once trimmed: %+v", p.Before)
	require.Positive(t, p.Chunk, "the probe's reservation")
	k.chunk = p.Chunk
	if k.fake {
		require.Equal(t, fakeChunk(t), k.chunk, "the fake's chunk (FAKECUDA_GRAPH_CHUNK)")
	}
	k.base = k.figures("before")
	return k, newStream(t, ctx)
}

// need is what a graph whose allocations peak at bytes live at once
// reserves: their bytes rounded up to the chunk once (an H200:
// driver-costs-and-graph-memory.txt).
func (k *graphKit) need(bytes int64) int64 { return (bytes + k.chunk - 1) / k.chunk * k.chunk }

// in runs f on a locked thread whose current context is the device's.
func (k *graphKit) in(f func()) { onThread(k.t, k.ctx, f) }

// capture records, on stream s in relaxed mode, what f enqueues on it, and
// returns the graph.
func (k *graphKit) capture(s uintptr, f func()) uintptr {
	k.t.Helper()
	var g uintptr
	k.in(func() {
		require.Equal(k.t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureRelaxed))
		f()
		var r cudadrv.Result
		g, r = cudatest.EndCaptureGraph(s)
		require.Equal(k.t, cudadrv.Success, r)
	})
	k.graphs[g] = true
	return g
}

// alloc is cuMemAllocAsync on s, which captures it as an allocation node:
// the address is returned at once.
func (k *graphKit) alloc(s uintptr, size int64) uintptr {
	k.t.Helper()
	p, r := cudatest.AllocAsync(uintptr(k.ctx), size, s)
	require.Equal(k.t, cudadrv.Success, r)
	require.NotZero(k.t, p)
	return p
}

// free is cuMemFreeAsync of p on s: a free node where s captures.
func (k *graphKit) free(p, s uintptr) cudadrv.Result {
	return cudatest.FreeAsync(uintptr(k.ctx), p, s, 0)
}

// allocGraph captures on s a graph that allocates size bytes and, where
// freed, frees them; it returns the graph and the allocation's address.
func (k *graphKit) allocGraph(s uintptr, size int64, freed bool) (graph, ptr uintptr) {
	k.t.Helper()
	graph = k.capture(s, func() {
		ptr = k.alloc(s, size)
		if freed {
			require.Equal(k.t, cudadrv.Success, k.free(ptr, s))
		}
	})
	return graph, ptr
}

// launched captures on s a graph that allocates size bytes and, where
// freed, frees them, instantiates it, launches it on s and waits for the
// stream; it returns the graph exec and the allocation's address.
func (k *graphKit) launched(s uintptr, size int64, freed bool) (exec, ptr uintptr) {
	k.t.Helper()
	g, ptr := k.allocGraph(s, size, freed)
	exec = k.exec(g)
	require.Equal(k.t, cudadrv.Success, k.launch(exec, s))
	k.sync(s)
	return exec, ptr
}

// instantiate makes a graph exec of graph.
func (k *graphKit) instantiate(graph uintptr, autoFree bool) (uintptr, cudadrv.Result) {
	var e uintptr
	var r cudadrv.Result
	k.in(func() { e, r = cudatest.GraphInstantiate(graph, autoFree) })
	if r == cudadrv.Success {
		k.execs[e] = true
	}
	return e, r
}

// exec instantiates graph, which must succeed.
func (k *graphKit) exec(graph uintptr) uintptr {
	k.t.Helper()
	e, r := k.instantiate(graph, false)
	require.Equal(k.t, cudadrv.Success, r)
	return e
}

func (k *graphKit) destroyExec(e uintptr) {
	k.t.Helper()
	delete(k.execs, e)
	require.Equal(k.t, cudadrv.Success, cudatest.GraphExecDestroy(e))
}

func (k *graphKit) destroyGraph(g uintptr) {
	k.t.Helper()
	delete(k.graphs, g)
	require.Equal(k.t, cudadrv.Success, cudatest.GraphDestroy(g))
}

func (k *graphKit) launch(e, s uintptr) cudadrv.Result {
	var r cudadrv.Result
	k.in(func() { r = cudatest.GraphLaunch(e, s) })
	return r
}

func (k *graphKit) upload(e, s uintptr) cudadrv.Result {
	var r cudadrv.Result
	k.in(func() { r = cudatest.GraphUpload(e, s) })
	return r
}

func (k *graphKit) sync(s uintptr) {
	k.t.Helper()
	k.in(func() { require.Equal(k.t, cudadrv.Success, cudatest.StreamSynchronize(s)) })
}

func (k *graphKit) trim() {
	k.t.Helper()
	require.Equal(k.t, cudadrv.Call{}, cudadrv.GraphTrim(k.ctx))
}

// figures reads the device's graph memory figures and logs them, with
// what the graphs in play need.
func (k *graphKit) figures(when string) cudadrv.GraphAttributes {
	k.t.Helper()
	g, c := cudadrv.GraphGet(k.ctx)
	require.Equal(k.t, cudadrv.Call{}, c)
	k.t.Logf("%-58s used %6.1f MiB (peak %6.1f), reserved %6.1f MiB (peak %6.1f)", when+":",
		float64(g.GraphUsed)/mib, float64(g.PeakGraphUsed)/mib, float64(g.GraphReserved)/mib, float64(g.PeakGraphReserved)/mib)
	return g
}

// memFree is cuMemGetInfo's free memory of the device.
func (k *graphKit) memFree() int64 {
	k.t.Helper()
	free, _, c := cudadrv.MemInfo(k.ctx)
	require.Equal(k.t, cudadrv.Call{}, c)
	return free
}

// exact checks, on the fake driver, that got is what the fake's model
// gives; a GPU's driver sets the figure within the bounds checked apart.
func (k *graphKit) exact(want, got int64, what string) {
	k.t.Helper()
	if k.fake {
		assert.Equal(k.t, want, got, "%s (the fake's chunks of %d MiB)", what, k.chunk/mib)
	}
}

// Creating a graph exec reserves no memory; the first launch, or
// cuGraphUpload, maps what the graph needs, and a later launch on the same
// stream maps nothing more (CUDA Programming Guide, Graph Memory Nodes:
// First Launch / cudaGraphUpload; NVIDIA's graphMemoryFootprint sample).
func TestGraphMemoryAtFirstLaunch(t *testing.T) {
	for _, first := range []string{"launch", "upload"} {
		t.Run(first, func(t *testing.T) {
			k, s := newGraphKit(t)
			base, free0 := k.base, k.memFree()
			g, _ := k.allocGraph(s, 8*mib, true)
			e := k.exec(g)
			assert.Equal(t, base, k.figures("instantiated (the graph needs 8 MiB)"), "instantiation reserves no memory")
			k.exact(free0, k.memFree(), "cuMemGetInfo's free memory after instantiation")
			if first == "upload" {
				require.Equal(t, cudadrv.Success, k.upload(e, s))
			} else {
				require.Equal(t, cudadrv.Success, k.launch(e, s))
			}
			k.sync(s)
			f1 := k.figures("after the first " + first)
			assert.GreaterOrEqual(t, f1.GraphReserved-base.GraphReserved, int64(8*mib), "the first %s reserves what the graph needs", first)
			assert.GreaterOrEqual(t, f1.GraphUsed-base.GraphUsed, int64(8*mib), "and maps it")
			k.exact(base.GraphReserved+k.need(8*mib), f1.GraphReserved, "reserved")
			k.exact(base.GraphUsed+k.need(8*mib), f1.GraphUsed, "used")
			k.exact(free0-k.need(8*mib), k.memFree(), "cuMemGetInfo's free memory")
			require.Equal(t, cudadrv.Success, k.launch(e, s))
			require.Equal(t, cudadrv.Success, k.launch(e, s))
			k.sync(s)
			f2 := k.figures("after two more launches on the same stream")
			assert.Equal(t, f1.GraphReserved, f2.GraphReserved, "a launch on the same stream reuses the memory")
			assert.Equal(t, f1.GraphUsed, f2.GraphUsed)
			k.trim()
			assert.Equal(t, base.GraphReserved, k.figures("trimmed").GraphReserved, "nothing executes: a trim returns it all")
		})
	}
}

// Graphs launched one after another on one stream share their memory: two
// graphs of 8 and 12 MiB reserve what the larger needs, less than both
// (Physical Memory Management and Sharing: "Since the graphs in the same
// stream never run concurrently, CUDA can and should use the same physical
// memory"; an H200 reserved 32 MiB for them, one chunk).
func TestGraphMemoryReusedOnOneStream(t *testing.T) {
	k, s := newGraphKit(t)
	base := k.base
	ga, _ := k.allocGraph(s, 8*mib, true)
	gb, _ := k.allocGraph(s, 12*mib, true)
	a, b := k.exec(ga), k.exec(gb)
	require.Equal(t, cudadrv.Success, k.launch(a, s))
	require.Equal(t, cudadrv.Success, k.launch(b, s))
	require.Equal(t, cudadrv.Success, k.launch(a, s))
	k.sync(s)
	f := k.figures("graphs of 8 and 12 MiB, one after the other on one stream")
	grown := f.GraphReserved - base.GraphReserved
	assert.GreaterOrEqual(t, grown, int64(12*mib), "the larger graph's bytes")
	assert.Less(t, grown, k.need(8*mib)+k.need(12*mib), "less than both: the memory is shared")
	k.exact(k.need(12*mib), grown, "reserved")
	k.exact(base.GraphUsed+k.need(12*mib), f.GraphUsed, "used")
}

// Graphs that may run at once need memory of their own: with a graph
// scheduled on a stream held back by a host function, a graph on another
// stream takes its own (Performance Considerations: "concurrent graphs
// require distinct memory"). A trim then returns what the finished graph
// holds, and keeps what the scheduled one needs (cuDeviceGraphMemTrim:
// "Blocks which are not in use by a graph that is either currently
// executing or scheduled to execute are freed").
func TestGraphMemoryOfConcurrentStreams(t *testing.T) {
	k, s1 := newGraphKit(t)
	s2, base := newStream(t, k.ctx), k.base
	ga, _ := k.allocGraph(s1, 8*mib, true)
	gb, _ := k.allocGraph(s2, 12*mib, true)
	a, b := k.exec(ga), k.exec(gb)
	released := false
	release := func() {
		if !released {
			cudatest.ReleaseStreams()
			released = true
		}
	}
	t.Cleanup(release)
	k.in(func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(s1)) })
	require.Equal(t, cudadrv.Success, k.launch(a, s1))
	require.Equal(t, cudadrv.Success, k.launch(b, s2))
	k.sync(s2)
	f := k.figures("8 MiB scheduled on a held stream, 12 MiB run on another")
	assert.GreaterOrEqual(t, f.GraphReserved-base.GraphReserved, k.need(8*mib)+k.need(12*mib), "each stream's graph has memory of its own")
	k.exact(base.GraphReserved+k.need(8*mib)+k.need(12*mib), f.GraphReserved, "reserved")
	k.trim()
	ft := k.figures("trimmed while the 8 MiB graph is scheduled")
	assert.GreaterOrEqual(t, ft.GraphReserved-base.GraphReserved, int64(8*mib), "the scheduled graph keeps its memory")
	assert.Less(t, ft.GraphReserved, f.GraphReserved, "the finished graph's memory is returned")
	k.exact(base.GraphReserved+k.need(8*mib), ft.GraphReserved, "reserved")
	release()
	k.sync(s1)
	k.trim()
	assert.Equal(t, base.GraphReserved, k.figures("both finished, trimmed").GraphReserved)
}

// A graph allocation the graph does not free outlives the launch at its
// fixed address; its memory stays through a trim, and freeing it does not
// shrink the figures ("Freeing the allocations does not shrink the
// footprint", graphMemoryFootprint sample); a trim then returns it, though
// the graph exec still exists (Physical Memory Footprint).
func TestGraphMemoryOfLiveAllocations(t *testing.T) {
	k, s := newGraphKit(t)
	base := k.base
	_, p := k.launched(s, 8*mib, false)
	f1 := k.figures("a graph's 8 MiB allocation, live after the launch")
	k.exact(base.GraphReserved+k.need(8*mib), f1.GraphReserved, "reserved: its chunk")
	k.trim()
	f2 := k.figures("trimmed")
	assert.Equal(t, f1.GraphReserved, f2.GraphReserved, "a live allocation keeps its memory through a trim")
	k.in(func() { require.Equal(t, cudadrv.Success, cudatest.MemFree(p), "cuMemFree of the graph allocation") })
	f3 := k.figures("freed with cuMemFree")
	assert.Equal(t, f1.GraphReserved, f3.GraphReserved, "freeing does not shrink the footprint")
	assert.Equal(t, f1.GraphUsed, f3.GraphUsed, "nor what is mapped")
	k.trim()
	f4 := k.figures("trimmed, the graph exec still there")
	assert.Equal(t, base.GraphReserved, f4.GraphReserved)
	assert.Equal(t, base.GraphUsed, f4.GraphUsed)
}

// "physical pages cannot be reused if they are bound to ... a graph
// allocation which remains unfreed" (Programming Guide, Graph Memory
// Nodes: Physical Memory Management and Sharing): a graph launched on the
// stream after one whose allocation outlives its launch does not reuse
// that allocation's memory while it is live, and does once it is freed.
func TestGraphMemoryOfUnfreedNotReused(t *testing.T) {
	for _, freed := range []bool{false, true} {
		t.Run(map[bool]string{false: "live", true: "freed"}[freed], func(t *testing.T) {
			k, s := newGraphKit(t)
			base := k.base
			_, p := k.launched(s, 8*mib, false)
			if freed {
				require.Equal(t, cudadrv.Success, k.free(p, s))
				k.sync(s)
			}
			k.launched(s, 12*mib, true)
			f := k.figures(fmt.Sprintf("8 MiB outliving (freed: %v), then 12 MiB on the stream", freed))
			grown := f.GraphReserved - base.GraphReserved
			if freed {
				assert.GreaterOrEqual(t, grown, int64(12*mib))
				k.exact(k.need(12*mib), grown, "reserved: the 8 MiB's chunk reused")
			} else {
				assert.GreaterOrEqual(t, grown, k.need(8*mib)+int64(12*mib), "the live allocation's chunk is not reused")
				k.exact(k.need(8*mib)+k.need(12*mib), grown, "reserved")
				require.Equal(t, cudadrv.Success, k.free(p, s))
				k.sync(s)
			}
			k.trim()
		})
	}
}

// An allocation node's address is fixed across launches and
// instantiations (cuGraphAddMemAllocNode); a graph exec whose allocation of
// an earlier launch is live cannot be launched again (cuGraphLaunch:
// CUDA_ERROR_INVALID_VALUE), unless instantiated with AUTO_FREE_ON_LAUNCH;
// another graph's free node, cuMemFreeAsync and cuMemFree free it; and
// destroying the graph and its exec frees none of it.
func TestGraphAllocationOutlivesLaunch(t *testing.T) {
	k, s := newGraphKit(t)
	base := k.base
	g, p := k.allocGraph(s, 8*mib, false)
	e := k.exec(g)
	for launch := range 2 {
		require.Equal(t, cudadrv.Success, k.launch(e, s), "launch %d", launch)
		// The allocation is live at p for the stream's work after the launch.
		k.in(func() { require.Equal(t, cudadrv.Success, cudatest.MemsetD8Async(p, 7, 8*mib, s)) })
		assert.Equal(t, invalidValue, k.launch(e, s), "a launch while its allocation is live")
		require.Equal(t, cudadrv.Success, k.free(p, s), "cuMemFreeAsync at the same address, launch %d", launch)
	}
	k.sync(s)

	// Another graph's free node ends it.
	f := k.capture(s, func() { require.Equal(t, cudadrv.Success, k.free(p, s)) })
	fe := k.exec(f)
	require.Equal(t, cudadrv.Success, k.launch(e, s))
	require.Equal(t, cudadrv.Success, k.launch(fe, s))
	require.Equal(t, cudadrv.Success, k.launch(e, s), "freed by the other graph")

	// A new instantiation allocates at the same address.
	k.destroyExec(e)
	e = k.exec(g)
	require.Equal(t, cudadrv.Success, k.launch(fe, s), "the first instantiation's allocation, freed")
	require.Equal(t, cudadrv.Success, k.launch(e, s))
	k.sync(s)
	k.figures("live, its graph and graph exec about to be destroyed")
	k.destroyExec(e)
	k.destroyGraph(g)
	k.trim()
	live := k.figures("graph and graph exec destroyed, trimmed")
	assert.GreaterOrEqual(t, live.GraphReserved-base.GraphReserved, int64(8*mib), "destruction freed nothing")
	k.exact(base.GraphReserved+k.need(8*mib), live.GraphReserved, "reserved")
	require.Equal(t, cudadrv.Success, k.free(p, s), "still live after its graph was destroyed")
	k.sync(s)
	k.trim()
	assert.Equal(t, base.GraphReserved, k.figures("freed, trimmed").GraphReserved)

	t.Run("auto free on launch", func(t *testing.T) {
		k, _ := newGraphKit(t)
		g, p := k.allocGraph(s, 8*mib, false)
		e, r := k.instantiate(g, true)
		require.Equal(t, cudadrv.Success, r)
		for range 3 {
			require.Equal(t, cudadrv.Success, k.launch(e, s), "each launch frees the last one's allocation first")
		}
		k.sync(s)
		f := k.figures("three launches with AUTO_FREE_ON_LAUNCH")
		k.exact(base.GraphReserved+k.need(8*mib), f.GraphReserved, "reserved: one allocation live")
		require.Equal(t, cudadrv.Success, k.free(p, s))
		k.sync(s)
	})
}

// A graph with memory nodes may have one graph exec at a time: a second
// instantiation is refused until the first is destroyed
// (cuGraphInstantiateWithFlags: "will result in an error", which the
// reference does not name; an H200 answered CUDA_ERROR_NOT_SUPPORTED); a
// graph without them may have several.
func TestGraphOneInstantiation(t *testing.T) {
	k, s := newGraphKit(t)
	g, _ := k.allocGraph(s, 2*mib, true)
	e := k.exec(g)
	_, r := k.instantiate(g, false)
	assert.NotEqual(t, cudadrv.Success, r, "a second instantiation")
	t.Logf("a second instantiation of a graph with memory nodes: CUresult %d (%s)", r, cudadrv.Name(r))
	if k.fake {
		assert.Equal(t, cudadrv.NotSupported, r, "the H200's answer")
	}
	k.destroyExec(e)
	k.exec(g)

	empty := k.capture(s, func() {})
	k.exec(empty)
	k.exec(empty)
}

// The high-water marks accept 0 alone (cuDeviceSetGraphMemAttribute: "High
// watermark can only be reset to zero"), which resets them; to 0 or to the
// current figure, the reference does not say: the fake offers both
// (FAKECUDA_GRAPH_HIGH_RESET), and the test logs which the driver follows.
func TestGraphHighsReset(t *testing.T) {
	k, s := newGraphKit(t)
	k.launched(s, 12*mib, true)
	f := k.figures("a 12 MiB graph launched")
	require.Positive(t, f.GraphUsed)
	assert.GreaterOrEqual(t, f.PeakGraphUsed, f.GraphUsed)
	assert.GreaterOrEqual(t, f.PeakGraphReserved, f.GraphReserved)
	for _, attr := range []cudatest.GraphMemAttr{cudatest.GraphMemUsedHigh, cudatest.GraphMemFootprintHigh} {
		r := cudatest.SetGraphMemAttribute(0, attr, 1)
		assert.NotEqual(t, cudadrv.Success, r, "a high-water mark set to 1")
		if k.fake {
			assert.Equal(t, invalidValue, r)
		}
	}
	assert.Equal(t, f, k.figures("after refused sets"), "a refused set changes nothing")
	require.Equal(t, cudadrv.Call{}, cudadrv.GraphResetHighs(k.ctx))
	h := k.figures("highs reset")
	reading := "current"
	if h.PeakGraphUsed == 0 {
		reading = "zero"
	}
	t.Logf("graph high reading: %s (cuDeviceSetGraphMemAttribute of 0 sets a high-water mark to %s)", reading,
		map[string]string{"current": "the current figure", "zero": "0"}[reading])
	want := map[string]cudadrv.GraphAttributes{
		"current": {GraphUsed: f.GraphUsed, PeakGraphUsed: f.GraphUsed, GraphReserved: f.GraphReserved, PeakGraphReserved: f.GraphReserved},
		"zero":    {GraphUsed: f.GraphUsed, GraphReserved: f.GraphReserved},
	}[reading]
	assert.Equal(t, want, h)
	if k.fake {
		assert.Equal(t, map[bool]string{false: "current", true: "zero"}[os.Getenv("FAKECUDA_GRAPH_HIGH_RESET") == "zero"], reading,
			"the fake's reading (FAKECUDA_GRAPH_HIGH_RESET)")
	}
	k.trim()
	after := k.figures("trimmed")
	assert.Equal(t, h.PeakGraphReserved, after.PeakGraphReserved, "a trim leaves the high-water marks")
}

// Destroying the graph exec frees nothing of the reservation (Physical
// Memory Footprint: destroying a graph "will not immediately return
// physical memory to the OS"), and its memory stays mapped, counted in
// USED_MEM_CURRENT, until a trim: the documentation does not say, and an
// H200 kept it (32 MiB used before cuGraphExecDestroy, 32 after), as the
// fake does. The test logs which the driver follows.
func TestGraphExecDestroyReading(t *testing.T) {
	k, s := newGraphKit(t)
	base := k.base
	e, _ := k.launched(s, 8*mib, true)
	f1 := k.figures("an 8 MiB graph launched")
	k.destroyExec(e)
	f2 := k.figures("its graph exec destroyed")
	assert.Equal(t, f1.GraphReserved, f2.GraphReserved, "destruction returns nothing to the device")
	reading := "keep"
	if f2.GraphUsed < f1.GraphUsed {
		reading = "unmap"
	}
	t.Logf("graph exec-destroy reading: %s (used %d MiB before cuGraphExecDestroy, %d after)", reading, f1.GraphUsed/mib, f2.GraphUsed/mib)
	if k.fake {
		assert.Equal(t, "keep", reading, "the fake's, the H200's")
		k.exact(f1.GraphUsed, f2.GraphUsed, "used")
	}
	k.trim()
	tr := k.figures("trimmed")
	assert.Equal(t, base.GraphReserved, tr.GraphReserved, "a trim returns it")
	assert.Equal(t, base.GraphUsed, tr.GraphUsed)
}

// A graph's memory is its peak footprint rounded up to the chunk once, not
// each allocation node rounded up to the allocation granularity
// (cuMemGetAllocationGranularity), which the documents leave open: an
// H200 reserved 32 MiB, its chunk, for 100 allocation nodes of 4 KiB live
// at once, where a granule of 2 MiB each would have made 200 MiB. The test
// logs which the driver follows: "peak" (the peak's bytes in whole
// chunks), "node" (each node in whole granules), or "other"; on any driver
// the reservation lies between the bytes asked for and a granule each, or
// a chunk where that is more.
func TestGraphRoundReading(t *testing.T) {
	k, s := newGraphKit(t)
	g, _, r := cudadrv.Granularity(0)
	require.Equal(t, cudadrv.Success, r)
	require.Positive(t, g)

	const n, size = 100, 4 << 10
	graph := k.capture(s, func() {
		var ptrs []uintptr
		for range n {
			ptrs = append(ptrs, k.alloc(s, size))
		}
		for _, p := range ptrs {
			require.Equal(t, cudadrv.Success, k.free(p, s))
		}
	})
	require.Equal(t, cudadrv.Success, k.launch(k.exec(graph), s))
	k.sync(s)
	f := k.figures("100 allocation nodes of 4 KiB launched")
	grown := f.GraphReserved - k.base.GraphReserved
	peak, perNode := k.need(n*size), n*g
	assert.GreaterOrEqual(t, grown, int64(n*size), "at least their bytes")
	assert.LessOrEqual(t, grown, max(perNode, peak), "at most a granule each, or a chunk")
	reading := "other"
	switch grown {
	case peak:
		reading = "peak"
	case perNode:
		reading = "node"
	}
	t.Logf("graph round reading: %s (100 allocation nodes of 4 KiB reserved %d KiB; the chunk is %d KiB, the allocation granularity %d KiB)",
		reading, grown>>10, k.chunk>>10, g>>10)
	if k.fake {
		assert.Equal(t, "peak", reading, "the fake's, the H200's")
	}
	k.trim()
}

// Graph memory is device memory of the process: cuMemGetInfo and NVML's
// figure of the process count it, and no memory pool's attributes do
// (Physical Memory Footprint: "cudaDeviceGraphMemTrim operates on a
// different pool from cudaMemPoolTrimTo()").
func TestGraphMemoryIsDeviceMemory(t *testing.T) {
	k, s := newGraphKit(t)
	pool, r := cudadrv.MemPool(0)
	require.Equal(t, cudadrv.Success, r)
	pool0, r := cudadrv.PoolGet(pool)
	require.Equal(t, cudadrv.Success, r)
	lib, nvmlErr := nvml.Open()
	if nvmlErr == nil {
		t.Cleanup(func() { lib.Close() })
	}
	processUsed := func() (uint64, bool) {
		if nvmlErr != nil {
			return 0, false
		}
		_, u, r := cudadrv.DeviceInfo(0)
		require.Equal(t, cudadrv.Success, r)
		ps, err := lib.Processes(fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
		if err != nil {
			return 0, false
		}
		for _, p := range ps {
			if p.PID == os.Getpid() && p.UsedKnown {
				return p.Used, true
			}
		}
		return 0, false
	}
	base, free0 := k.figures("before"), k.memFree()
	proc0, known0 := processUsed()
	k.launched(s, 16*mib, true)
	f := k.figures("a 16 MiB graph launched")
	grown := f.GraphReserved - base.GraphReserved
	free1 := k.memFree()
	proc1, known1 := processUsed()
	t.Logf("reserved +%d MiB; cuMemGetInfo free -%d MiB; NVML's figure of this process %+d MiB (known: %v)",
		grown/mib, (free0-free1)/mib, (int64(proc1)-int64(proc0))/mib, known0 && known1)
	assert.GreaterOrEqual(t, free0-free1, grown, "cuMemGetInfo counts graph memory")
	k.exact(grown, free0-free1, "cuMemGetInfo's drop")
	if known0 && known1 {
		assert.GreaterOrEqual(t, int64(proc1)-int64(proc0), grown, "NVML counts it in the process's memory")
		k.exact(grown, int64(proc1)-int64(proc0), "NVML's growth")
	} else if k.fake {
		t.Errorf("the fake NVML gives no figure of this process: %v", nvmlErr)
	}
	pool1, r := cudadrv.PoolGet(pool)
	require.Equal(t, cudadrv.Success, r)
	assert.Equal(t, pool0, pool1, "the memory pool's attributes leave graph memory out")
	require.Equal(t, cudadrv.Success, cudadrv.PoolTrimTo(pool, 0))
	assert.Equal(t, f.GraphReserved, k.figures("the pool trimmed").GraphReserved, "a pool's trim leaves graph memory")
}

// A capture has an ID unique over the process's lifetime, which
// cuStreamGetCaptureInfo gives while it is active; a stream that waits for
// an event recorded in the capture joins it and shares the ID (CUDA
// Programming Guide, Cross-stream Dependencies and Events); AllocAsync and
// FreeAsync, which refuse a capturing stream, report its ID from the same
// driver call; an invalid operation invalidates the capture, which then
// ends with no graph.
func TestGraphCaptureID(t *testing.T) {
	k, s1 := newGraphKit(t)
	s2 := newStream(t, k.ctx)
	info := func(s uintptr) cudadrv.Capture {
		c, call := cudadrv.CaptureInfo(k.ctx, s)
		require.Equal(t, cudadrv.Call{}, call)
		return c
	}
	assert.Equal(t, cudadrv.Capture{Status: cudadrv.CaptureNone}, info(s1))
	var ids []uint64
	for range 2 {
		k.in(func() { require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s1, cudatest.CaptureRelaxed)) })
		c := info(s1)
		require.Equal(t, cudadrv.CaptureOngoing, c.Status)
		assert.NotZero(t, c.ID)
		ids = append(ids, c.ID)
		assert.Equal(t, cudadrv.Capture{Status: cudadrv.CaptureNone}, info(s2), "another stream")
		a := cudadrv.AllocAsync(k.ctx, mib, s1)
		assert.True(t, a.Capturing)
		assert.Equal(t, c.ID, a.CaptureID, "AllocAsync's capture check gives the ID")
		assert.Zero(t, a.Ptr, "and allocates nothing")

		// Fork s2 into the capture, and join it back.
		k.in(func() { require.Equal(t, cudadrv.Success, cudatest.StreamWait(s2, s1)) })
		assert.Equal(t, c, info(s2), "a stream that waits for a captured event joins the capture")
		f := cudadrv.FreeAsync(k.ctx, 0, s2, cudadrv.Event{})
		assert.True(t, f.Capturing)
		assert.Equal(t, c.ID, f.CaptureID)
		if k.fake { // a real driver may invalidate the capture
			k.in(func() {
				_, r := cudatest.EndCaptureGraph(s2)
				assert.Equal(t, cudadrv.Result(903), r, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: not the origin stream")
			})
		}
		k.in(func() { require.Equal(t, cudadrv.Success, cudatest.StreamWait(s1, s2)) })
		var g uintptr
		k.in(func() {
			var r cudadrv.Result
			g, r = cudatest.EndCaptureGraph(s1)
			require.Equal(t, cudadrv.Success, r)
		})
		k.graphs[g] = true
		assert.Equal(t, cudadrv.Capture{Status: cudadrv.CaptureNone}, info(s1))
		assert.Equal(t, cudadrv.Capture{Status: cudadrv.CaptureNone}, info(s2), "the joined stream leaves with the origin")
	}
	assert.NotEqual(t, ids[0], ids[1], "each capture has an ID of its own")
	t.Logf("capture IDs: %v", ids)

	k.in(func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s1, cudatest.CaptureRelaxed))
		assert.NotEqual(t, cudadrv.Success, cudatest.StreamQuery(s1), "querying a capturing stream is invalid")
	})
	assert.Equal(t, cudadrv.Capture{Status: cudadrv.CaptureInvalidated}, info(s1), "and invalidates the capture: no ID")
	k.in(func() {
		g, r := cudatest.EndCaptureGraph(s1)
		assert.Equal(t, cudadrv.Result(901), r, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
		assert.Zero(t, g)
	})
}

// AllocAsyncIn allocates on a capturing stream as the modes say, in the
// one call that asks the stream's capture: an allocation node whose address
// the driver gives at once, of the capture the call reports; FreeGraph adds
// a free node there, and frees a launch's allocation that outlived it on a
// stream that is not capturing, recording no event; an invalidated capture
// gets nothing from either.
func TestGraphAllocAsyncIn(t *testing.T) {
	k, s := newGraphKit(t)
	other := newStream(t, k.ctx)
	none := cudadrv.AllocAsyncIn(k.ctx, mib, s, cudadrv.OnlyCapture)
	assert.Equal(t, cudadrv.StreamCall{StreamCtx: none.StreamCtx}, none, "OnlyCapture allocates nothing on a stream that is not capturing")
	assert.Equal(t, k.ctx, none.StreamCtx, "and reports the stream's context")

	var node, outliving uintptr
	var g uintptr
	k.in(func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureRelaxed))
		c, call := cudadrv.CaptureInfo(k.ctx, s)
		require.Equal(t, cudadrv.Call{}, call)
		refused := cudadrv.AllocAsyncIn(k.ctx, mib, s, cudadrv.RefuseCapture)
		assert.True(t, refused.Capturing)
		assert.Zero(t, refused.Ptr, "RefuseCapture adds no node")
		for _, mode := range []cudadrv.CaptureAlloc{cudadrv.AllowCapture, cudadrv.OnlyCapture} {
			a := cudadrv.AllocAsyncIn(k.ctx, 2*mib, s, mode)
			require.Equal(t, cudadrv.Call{}, a.Call)
			assert.True(t, a.Capturing)
			assert.Equal(t, cudadrv.CaptureOngoing, a.CaptureStatus)
			assert.Equal(t, c.ID, a.CaptureID)
			assert.NotZero(t, a.Ptr, "the node's address, at once")
			if node == 0 {
				node = a.Ptr
			} else {
				outliving = a.Ptr
			}
		}
		f := cudadrv.FreeGraph(k.ctx, node, s)
		require.Equal(t, cudadrv.Call{}, f.Call)
		assert.Equal(t, c.ID, f.CaptureID)
		assert.True(t, f.Event.IsZero(), "no event")
		var r cudadrv.Result
		g, r = cudatest.EndCaptureGraph(s)
		require.Equal(t, cudadrv.Success, r)
	})
	k.graphs[g] = true
	n, r := cudatest.GraphNodes(g)
	require.Equal(t, cudadrv.Success, r)
	assert.Equal(t, 3, n, "two allocation nodes and a free node")
	early := cudadrv.FreeGraph(k.ctx, outliving, s).Op
	assert.NotEqual(t, cudadrv.Success, early, "not live before a launch")
	if k.fake {
		assert.Equal(t, invalidValue, early)
	}

	e := k.exec(g)
	require.Equal(t, cudadrv.Success, k.launch(e, s))
	f := cudadrv.FreeGraph(k.ctx, outliving, s)
	require.Equal(t, cudadrv.Call{}, f.Call, "the launch's allocation, outliving it")
	assert.False(t, f.Capturing)
	assert.Zero(t, f.CaptureID)
	k.sync(s)
	require.Equal(t, cudadrv.Success, k.launch(e, s), "freed: the graph may be launched again")
	require.Equal(t, cudadrv.Call{}, cudadrv.FreeGraph(k.ctx, outliving, s).Call)
	k.sync(s)

	k.in(func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(other, cudatest.CaptureRelaxed))
		assert.NotEqual(t, cudadrv.Success, cudatest.StreamQuery(other), "an invalid operation invalidates the capture")
	})
	a := cudadrv.AllocAsyncIn(k.ctx, mib, other, cudadrv.AllowCapture)
	assert.Equal(t, cudadrv.CaptureInvalidated, a.CaptureStatus)
	assert.Zero(t, a.Ptr, "an invalidated capture gets nothing")
	assert.Equal(t, cudadrv.Success, a.Op)
	fr := cudadrv.FreeGraph(k.ctx, outliving, other)
	assert.Equal(t, cudadrv.CaptureInvalidated, fr.CaptureStatus)
	assert.Equal(t, cudadrv.Success, fr.Op, "nothing ran")
	k.in(func() {
		_, r := cudatest.EndCaptureGraph(other)
		assert.Equal(t, cudadrv.Result(901), r, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
	})
}

// A free node the driver refuses in a capture leaves the capture as it
// was: an H200 refused a second free node of one allocation in one graph
// (cuGraphAddMemFreeNode) with CUDA_ERROR_INVALID_VALUE, and the capture
// stayed active with its ID, took a later allocation node and ended with
// its graph. FreeGraph reports the refusal with the ID of the capture it
// read in the same call, and no invalidation. A capture that an invalid
// operation did invalidate (a query of its stream) refuses every later use
// of its stream with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED until it ends
// ("further use of any streams which are being captured ... is invalid and
// will return an error, until stream capture is ended", CUDA Programming
// Guide, Stream Capture: Invalidation): the driver's own calls, and
// memtrack's, which report the capture invalidated.
func TestGraphRefusedNodeLeavesCapture(t *testing.T) {
	k, s := newGraphKit(t)
	other := newStream(t, k.ctx)
	_, p := k.launched(s, 2*mib, false) // outliving its launch, live
	k.in(func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(other, cudatest.CaptureRelaxed))
		c, call := cudadrv.CaptureInfo(k.ctx, other)
		require.Equal(t, cudadrv.Call{}, call)
		first := cudadrv.FreeGraph(k.ctx, p, other)
		require.Equal(t, cudadrv.Call{}, first.Call, "a free node of another graph's allocation")
		assert.False(t, first.Invalidated)
		second := cudadrv.FreeGraph(k.ctx, p, other)
		assert.Equal(t, invalidValue, second.Op, "a second free node of it in the same graph")
		assert.Equal(t, c.ID, second.CaptureID, "the capture the call read before the node")
		assert.False(t, second.Invalidated, "and left as it was")
		after, call := cudadrv.CaptureInfo(k.ctx, other)
		require.Equal(t, cudadrv.Call{}, call)
		assert.Equal(t, c, after, "active, with its ID")
		third := cudadrv.AllocAsyncIn(k.ctx, mib, other, cudadrv.AllowCapture)
		require.Equal(t, cudadrv.Call{}, third.Call)
		assert.Equal(t, c.ID, third.CaptureID)
		assert.NotZero(t, third.Ptr, "a later allocation node is added")
		g, r := cudatest.EndCaptureGraph(other)
		require.Equal(t, cudadrv.Success, r, "the capture ends with its graph")
		k.graphs[g] = true
		n, r := cudatest.GraphNodes(g)
		require.Equal(t, cudadrv.Success, r)
		assert.Equal(t, 2, n, "the first free node and the allocation node")

		// A capture invalidated by an invalid operation: every use of its
		// stream is refused until it ends.
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(other, cudatest.CaptureRelaxed))
		assert.NotEqual(t, cudadrv.Success, cudatest.StreamQuery(other), "an invalid operation invalidates the capture")
		_, r = cudatest.AllocAsync(uintptr(k.ctx), mib, other)
		assert.Equal(t, cudadrv.Result(901), r, "cuMemAllocAsync in it")
		assert.Equal(t, cudadrv.Result(901), k.free(p, other), "cuMemFreeAsync in it")
		info, call := cudadrv.CaptureInfo(k.ctx, other)
		assert.Equal(t, cudadrv.Call{}, call, "memtrack's reading, whose context step the driver refuses")
		assert.Equal(t, cudadrv.Capture{Status: cudadrv.CaptureInvalidated}, info, "reports the capture invalidated, with no ID")
		a := cudadrv.AllocAsyncIn(k.ctx, mib, other, cudadrv.AllowCapture)
		assert.Equal(t, cudadrv.Call{}, a.Call)
		assert.Equal(t, cudadrv.CaptureInvalidated, a.CaptureStatus, "and allocates nothing")
		assert.Zero(t, a.Ptr)
		_, r = cudatest.EndCaptureGraph(other)
		assert.Equal(t, cudadrv.Result(901), r)
		info, call = cudadrv.CaptureInfo(k.ctx, other)
		assert.Equal(t, cudadrv.Call{}, call, "the capture ended: the stream is usable again")
		assert.Equal(t, cudadrv.Capture{Status: cudadrv.CaptureNone}, info)
	})
	require.Equal(t, cudadrv.Success, k.free(p, s), "the allocation, still live: no free node ran")
	k.sync(s)
}

// A launch whose memory the device has not got fails with
// CUDA_ERROR_OUT_OF_MEMORY and takes nothing; on the fake, whose device
// the test can fill.
func TestGraphLaunchOutOfMemory(t *testing.T) {
	requireFakeDriver(t)
	k, s := newGraphKit(t)
	free0, base := k.memFree(), k.base
	g, _ := k.allocGraph(s, free0/2+mib, true)
	e := k.exec(g)
	p, c := cudadrv.Alloc(k.ctx, free0/2+mib)
	require.Equal(t, cudadrv.Call{}, c)
	free1 := k.memFree() // less the allocation, in whole pages
	assert.Equal(t, cudadrv.OutOfMemory, k.launch(e, s), "the device has not the memory")
	assert.Equal(t, base, k.figures("the launch refused"))
	assert.Equal(t, free1, k.memFree(), "it took nothing")
	require.Equal(t, cudadrv.Call{}, cudadrv.Free(k.ctx, p))
	require.Equal(t, cudadrv.Success, k.launch(e, s))
	k.sync(s)
	k.trim()
}

// The fake driver counts its calls (fakecuda_calls), so that a test can say
// how many driver calls an operation takes: memtrack's stream-ordered pair
// (AllocAsync and FreeAsync, with their context, stream and capture checks
// and the event that learns of the free) against the raw pair, on a thread
// where the stream's context is current.
func TestDriverCallsPerPair(t *testing.T) {
	ctx := primary(t, 0)
	if _, ok := cudatest.DriverCalls("cuInit"); !ok {
		t.Skip("the driver counts no calls: needs the fake driver of testdata/fakecuda")
	}
	if err := cudadrv.MemPools(); err != nil {
		t.Skip(err)
	}
	s := newStream(t, ctx)
	calls := []string{"cuCtxGetCurrent", "cuCtxSetCurrent", "cuStreamGetCtx", "cuStreamGetCaptureInfo", "cuStreamIsCapturing",
		"cuMemAllocAsync", "cuMemFreeAsync", "cuEventCreate", "cuEventRecord", "cuStreamSynchronize"}
	count := func(f func()) map[string]uint64 {
		before := map[string]uint64{}
		for _, c := range calls {
			before[c], _ = cudatest.DriverCalls(c)
		}
		f()
		made := map[string]uint64{}
		for _, c := range calls {
			if n, _ := cudatest.DriverCalls(c); n > before[c] {
				made[c] = n - before[c]
			}
		}
		return made
	}
	var ev cudadrv.Event
	var tracked, raw map[string]uint64
	onThread(t, ctx, func() {
		tracked = count(func() {
			a := cudadrv.AllocAsync(ctx, mib, s)
			require.Equal(t, cudadrv.Call{}, a.Call)
			f := cudadrv.FreeAsync(ctx, a.Ptr, s, cudadrv.Event{})
			require.Equal(t, cudadrv.Call{}, f.Call)
			ev = f.Event
		})
		raw = count(func() {
			p, r := cudatest.AllocAsync(uintptr(ctx), mib, s)
			require.Equal(t, cudadrv.Success, r)
			require.Equal(t, cudadrv.Success, cudatest.FreeAsync(uintptr(ctx), p, s, 0))
		})
		require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s))
	})
	cudadrv.EventDestroy(ev)
	sum := func(m map[string]uint64) (n uint64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	t.Logf("driver calls of memtrack's pair: %d %v; of the raw pair: %d %v", sum(tracked), tracked, sum(raw), raw)
	assert.Equal(t, map[string]uint64{
		"cuCtxGetCurrent": 2, "cuStreamGetCtx": 2, "cuStreamIsCapturing": 2,
		"cuMemAllocAsync": 1, "cuMemFreeAsync": 1, "cuEventCreate": 1, "cuEventRecord": 1,
	}, tracked, "one capture query per call (cuStreamIsCapturing: cuStreamGetCaptureInfo_v2 only where the stream captures)")
	assert.Equal(t, map[string]uint64{"cuCtxGetCurrent": 2, "cuMemAllocAsync": 1, "cuMemFreeAsync": 1}, raw)

	k, _ := newGraphKit(t)
	before, _ := cudatest.DriverCalls("cuDeviceGetGraphMemAttribute")
	k.figures("read")
	after, _ := cudatest.DriverCalls("cuDeviceGetGraphMemAttribute")
	assert.Equal(t, uint64(4), after-before, "GraphGet reads the four figures")
}

// GraphGet, GraphResetHighs and GraphTrim are memtrack's own calls, and run
// in relaxed stream-capture mode: each sets the thread's mode relaxed and
// puts it back (two cuThreadExchangeStreamCaptureMode, which the fake
// counts), and, made during a capture begun in global mode, on another
// thread or on the capturing one, each succeeds and the capture ends with
// its graph. An H200 allowed the reads and the trim in global mode too
// (testdata/fakecuda/RULES.md); the reset no probe asked.
func TestGraphCallsRelaxed(t *testing.T) {
	k, _ := newGraphKit(t)
	calls := []struct {
		name string
		make func() cudadrv.Call
	}{
		{"GraphGet", func() cudadrv.Call { _, c := cudadrv.GraphGet(k.ctx); return c }},
		{"GraphResetHighs", func() cudadrv.Call { return cudadrv.GraphResetHighs(k.ctx) }},
		{"GraphTrim", func() cudadrv.Call { return cudadrv.GraphTrim(k.ctx) }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if n, ok := cudatest.CountCalls("cuThreadExchangeStreamCaptureMode"); ok {
				onThread(t, k.ctx, func() {
					n.Reset()
					require.Equal(t, cudadrv.Call{}, c.make())
					assert.Equal(t, map[string]uint64{"cuThreadExchangeStreamCaptureMode": 2}, n.Made(), "relaxed, then the mode put back")
				})
			}
			for _, where := range cudatest.Threads {
				var got cudadrv.Call
				nodes, ended := cudatest.DuringCapture(t, 0, where, func() { got = c.make() })
				assert.Equal(t, cudadrv.Call{}, got, "on %v", where)
				assert.Equal(t, cudadrv.Success, ended, "on %v: the program's capture ends with its graph", where)
				assert.Equal(t, 1, nodes, "on %v", where)
			}
		})
	}
}
