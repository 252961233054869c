//go:build cuda

package memtrack

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rules of graph memory (testdata/fakecuda/RULES.md, "Graph memory"),
// through the root API: buffers that Device.AllocAsync makes on a
// capturing stream, what their captures say each graph needs, and the
// driver's figures beside them. The fake's figures are known to the byte
// (a graph's memory in chunks of 32 MiB, FAKECUDA_GRAPH_CHUNK, as an H200
// reserved it), a GPU's only within the bounds the documentation sets: each
// test checks the bounds, the exact figures on the fake, and logs the
// driver's figures beside memtrack's per graph, so that a GPU run
// (scripts/gpu-check.sh) shows both.

const graphMiB = 1 << 20

// graphKit captures, instantiates and launches graphs on device 0 for one
// test, and destroys, when the test ends, the graph execs and graphs it
// made that the test did not destroy.
type graphKit struct {
	t      *testing.T
	d      Device
	g      Graphs
	base   GraphStats // the figures when the test began, trimmed
	chunk  int64      // the device's graph chunk, learned (Graphs.Chunk)
	graphs map[uintptr]bool
	execs  map[uintptr]bool
}

// newGraphKit skips where device 0 has no graph memory, trims its graph
// memory so that the test starts from what no graph holds, and reads the
// figures then (k.base); it returns a stream of the device too.
func newGraphKit(t *testing.T) (*graphKit, Stream) {
	t.Helper()
	d := cudaDevices(t, 1)[0]
	if _, err := d.Graphs().Stats(); err != nil {
		require.ErrorIs(t, err, ErrNotSupported)
		t.Skip(err)
	}
	k := &graphKit{t: t, d: d, g: d.Graphs(), graphs: map[uintptr]bool{}, execs: map[uintptr]bool{}}
	t.Cleanup(func() {
		for e := range k.execs {
			assert.Equal(t, cudadrv.Success, cudatest.GraphExecDestroy(e))
		}
		for g := range k.graphs {
			assert.Equal(t, cudadrv.Success, cudatest.GraphDestroy(g))
		}
	})
	require.NoError(t, k.g.Trim())
	chunk, learned, err := k.g.Chunk()
	require.NoError(t, err)
	require.True(t, learned, "a trimmed device holds no graph memory: the probe runs")
	if onFake() {
		require.Equal(t, fakeChunk(t), chunk, "the fake's chunk (FAKECUDA_GRAPH_CHUNK)")
	}
	k.chunk = chunk
	k.base = k.stats("before")
	return k, newStream(t, d)
}

// need is what the driver reserves for a graph whose own allocations peak
// at bytes live at once: their bytes in whole chunks.
func (k *graphKit) need(bytes int64) int64 { return (bytes + k.chunk - 1) / k.chunk * k.chunk }

// pinned is the most that n allocations of bytes, outliving a launch of a
// graph that needs need, may pin (Capture.Outliving): ceil((bytes-n)/chunk)
// + 2n - 1 chunks, and no more than need.
func (k *graphKit) pinned(bytes, n, need int64) int64 {
	return min(need, ((bytes-n+k.chunk-1)/k.chunk+2*n-1)*k.chunk)
}

// capture records, on stream s in relaxed mode, what f enqueues on it,
// and returns the graph and its Capture as memtrack reads it just before
// the capture ends.
func (k *graphKit) capture(s Stream, f func()) (uintptr, Capture) {
	k.t.Helper()
	var g uintptr
	var c Capture
	inContext(k.t, k.d, func() {
		require.Equal(k.t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureRelaxed))
		f()
		var err error
		c, err = k.g.Capture(s)
		require.NoError(k.t, err)
		var r cudadrv.Result
		g, r = cudatest.EndCaptureGraph(uintptr(s))
		require.Equal(k.t, cudadrv.Success, r)
	})
	k.graphs[g] = true
	return g, c
}

// allocGraph captures on s a graph that allocates size bytes through
// memtrack and frees them where freed; it returns the graph, its Capture
// and the graph's buffer.
func (k *graphKit) allocGraph(s Stream, size int64, freed bool) (uintptr, Capture, *Buffer) {
	k.t.Helper()
	var b *Buffer
	g, c := k.capture(s, func() {
		var err error
		b, err = k.d.AllocAsync(size, s)
		require.NoError(k.t, err)
		if freed {
			require.NoError(k.t, b.FreeAsync(s))
		}
	})
	return g, c, b
}

func (k *graphKit) instantiate(graph uintptr) (uintptr, cudadrv.Result) {
	var e uintptr
	var r cudadrv.Result
	inContext(k.t, k.d, func() { e, r = cudatest.GraphInstantiate(graph, false) })
	if r == cudadrv.Success {
		k.execs[e] = true
	}
	return e, r
}

func (k *graphKit) exec(graph uintptr) uintptr {
	k.t.Helper()
	e, r := k.instantiate(graph)
	require.Equal(k.t, cudadrv.Success, r)
	return e
}

func (k *graphKit) destroyExec(e uintptr) {
	k.t.Helper()
	delete(k.execs, e)
	require.Equal(k.t, cudadrv.Success, cudatest.GraphExecDestroy(e))
}

func (k *graphKit) launch(e uintptr, s Stream) {
	k.t.Helper()
	inContext(k.t, k.d, func() { require.Equal(k.t, cudadrv.Success, cudatest.GraphLaunch(e, uintptr(s))) })
}

func (k *graphKit) upload(e uintptr, s Stream) {
	k.t.Helper()
	inContext(k.t, k.d, func() { require.Equal(k.t, cudadrv.Success, cudatest.GraphUpload(e, uintptr(s))) })
}

// stats reads the driver's graph figures and logs them.
func (k *graphKit) stats(when string) GraphStats {
	k.t.Helper()
	st, err := k.g.Stats()
	require.NoError(k.t, err)
	k.t.Logf("%-62s driver: reserved %6.1f MiB (peak %6.1f), used %6.1f MiB (peak %6.1f)", when+":",
		float64(st.GraphReserved)/graphMiB, float64(st.PeakGraphReserved)/graphMiB, float64(st.GraphUsed)/graphMiB, float64(st.PeakGraphUsed)/graphMiB)
	return st
}

// logCapture logs memtrack's figures of one graph, for the GPU run.
func (k *graphKit) logCapture(name string, c Capture) {
	k.t.Logf("%-62s memtrack: need %6.1f MiB, outliving %6.1f MiB (%d allocation nodes, %d free nodes)", "graph "+name+":",
		float64(c.Need)/graphMiB, float64(c.Outliving)/graphMiB, c.Allocs, c.Frees)
}

// grew checks that the driver's reserve grew from k.base by at least want,
// as the documentation has it, and by exactly want on the fake.
func (k *graphKit) grew(want int64, st GraphStats, what string) {
	k.t.Helper()
	assert.GreaterOrEqual(k.t, st.GraphReserved-k.base.GraphReserved, want, what)
	if onFake() {
		assert.Equal(k.t, want, st.GraphReserved-k.base.GraphReserved, "%s: exactly, on the fake", what)
	}
}

// A buffer of AllocAsync on a capturing stream is the graph's: it is in no
// figure of the device's (Stats, its category, the limit, the history, the
// leak watch), and its capture counts it, so that what a launch needs is
// known before the first launch. Instantiation reserves nothing; the first
// upload (or launch) reserves the capture's Need; an allocation the graph
// does not free outlives each launch until freed, by FreeAsync on a stream
// that is not capturing or by Free, and the buffer stays the graph's; a trim
// returns the memory once nothing uses it.
func TestCUDAGraphBuffers(t *testing.T) {
	k, s := newGraphKit(t)
	d := k.d
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	require.NoError(t, d.SetMemoryLimit(graphMiB))
	t.Cleanup(func() { require.NoError(t, d.SetMemoryLimit(0)) })
	require.NoError(t, d.History().Enable(64))
	t.Cleanup(d.History().Disable)
	check, err := d.Leaks().StartCheck()
	require.NoError(t, err)
	t.Cleanup(check.End)
	before, kvBefore := d.MemoryStats(), kv.Stats()
	h0, err := d.History().Snapshot()
	require.NoError(t, err)

	var a, b *Buffer
	graph, c := k.capture(s, func() {
		a, err = kv.AllocAsync(8*graphMiB, s) // above the limit: no limit is on a graph's allocation
		require.NoError(t, err)
		b, err = d.AllocAsync(4*graphMiB, s)
		require.NoError(t, err)
		require.NoError(t, a.FreeAsync(s), "a free node")
		assert.True(t, a.Freed(), "freed by a free node of its own capture")
		assert.ErrorIs(t, a.FreeAsync(s), ErrDoubleFree)
		assert.NotZero(t, b.DevicePtr(), "the node's address, at once")
	})
	k.logCapture("8 MiB freed, 4 MiB outliving", c)
	assert.NotZero(t, c.ID)
	assert.Equal(t, Capture{Device: d, ID: c.ID, Stream: s, Capturing: true, Allocs: 2, Frees: 1, Need: k.need(12 * graphMiB), Outliving: k.pinned(4*graphMiB, 1, k.need(12*graphMiB))}, c,
		"12 MiB live at once, in whole chunks; 4 MiB outliving, the chunks it may lie in")
	assert.Equal(t, int64(4*graphMiB), b.RoundedSize(), "the driver rounds the graph's memory, not each allocation")
	n, r := cudatest.GraphNodes(graph)
	require.Equal(t, cudadrv.Success, r)
	assert.Equal(t, 3, n, "two allocation nodes and a free node")
	ended, err := k.g.Capture(s)
	require.NoError(t, err)
	c.Capturing = false
	assert.Equal(t, c, ended, "ended: the stream's last capture")
	list, err := k.g.Captures()
	require.NoError(t, err)
	assert.Contains(t, list, c)

	assert.Equal(t, before, d.MemoryStats(), "no figure of the device's moves")
	assert.Equal(t, kvBefore, kv.Stats(), "nor of its category")
	h1, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Equal(t, len(h0.Events), len(h1.Events), "nor the history")
	assert.Empty(t, check.Leaks(), "nor the leak watch")

	for name, free := range map[string]func() error{"Free": b.Free, "FreeAsync": func() error { return b.FreeAsync(s) }} {
		err := free()
		assert.Error(t, err, "%s before the first launch: nothing is live", name)
		assert.ErrorContains(t, err, "a graph's allocation is live from each launch of its graph until freed", name)
		assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "%v", err)
		assert.False(t, b.Freed(), name)
	}
	e := k.exec(graph)
	k.grew(0, k.stats("captured, instantiated"), "instantiation reserves nothing")
	assert.LessOrEqual(t, k.stats("captured, instantiated").GraphReserved, k.base.GraphReserved)
	k.upload(e, s)
	k.grew(c.Need, k.stats("uploaded"), "the upload reserves the graph's need")
	for i := range 3 {
		k.launch(e, s)
		syncStream(t, d, s)
		k.grew(c.Need, k.stats(fmt.Sprintf("launch %d on the upload's stream", i+1)), "launches on the same stream reuse it")
		if i < 2 {
			require.NoError(t, b.FreeAsync(s), "the launch's allocation, which outlived it")
		}
		assert.False(t, b.Freed(), "the graph allocates it again at its next launch")
	}
	require.NoError(t, b.Free(), "cuMemFree of the last launch's allocation")
	assert.False(t, b.Freed())
	assert.Equal(t, before, d.MemoryStats(), "no figure of the device's moved")

	u, err := d.Usage()
	require.NoError(t, err)
	require.NoError(t, u.GraphErr)
	st := k.stats("freed")
	assert.Equal(t, st.GraphReserved, u.GraphReserved, "Usage reads the driver's figures")
	assert.GreaterOrEqual(t, u.Untracked, u.GraphReserved, "graph memory is untracked")
	assert.Contains(t, d.MemorySummary(), "graph memory: reserved "+bytesize.Format(st.GraphReserved))
	require.NoError(t, k.g.Trim())
	k.grew(0, k.stats("trimmed"), "nothing executes and nothing is live: a trim returns it all")
}

// Graphs launched one after another on one stream share one reservation,
// the largest need (Programming Guide: "Since the graphs in the same stream
// never run concurrently, CUDA can and should use the same physical
// memory"); Measurement.WithGraphs of their captures, in one call, says so.
func TestCUDAGraphReuseOneStream(t *testing.T) {
	k, s := newGraphKit(t)
	g8, c8, _ := k.allocGraph(s, 8*graphMiB, true)
	g12, c12, _ := k.allocGraph(s, 12*graphMiB, true)
	k.logCapture("8 MiB", c8)
	k.logCapture("12 MiB", c12)
	p, err := Measurement{Device: k.d}.WithGraphs(c8, c12)
	require.NoError(t, err)
	assert.Equal(t, k.need(12*graphMiB), p.GraphNeed, "the largest, not the sum")
	e8, e12 := k.exec(g8), k.exec(g12)
	k.launch(e8, s)
	k.launch(e12, s)
	k.launch(e8, s)
	syncStream(t, k.d, s)
	k.grew(p.GraphNeed, k.stats("8 and 12 MiB graphs, one after the other on one stream"), "one reservation")
}

// Graphs that may run at once need memory of their own (Performance
// Considerations: "concurrent graphs require distinct memory"): a call of
// WithGraphs per stream adds them up. A trim keeps what a scheduled graph
// uses and returns the rest.
func TestCUDAGraphConcurrentStreams(t *testing.T) {
	k, s1 := newGraphKit(t)
	s2 := newStream(t, k.d)
	ga, ca, _ := k.allocGraph(s1, 8*graphMiB, true)
	gb, cb, _ := k.allocGraph(s2, 12*graphMiB, true)
	k.logCapture("8 MiB on stream 1", ca)
	k.logCapture("12 MiB on stream 2", cb)
	p, err := Measurement{Device: k.d}.WithGraphs(ca)
	require.NoError(t, err)
	p, err = p.WithGraphs(cb)
	require.NoError(t, err)
	assert.Equal(t, k.need(8*graphMiB)+k.need(12*graphMiB), p.GraphNeed, "a stream each: the sum")
	a, b := k.exec(ga), k.exec(gb)
	released := false
	release := func() {
		if !released {
			cudatest.ReleaseStreams()
			released = true
		}
	}
	t.Cleanup(release)
	inContext(t, k.d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(s1))) })
	k.launch(a, s1)
	k.launch(b, s2)
	syncStream(t, k.d, s2)
	k.grew(p.GraphNeed, k.stats("8 MiB scheduled on a held stream, 12 MiB run on another"), "memory of their own")
	require.NoError(t, k.g.Trim())
	k.grew(ca.Need, k.stats("trimmed while the 8 MiB graph is scheduled"), "the scheduled graph keeps its memory")
	release()
	syncStream(t, k.d, s1)
	require.NoError(t, k.g.Trim())
	k.grew(0, k.stats("both finished, trimmed"), "all returned")
}

// A graph with memory nodes may have one instantiation at a time
// (cuGraphInstantiateWithFlags): memtrack's capture is the graph's, and
// stays as it was through a refused instantiation and a new one.
func TestCUDAGraphOneInstantiation(t *testing.T) {
	k, s := newGraphKit(t)
	g, c, _ := k.allocGraph(s, 2*graphMiB, true)
	e := k.exec(g)
	_, r := k.instantiate(g)
	assert.NotEqual(t, cudadrv.Success, r, "a second instantiation")
	t.Logf("a second instantiation of a graph with memory nodes: CUresult %d (%s)", r, cudadrv.Name(r))
	k.destroyExec(e)
	e = k.exec(g)
	again, err := k.g.Capture(s)
	require.NoError(t, err)
	assert.Equal(t, c.Need, again.Need)
	k.launch(e, s)
	syncStream(t, k.d, s)
	k.grew(c.Need, k.stats("the second instantiation launched"), "the capture's need")
}

// Budget sets graph memory aside once: what the graphs launched in the
// measured pass reserved, taken out of the untracked growth, or what graphs
// captured after the pass will reserve, from their captures; the device
// then reserves what the budget set aside.
func TestCUDAGraphBudget(t *testing.T) {
	k, s := newGraphKit(t)
	d := k.d
	base, err := d.Baseline()
	require.NoError(t, err)

	t.Run("launched in the pass", func(t *testing.T) {
		g, c, _ := k.allocGraph(s, 6*graphMiB, true)
		e := k.exec(g)
		p, err := d.Measure(func() error {
			k.launch(e, s)
			syncStream(t, d, s)
			return nil
		})
		require.NoError(t, err)
		k.grew(c.Need, k.stats("a 6 MiB graph launched in the pass"), "the launch reserved it")
		assert.Equal(t, p.EndGraphReserved-p.StartGraphReserved, p.EndGraphReserved-base.GraphReserved)
		b, err := p.Budget(base, 0.9, graphMiB)
		require.NoError(t, err)
		assert.Equal(t, p.EndGraphReserved-base.GraphReserved, b.GraphReserved)
		if onFake() {
			assert.Equal(t, c.Need, b.GraphReserved)
			assert.Zero(t, b.UntrackedIncrease, "the graph memory left the untracked growth")
		}
		shared, err := p.SharedBudget(0.9, graphMiB)
		require.NoError(t, err)
		assert.Equal(t, b.GraphReserved, shared.GraphReserved)
		require.NoError(t, k.g.Trim())
	})

	t.Run("captured after the pass", func(t *testing.T) {
		require.NoError(t, k.g.Trim())
		p, err := d.Measure(func() error { return nil })
		require.NoError(t, err)
		plain, err := p.Budget(base, 0.9, graphMiB)
		require.NoError(t, err)
		g6, c6, _ := k.allocGraph(s, 6*graphMiB, true)
		g10, c10, _ := k.allocGraph(s, 10*graphMiB, true)
		k.logCapture("6 MiB", c6)
		k.logCapture("10 MiB", c10)
		p, err = p.WithGraphs(c6, c10)
		require.NoError(t, err)
		b, err := p.Budget(base, 0.9, graphMiB)
		require.NoError(t, err)
		assert.Equal(t, max(k.need(6*graphMiB), k.need(10*graphMiB)), b.GraphReserved)
		assert.Equal(t, plain.SetAside+b.GraphReserved, b.SetAside, "set aside once")
		e6, e10 := k.exec(g6), k.exec(g10)
		k.launch(e6, s)
		k.launch(e10, s)
		syncStream(t, d, s)
		k.grew(b.GraphReserved, k.stats("both launched on one stream"), "the device reserves what the budget set aside")
	})
}

// Captures on several streams at once, from several goroutines, each
// allocating and freeing through memtrack: each capture counts its own
// nodes exactly, and no figure of the device's moves.
func TestCUDAGraphCapturesConcurrent(t *testing.T) {
	k, _ := newGraphKit(t)
	const workers, allocs = 4, 16
	streams := make([]Stream, workers)
	for i := range streams {
		streams[i] = newStream(t, k.d)
	}
	before := k.d.MemoryStats()
	var ready, start sync.WaitGroup
	ready.Add(workers)
	start.Add(1)
	got := make([]Capture, workers)
	rounded := make([]int64, workers) // the RoundedSize of each worker's node
	graphs := make([]uintptr, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := streams[w]
			inContext(t, k.d, func() {
				require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureRelaxed))
				ready.Done()
				start.Wait()
				for i := range allocs {
					b, err := k.d.AllocAsync(int64(w+1)*graphMiB, s)
					if !assert.NoError(t, err) {
						break
					}
					rounded[w] = b.RoundedSize()
					if i%2 == 0 {
						assert.NoError(t, b.FreeAsync(s))
					}
				}
				var err error
				got[w], err = k.g.Capture(s)
				assert.NoError(t, err)
				var r cudadrv.Result
				graphs[w], r = cudatest.EndCaptureGraph(uintptr(s))
				assert.Equal(t, cudadrv.Success, r)
			})
		})
	}
	ready.Wait()
	start.Done()
	wg.Wait()
	for w, c := range got {
		if graphs[w] != 0 {
			k.graphs[graphs[w]] = true
		}
		size := int64(w+1) * graphMiB
		assert.Equal(t, size, rounded[w], "worker %d: the graph's memory is rounded as a whole", w)
		need := k.need(allocs / 2 * size) // the odd ones outlive; the peak is at the last
		assert.Equal(t, Capture{Device: k.d, ID: c.ID, Stream: streams[w], Capturing: true, Allocs: allocs, Frees: allocs / 2,
			Need: need, Outliving: k.pinned(allocs/2*size, allocs/2, need)}, c, "worker %d", w)
	}
	assert.Equal(t, before, k.d.MemoryStats())
}

// Refusals: a capture the driver invalidated gets nothing, and counts
// nothing; a FreeAsync of a pool buffer on a capturing stream is refused
// (a graph's free node takes only a graph's allocation), and the buffer
// stays live; each error has one prefix.
func TestCUDAGraphRefusals(t *testing.T) {
	k, s := newGraphKit(t)
	d := k.d
	live, err := d.AllocAsync(graphMiB, s)
	require.NoError(t, err)
	before := d.MemoryStats()
	var graphBuf *Buffer
	inContext(t, d, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureGlobal))
		err := live.FreeAsync(s)
		assert.ErrorIs(t, err, ErrNotSupported)
		assert.ErrorContains(t, err, "no graph allocated")
		assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "%v", err)
		assert.False(t, live.Freed(), "the buffer stays live")
		graphBuf, err = d.AllocAsync(2*graphMiB, s)
		require.NoError(t, err)
		c, err := k.g.Capture(s)
		require.NoError(t, err)

		assert.NotEqual(t, cudadrv.Success, cudatest.StreamQuery(uintptr(s)), "an invalid operation invalidates the capture")
		b, err := d.AllocAsync(graphMiB, s)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, ErrNotSupported)
		assert.ErrorContains(t, err, "invalidated")
		assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "%v", err)
		err = graphBuf.FreeAsync(s)
		assert.ErrorIs(t, err, ErrNotSupported)
		assert.False(t, graphBuf.Freed())
		after, err := k.g.Capture(s)
		require.NoError(t, err)
		assert.Equal(t, Capture{Device: d, Stream: s, Capturing: true, Invalidated: true}, after, "invalidated, and named by no ID")
		list, err := k.g.Captures()
		require.NoError(t, err)
		assert.Contains(t, list, c, "nothing counted")
		_, r := cudatest.EndCaptureGraph(uintptr(s))
		assert.NotEqual(t, cudadrv.Success, r, "an invalidated capture ends with no graph")
		_, err = Measurement{Device: d}.WithGraphs(after)
		assert.ErrorIs(t, err, ErrInvalidArgument, "it launches nothing")
	})
	assert.Equal(t, before, d.MemoryStats(), "no figure moves")
	require.NoError(t, live.FreeAsync(s))
	syncStream(t, d, s)
}

// TestCUDAChildNoGraphMemory: a driver without graph memory nodes (CUDA
// 11.3), or without a call that memtrack's count of them needs
// (cuGraphUpload, which the probe of the graph chunk takes), refuses
// AllocAsync on a capturing
// stream, as before, naming what is missing (MEMTRACK_WANT), and counts
// nothing; the graph calls fail with ErrNotSupported, and Usage says why
// its graph figures are missing.
func TestCUDAChildNoGraphMemory(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	before := d.MemoryStats()
	nodes, r := capturing(t, d, s, cudatest.CaptureRelaxed, func() {
		b, err := d.AllocAsync(graphMiB, s)
		assert.Nil(t, b)
		require.ErrorIs(t, err, ErrNotSupported)
		assert.Contains(t, err.Error(), "capturing a CUDA graph")
		assert.Contains(t, err.Error(), os.Getenv("MEMTRACK_WANT"))
		assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "%v", err)
	})
	assert.Equal(t, cudadrv.Success, r)
	assert.Zero(t, nodes, "memtrack put nothing in the graph")
	assert.Equal(t, before, d.MemoryStats(), "nothing counted")
	_, err := d.Graphs().Stats()
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.ErrorIs(t, d.Graphs().Trim(), ErrNotSupported)
	u, err := d.Usage()
	require.NoError(t, err)
	assert.ErrorIs(t, u.GraphErr, ErrNotSupported)
	assert.NotContains(t, d.MemorySummary(), "graph memory")
	d.ResetPeakMemoryStats()
}

// ResetPeakMemoryStats resets the graph memory high-water marks with the
// pool's, by the driver's set of 0: to 0 or to the current figure, which
// the reference leaves open (the fake offers both,
// FAKECUDA_GRAPH_HIGH_RESET); either way the peak of a graph launched and
// trimmed before the reset is gone.
func TestCUDAGraphHighsReset(t *testing.T) {
	k, s := newGraphKit(t)
	g, c, _ := k.allocGraph(s, 10*graphMiB, true)
	k.launch(k.exec(g), s)
	syncStream(t, k.d, s)
	k.grew(c.Need, k.stats("a 10 MiB graph launched"), "its need")
	require.NoError(t, k.g.Trim())
	before := k.stats("trimmed")
	require.GreaterOrEqual(t, before.PeakGraphReserved, c.Need)
	k.d.ResetPeakMemoryStats()
	after := k.stats("ResetPeakMemoryStats")
	assert.Equal(t, before.GraphReserved, after.GraphReserved, "the figures stay")
	assert.Contains(t, []int64{0, after.GraphReserved}, after.PeakGraphReserved, "reset to 0 or to the current figure")
	assert.Contains(t, []int64{0, after.GraphUsed}, after.PeakGraphUsed)
	assert.Less(t, after.PeakGraphReserved, before.PeakGraphReserved)
	u, err := k.d.Usage()
	require.NoError(t, err)
	assert.Equal(t, after.PeakGraphReserved, u.PeakGraphReserved)
}

// The out-of-memory report names the part of the untracked memory that the
// driver reserves for graphs, read when the report is made.
func TestCUDAGraphOutOfMemoryReport(t *testing.T) {
	k, s := newGraphKit(t)
	g, c, _ := k.allocGraph(s, 10*graphMiB, true)
	k.launch(k.exec(g), s)
	syncStream(t, k.d, s)
	st := k.stats("a 10 MiB graph launched")
	k.grew(c.Need, st, "its need")
	require.NoError(t, k.d.SetMemoryLimit(graphMiB))
	t.Cleanup(func() { require.NoError(t, k.d.SetMemoryLimit(0)) })
	_, err := k.d.Alloc(2 * graphMiB)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, st.GraphReserved, oom.GraphReserved)
	assert.Contains(t, oom.Report(), "of it, "+bytesize.Exact(st.GraphReserved)+" the driver reserves for CUDA graphs")
}

// A stream of another device is bad input for the graph calls as for the
// stream-ordered ones, capturing or not: refused with ErrInvalidArgument,
// naming the stream's device, and nothing counted in either device's
// figures or captures.
func TestCUDAGraphOtherDevice(t *testing.T) {
	ds := cudaDevices(t, 2)
	d0, d1 := ds[0], ds[1]
	if _, err := d0.Graphs().Stats(); err != nil {
		t.Skip(err)
	}
	s1 := newStream(t, d1)
	before0, before1 := d0.MemoryStats(), d1.MemoryStats()
	nodes, r := capturing(t, d1, s1, cudatest.CaptureRelaxed, func() {
		b, err := d0.AllocAsync(graphMiB, s1)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.ErrorContains(t, err, "belongs to cuda:1")
		_, err = d0.Graphs().Capture(s1)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		c, err := d1.Graphs().Capture(s1)
		require.NoError(t, err)
		assert.True(t, c.Capturing)
		assert.Zero(t, c.Allocs)
	})
	assert.Equal(t, cudadrv.Success, r)
	assert.Zero(t, nodes, "nothing in the graph")
	assert.Equal(t, before0, d0.MemoryStats())
	assert.Equal(t, before1, d1.MemoryStats())
}

// The driver gives no ID for a capture it invalidated
// (cuStreamGetCaptureInfo: the ID is valid only while the capture is
// active), so memtrack knows which capture was invalidated only where a
// call of its own in a capture whose ID it had just read was refused for
// it; a reading of a stream whose capture is invalidated says so of that
// reading alone, and of no record memtrack holds.
func TestCUDAGraphInvalidation(t *testing.T) {
	invalidate := func(t *testing.T, s Stream) {
		t.Helper()
		assert.NotEqual(t, cudadrv.Success, cudatest.StreamQuery(uintptr(s)), "an invalid operation invalidates the capture")
	}
	idless := func(k *graphKit, s Stream) Capture {
		k.t.Helper()
		read, err := k.g.Capture(s)
		require.NoError(k.t, err)
		assert.Equal(k.t, Capture{Device: k.d, Stream: s, Capturing: true, Invalidated: true}, read,
			"the stream's capture is invalidated, and the driver names it by no ID")
		_, err = Measurement{Device: k.d}.WithGraphs(read)
		assert.ErrorIs(k.t, err, ErrInvalidArgument, "it makes no graph")
		assert.ErrorContains(k.t, err, "invalidated")
		return read
	}

	t.Run("a later capture on the stream", func(t *testing.T) {
		// A capture read just before it ends, as documented, ends with its
		// graph; the next capture on the stream is invalidated before
		// memtrack sees it, and the stream is read once.
		k, s := newGraphKit(t)
		g, good, _ := k.allocGraph(s, 2*graphMiB, true)
		inContext(t, k.d, func() {
			require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureRelaxed))
			invalidate(t, s)
			idless(k, s)
			_, r := cudatest.EndCaptureGraph(uintptr(s))
			assert.Equal(t, cudadrv.Result(901), r, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: no graph")
		})
		list, err := k.g.Captures()
		require.NoError(t, err)
		assert.Contains(t, list, good, "the good capture as memtrack last saw it, in progress and not invalidated: Captures asks nothing of its stream")
		good.Capturing = false
		last, err := k.g.Capture(s)
		require.NoError(t, err)
		assert.Equal(t, good, last, "the stream's last capture memtrack saw, ended: the stream is read")
		list, err = k.g.Captures()
		require.NoError(t, err)
		assert.Contains(t, list, good, "ended, not invalidated")
		_, err = Measurement{Device: k.d}.WithGraphs(last)
		require.NoError(t, err)
		k.launch(k.exec(g), s)
		syncStream(t, k.d, s)
		k.grew(good.Need, k.stats("the good graph launched"), "its graph was made")
	})

	t.Run("an allocation refused in the invalidated capture", func(t *testing.T) {
		// memtrack refuses AllocAsync where the stream's capture is
		// invalidated, from a reading with no ID: it cannot tell that
		// capture from the stream's last one, which may have ended before
		// it began, and leaves that record as it was.
		k, s := newGraphKit(t)
		var made Capture
		inContext(t, k.d, func() {
			require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureRelaxed))
			_, err := k.d.AllocAsync(2*graphMiB, s)
			require.NoError(t, err)
			made, err = k.g.Capture(s)
			require.NoError(t, err)
			invalidate(t, s)
			b, err := k.d.AllocAsync(2*graphMiB, s)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, ErrNotSupported)
			assert.ErrorContains(t, err, "invalidated")
			idless(k, s) // what the program reads just before it ends the capture
			_, r := cudatest.EndCaptureGraph(uintptr(s))
			assert.Equal(t, cudadrv.Result(901), r)
		})
		ended, err := k.g.Capture(s)
		require.NoError(t, err)
		made.Capturing = false
		assert.Equal(t, made, ended, "read after its end: the record as memtrack counted it, not known invalidated")
	})

	t.Run("a free node the driver refused", func(t *testing.T) {
		// The driver refuses a second free node of one allocation in one
		// graph (cuGraphAddMemFreeNode), and the capture goes on: an H200
		// answered CUDA_ERROR_INVALID_VALUE and kept the capture active,
		// with its ID, until it ended with its graph. memtrack read the
		// capture's ID in the same call: the error names it, and no
		// figure moves.
		k, s1 := newGraphKit(t)
		s2 := newStream(t, k.d)
		_, _, b := k.allocGraph(s1, 2*graphMiB, false)
		var c Capture
		inContext(t, k.d, func() {
			require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s2), cudatest.CaptureRelaxed))
			require.NoError(t, b.FreeAsync(s2), "a free node of another graph's allocation")
			var err error
			c, err = k.g.Capture(s2)
			require.NoError(t, err)
			err = b.FreeAsync(s2)
			require.Error(t, err, "a second free node of it in the same graph")
			var be *BackendError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, 1, be.Code, "CUDA_ERROR_INVALID_VALUE")
			assert.ErrorContains(t, err, fmt.Sprintf("capture %d", c.ID))
			assert.ErrorContains(t, err, "the capture goes on")
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "%v", err)
			assert.False(t, b.Freed(), "the buffer stays the other graph's")
			again, err := k.g.Capture(s2)
			require.NoError(t, err)
			assert.Equal(t, c, again, "the capture as it was: active, its one free node")
			_, r := cudatest.EndCaptureGraph(uintptr(s2))
			assert.Equal(t, cudadrv.Success, r, "it ends with its graph")
		})
		ended, err := k.g.Capture(s2)
		require.NoError(t, err)
		assert.Equal(t, Capture{Device: k.d, ID: c.ID, Stream: s2, Frees: 1}, ended)
		_, err = Measurement{Device: k.d}.WithGraphs(ended)
		assert.NoError(t, err)
	})
}

// fakeChunk is the fake driver's graph chunk (FAKECUDA_GRAPH_CHUNK, 32 MiB
// by default, the H200's).
func fakeChunk(t *testing.T) int64 {
	t.Helper()
	chunk := int64(32 << 20)
	if v := os.Getenv("FAKECUDA_GRAPH_CHUNK"); v != "" {
		var err error
		chunk, err = strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
	}
	return chunk
}

// A graph's memory is its peak footprint rounded up to the driver's chunk
// once, not each allocation rounded up to the allocation granularity (an
// H200, chunk 32 MiB: 100 allocations of 4 KiB live at once reserved 32
// MiB): a capture's Need is its peak's bytes in whole chunks, and each
// buffer's RoundedSize is its size. The driver then reserves Need; checked
// with 100 allocations of 4 KiB, live together, and a capture of 3 MiB
// freed in the graph and 5 MiB outliving its launch, whose chunk it pins.
func TestCUDAGraphRounding(t *testing.T) { checkGraphRounding(t) }

// TestCUDAChildGraphChunk: the same on a device whose chunk is 4 MiB
// (FAKECUDA_GRAPH_CHUNK), so that the chunk is the driver's answer, learned
// by memtrack's probe graph, not a figure of memtrack's.
func TestCUDAChildGraphChunk(t *testing.T) {
	child(t)
	checkGraphRounding(t)
}

func checkGraphRounding(t *testing.T) {
	k, s := newGraphKit(t)

	const n, size = 100, 4 << 10
	var bufs []*Buffer
	g, c := k.capture(s, func() {
		for range n {
			b, err := k.d.AllocAsync(size, s)
			require.NoError(t, err)
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			require.NoError(t, b.FreeAsync(s))
		}
	})
	k.logCapture("100 allocations of 4 KiB, then their frees", c)
	assert.Equal(t, int64(n), c.Allocs)
	assert.Equal(t, int64(size), bufs[0].Size())
	assert.Equal(t, int64(size), bufs[0].RoundedSize(), "the driver rounds the graph, not each allocation")
	assert.Equal(t, k.need(n*size), c.Need, "the peak's bytes in whole chunks")
	p, err := Measurement{Device: k.d}.WithGraphs(c)
	require.NoError(t, err)
	k.launch(k.exec(g), s)
	syncStream(t, k.d, s)
	st := k.stats("the 100 allocations of 4 KiB launched")
	grown := st.GraphReserved - k.base.GraphReserved
	assert.LessOrEqual(t, grown, p.GraphNeed, "the budget sets aside what the driver reserves, at least")
	if onFake() {
		assert.Equal(t, p.GraphNeed, grown, "exactly Need")
	}
	require.NoError(t, k.g.Trim())

	// 3 MiB freed in the graph, 5 MiB outliving its launch.
	var out *Buffer
	g, c = k.capture(s, func() {
		a, err := k.d.AllocAsync(3<<20, s)
		require.NoError(t, err)
		out, err = k.d.AllocAsync(5<<20, s)
		require.NoError(t, err)
		require.NoError(t, a.FreeAsync(s))
	})
	k.logCapture("3 MiB freed, 5 MiB outliving", c)
	assert.Equal(t, k.need(8<<20), c.Need, "8 MiB live at once")
	assert.Equal(t, k.pinned(5<<20, 1, c.Need), c.Outliving, "the chunks what outlives the launch may lie in")
	k.launch(k.exec(g), s)
	syncStream(t, k.d, s)
	st = k.stats("3 MiB and 5 MiB launched, 5 MiB live")
	grown = st.GraphReserved - k.base.GraphReserved
	assert.LessOrEqual(t, grown, c.Need)
	if onFake() {
		assert.Equal(t, c.Need, grown)
	}
	require.NoError(t, out.Free(), "the launch's allocation, which outlived it")
	require.NoError(t, k.g.Trim())
}

// graphOutlivingCases are the cases of TestCUDAChildGraphBudgetOutliving:
// a graph launched in the measured pass (pass MiB, its allocation freed in
// the graph or outliving the launch), and a graph captured after the pass
// and launched after the budget (later MiB), on one stream; budget and
// reserved are the fake's exact figures of the budget's GraphReserved and
// of what the driver then reserved: the sum of the two graphs' needs, or
// the larger (in chunks of 32 MiB, 64 MiB and 32).
var graphOutlivingCases = []struct {
	name             string
	pass, later      int64 // MiB
	passOut, lateOut bool  // the allocation outlives its launch
	free             string
	budget, reserved string // "sum" or "max"
}{
	// The pass's allocation is still live when the later graph launches:
	// the driver reuses none of its chunk (an H200: 8 MiB live, 32 MiB
	// reserved; a 12 MiB graph after it, 64).
	{"live at the end of the pass, a larger later graph", 8, 12, true, false, "", "sum", "sum"},
	{"live at the end of the pass, a smaller later graph", 12, 8, true, false, "", "sum", "sum"},
	// Launched, freed and launched again in the pass: live at its end.
	{"freed and launched again in the pass", 8, 12, true, false, "relaunched", "sum", "sum"},
	// The later graph's allocation outlives its launch: it takes its
	// memory from the stream's, which the pass's graph left free.
	{"the later graph's allocation outliving", 12, 8, false, true, "", "max", "max"},
	// Freed before the later graph launches: the driver reuses the memory.
	// memtrack does not see launches, so that it cannot tell a freed
	// allocation from one its graph allocated again: the budget sets it
	// apart all the same.
	{"freed after the pass, before the later launch", 8, 12, true, false, "after", "sum", "max"},
	{"freed in the pass", 8, 12, true, false, "in", "sum", "max"},
}

// TestCUDAGraphBudgetOutliving runs TestCUDAChildGraphBudgetOutliving once
// per case, each in a process of its own, which has captured no graph
// before it.
func TestCUDAGraphBudgetOutliving(t *testing.T) {
	cudaDevices(t, 1)
	for _, c := range graphOutlivingCases {
		t.Run(c.name, func(t *testing.T) {
			runChild(t, "TestCUDAChildGraphBudgetOutliving", []string{"MEMTRACK_GRAPH_CASE=" + c.name})
		})
	}
}

// TestCUDAChildGraphBudgetOutliving: physical pages "cannot be reused if
// they are bound to ... a graph allocation which remains unfreed" (CUDA
// Programming Guide, Graph Memory Nodes: Physical Memory Management and
// Sharing): a budget that reuses, for the graphs captured after the pass,
// the graph memory that the pass's graphs reserved sets apart the memory of
// allocations that may still be live, and the driver then reserves at most
// what the budget set aside, exactly where they are live.
func TestCUDAChildGraphBudgetOutliving(t *testing.T) {
	child(t)
	i := slices.IndexFunc(graphOutlivingCases, func(c struct {
		name             string
		pass, later      int64
		passOut, lateOut bool
		free             string
		budget, reserved string
	}) bool {
		return c.name == os.Getenv("MEMTRACK_GRAPH_CASE")
	})
	require.GreaterOrEqual(t, i, 0, "MEMTRACK_GRAPH_CASE")
	tc := graphOutlivingCases[i]
	k, s := newGraphKit(t)
	d := k.d
	base, err := d.Baseline()
	require.NoError(t, err)

	g, c, out := k.allocGraph(s, tc.pass*graphMiB, !tc.passOut)
	k.logCapture("launched in the pass", c)
	e := k.exec(g)
	p, err := d.Measure(func() error {
		k.launch(e, s)
		syncStream(t, d, s)
		switch tc.free {
		case "in":
			require.NoError(t, out.Free())
		case "relaunched":
			require.NoError(t, out.Free())
			k.launch(e, s)
			syncStream(t, d, s)
		}
		return nil
	})
	require.NoError(t, err)
	k.stats("the pass's graph launched")
	if tc.free == "after" {
		require.NoError(t, out.Free())
	}
	gl, cl, outl := k.allocGraph(s, tc.later*graphMiB, !tc.lateOut)
	k.logCapture("captured after the pass", cl)
	p, err = p.WithGraphs(cl)
	require.NoError(t, err)
	b, err := p.Budget(base, 0.9, graphMiB)
	require.NoError(t, err)
	shared, err := p.SharedBudget(0.9, graphMiB)
	require.NoError(t, err)
	assert.Equal(t, b.GraphReserved, shared.GraphReserved, "the pass's graph reserved its memory after the baseline and in the pass alike")
	k.launch(k.exec(gl), s)
	syncStream(t, d, s)
	st := k.stats("the later graph launched")
	grown := st.GraphReserved - k.base.GraphReserved
	t.Logf("budget: GraphReserved %d MiB; the driver reserved %d MiB", b.GraphReserved/graphMiB, grown/graphMiB)
	assert.GreaterOrEqual(t, b.GraphReserved, grown, "the budget sets aside at least what the driver reserves")
	if onFake() {
		a, l := k.need(tc.pass*graphMiB), k.need(tc.later*graphMiB)
		figure := map[string]int64{"sum": a + l, "max": max(a, l)}
		assert.Equal(t, figure[tc.reserved], grown, "the driver")
		assert.Equal(t, figure[tc.budget], b.GraphReserved, "the budget")
	}
	if tc.passOut && (tc.free == "" || tc.free == "relaunched") {
		require.NoError(t, out.Free())
	}
	if tc.lateOut {
		require.NoError(t, outl.Free())
	}
}

// TestCUDAGraphChunkLearned runs the children that learn the graph chunk
// in a process of their own, whose devices have not learned it yet.
func TestCUDAGraphChunkLearned(t *testing.T) {
	requireFake(t)
	for _, c := range []string{"TestCUDAChildGraphChunkOnce", "TestCUDAChildGraphChunkBound", "TestCUDAChildGraphChunkDuringCapture"} {
		t.Run(c, func(t *testing.T) { runChild(t, c, nil) })
	}
}

// TestCUDAChildGraphChunkOnce: goroutines that ask a device's chunk at once
// get the driver's, learned by one probe graph (one cuGraphUpload), and the
// probe leaves the device's graph figures as they were.
func TestCUDAChildGraphChunkOnce(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	before, err := d.Graphs().Stats()
	require.NoError(t, err)
	uploads, ok := cudatest.DriverCalls("cuGraphUpload")
	require.True(t, ok)
	const workers = 8
	var ready, start, done sync.WaitGroup
	ready.Add(workers)
	start.Add(1)
	chunks := make([]int64, workers)
	learned := make([]bool, workers)
	for w := range workers {
		done.Go(func() {
			ready.Done()
			start.Wait()
			var err error
			chunks[w], learned[w], err = d.Graphs().Chunk()
			assert.NoError(t, err)
		})
	}
	ready.Wait()
	start.Done()
	done.Wait()
	for w := range workers {
		assert.Equal(t, fakeChunk(t), chunks[w], "worker %d", w)
		assert.True(t, learned[w], "worker %d", w)
	}
	after, _ := cudatest.DriverCalls("cuGraphUpload")
	assert.Equal(t, uint64(1), after-uploads, "one probe graph")
	st, err := d.Graphs().Stats()
	require.NoError(t, err)
	assert.Equal(t, before, st, "nothing left behind")
}

// TestCUDAChildGraphChunkBound: a device that holds graph memory when
// memtrack first needs the chunk is not probed (a finished graph's memory
// could serve the probe, and the trim would return it): the chunk is then
// the greatest common divisor of the reserved graph memory and its
// high-water mark, a multiple of the driver's chunk, which a capture's Need
// follows, never below what the driver reserves; once the device holds no
// graph memory, the probe learns the chunk itself.
func TestCUDAChildGraphChunkBound(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	_, ctx, err := cudaDeviceOf(0, "test")
	require.NoError(t, err)
	s := newStream(t, d)
	chunk := fakeChunk(t)
	held65 := (65<<20 + chunk - 1) / chunk * chunk // three chunks of 32 MiB
	// A graph of 65 MiB made without memtrack, launched.
	var exec uintptr
	inContext(t, d, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureRelaxed))
		p, r := cudatest.AllocAsync(uintptr(ctx), 65<<20, uintptr(s))
		require.Equal(t, cudadrv.Success, r)
		require.Equal(t, cudadrv.Success, cudatest.FreeAsync(uintptr(ctx), p, uintptr(s), 0))
		g, r := cudatest.EndCaptureGraph(uintptr(s))
		require.Equal(t, cudadrv.Success, r)
		t.Cleanup(func() { cudatest.GraphDestroy(g) })
		exec, r = cudatest.GraphInstantiate(g, false)
		require.Equal(t, cudadrv.Success, r)
		require.Equal(t, cudadrv.Success, cudatest.GraphLaunch(exec, uintptr(s)))
		require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(uintptr(s)))
	})
	held, err := d.Graphs().Stats()
	require.NoError(t, err)
	require.Equal(t, held65, held.GraphReserved)

	got, learned, err := d.Graphs().Chunk()
	require.NoError(t, err)
	assert.False(t, learned, "the device holds graph memory: no probe")
	assert.Equal(t, held65, got, "gcd(reserved, its high-water mark): a multiple of the chunk")
	st, err := d.Graphs().Stats()
	require.NoError(t, err)
	assert.Equal(t, held, st, "the graph's memory stays reserved")

	// A capture of 1 MiB: memtrack's first graph allocation tries the
	// probe again, which does not run; its Need is the bound.
	var c Capture
	inContext(t, d, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureRelaxed))
		b, err := d.AllocAsync(1<<20, s)
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(s))
		c, err = d.Graphs().Capture(s)
		require.NoError(t, err)
		g, r := cudatest.EndCaptureGraph(uintptr(s))
		require.Equal(t, cudadrv.Success, r)
		require.Equal(t, cudadrv.Success, cudatest.GraphDestroy(g))
	})
	assert.Equal(t, held65, c.Need, "rounded up to the bound: at least what the driver reserves (one chunk)")

	require.Equal(t, cudadrv.Success, cudatest.GraphExecDestroy(exec))
	require.NoError(t, d.Graphs().Trim())
	got, learned, err = d.Graphs().Chunk()
	require.NoError(t, err)
	assert.True(t, learned, "a device without graph memory is probed")
	assert.Equal(t, chunk, got)
	again, err := d.Graphs().Capture(s)
	require.NoError(t, err)
	c.Capturing = false
	c.Need = chunk
	assert.Equal(t, c, again, "the capture's bytes, rounded up to the chunk learned")
}

// TestCUDAChildGraphChunkDuringCapture: the probe runs at memtrack's first
// allocation in a capture, on the program's capturing thread, and at a
// reading from another goroutine; with the program's capture begun in
// global mode, that capture ends with its graph and its two nodes.
func TestCUDAChildGraphChunkDuringCapture(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	uploads, ok := cudatest.DriverCalls("cuGraphUpload")
	require.True(t, ok)
	var c Capture
	inContext(t, d, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), cudatest.CaptureGlobal))
		b, err := d.AllocAsync(1<<20, s)
		require.NoError(t, err, "the first allocation in a capture: the probe runs")
		after, _ := cudatest.DriverCalls("cuGraphUpload")
		assert.Equal(t, uint64(1), after-uploads, "one probe graph, on the capturing thread")
		var wg sync.WaitGroup
		wg.Go(func() {
			chunk, learned, err := d.Graphs().Chunk()
			assert.NoError(t, err)
			assert.True(t, learned)
			assert.Equal(t, fakeChunk(t), chunk)
		})
		wg.Wait()
		require.NoError(t, b.FreeAsync(s))
		c, err = d.Graphs().Capture(s)
		require.NoError(t, err)
		g, r := cudatest.EndCaptureGraph(uintptr(s))
		require.Equal(t, cudadrv.Success, r, "the program's capture ends with its graph")
		n, r := cudatest.GraphNodes(g)
		require.Equal(t, cudadrv.Success, r)
		assert.Equal(t, 2, n, "its allocation and free nodes, and none of the probe's")
		require.Equal(t, cudadrv.Success, cudatest.GraphDestroy(g))
	})
	assert.Equal(t, fakeChunk(t), c.Need)
}

// graphLayoutCases are graphs whose allocations outlive their launch among
// others the graph frees, and a later graph launched on the same stream,
// as an NVIDIA H200 (driver 580.159.04) reserved them, in MiB after both
// launches: an outliving allocation pins every chunk of 32 MiB it lies in,
// at its offset in the graph's memory, which the H200 lays out in capture
// order. Each op allocates (a, MiB) or frees (f) the allocation of that
// name; the names of the allocations left live are those never freed.
var graphLayoutCases = []struct {
	name  string
	ops   []string // "aX 30": allocate 30 MiB as X; "fX": free X
	later int64    // MiB
	h200  int64    // MiB reserved after both launches
}{
	{"30 freed, 8 live", []string{"aA 30", "aB 8", "fA"}, 20, 96},
	{"8 live, 30 freed", []string{"aB 8", "aA 30", "fA"}, 20, 64},
	{"40 freed, 8 live", []string{"aA 40", "aB 8", "fA"}, 20, 64},
	{"28 freed, 8 live", []string{"aA 28", "aB 8", "fA"}, 28, 96},
	{"30 freed, 3 live", []string{"aA 30", "aB 3", "fA"}, 31, 96},
	{"8 live, 30 freed, 8 live", []string{"aB 8", "aA 30", "aC 8", "fA"}, 20, 96},
	{"20 live, 20 live", []string{"aB 20", "aC 20"}, 20, 96},
	{"60 freed, 8 live", []string{"aA 60", "aB 8", "fA"}, 60, 128},
}

// An allocation that outlives its launch pins every chunk it lies in,
// wherever the driver placed it among the graph's other allocations:
// Measurement.WithGraphs of such a graph and a later one on the same
// stream sets aside at least what the driver reserves once both are
// launched, on every row the H200 was measured on (the fake driver lays
// a graph out as the H200 did, and reserves the H200's figures).
func TestCUDAGraphOutlivingLayout(t *testing.T) {
	for _, tc := range graphLayoutCases {
		t.Run(tc.name, func(t *testing.T) {
			k, s := newGraphKit(t)
			bufs := map[string]*Buffer{}
			g1, c1 := k.capture(s, func() {
				for _, op := range tc.ops {
					name := op[1:2]
					if op[0] == 'f' {
						require.NoError(t, bufs[name].FreeAsync(s))
						continue
					}
					var mib int64
					_, err := fmt.Sscan(op[3:], &mib)
					require.NoError(t, err)
					bufs[name], err = k.d.AllocAsync(mib*graphMiB, s)
					require.NoError(t, err)
				}
			})
			g2, c2, _ := k.allocGraph(s, tc.later*graphMiB, true)
			k.logCapture(tc.name, c1)
			p, err := Measurement{Device: k.d}.WithGraphs(c1, c2)
			require.NoError(t, err)
			k.launch(k.exec(g1), s)
			syncStream(t, k.d, s)
			k.launch(k.exec(g2), s)
			syncStream(t, k.d, s)
			grown := k.stats("both launched").GraphReserved - k.base.GraphReserved
			t.Logf("the budget's GraphNeed %d MiB; the driver reserved %d MiB (the H200: %d)", p.GraphNeed/graphMiB, grown/graphMiB, tc.h200)
			assert.GreaterOrEqual(t, p.GraphNeed, grown, "the budget sets aside at least what the driver reserves")
			if onFake() && k.chunk == 32*graphMiB {
				assert.Equal(t, tc.h200*graphMiB, grown, "the H200's figure")
			}
			for name, b := range bufs {
				if !b.Freed() {
					require.NoError(t, b.FreeAsync(s), name)
				}
			}
			syncStream(t, k.d, s)
		})
	}
}
