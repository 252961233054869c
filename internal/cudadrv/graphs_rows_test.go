//go:build cuda

package cudadrv_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// graphRow is one row of what an NVIDIA H200 (driver 580.159.04, CUDA 13.0)
// reserved for graphs of known shapes, as its probes printed it
// (driver-costs-and-graph-memory.txt, the graph sections of callcost.c's
// output, and the graph rows of graph-pool-alloc-probe.txt, graphprobe.c's):
// run makes the row's graphs on a kit whose device holds no graph memory
// and returns the figures the probe read, in bytes; rule is what the
// driver's rule gives for the kit's chunk (a graph's memory is its peak
// footprint rounded up to the chunk once; graphs launched one after
// another share it; an allocation outliving its launch pins its chunk;
// destroying a graph exec keeps the memory until a trim).
type graphRow struct {
	name string
	run  func(k *graphKit, s1, s2 uintptr) []int64
	rule func(k *graphKit) []int64
	h200 []float64 // the H200's figures, MiB
	// least, for a row whose graphs were launched back to back on two
	// streams, is the largest of their needs: whether they overlapped on
	// the GPU is not known (timing, not a rule), so that the row is checked
	// within bounds alone, from least to the sum of their needs (rule).
	least func(k *graphKit) int64
}

// figures reads RESERVED_MEM_CURRENT and USED_MEM_CURRENT above the kit's
// base.
func (k *graphKit) reservedUsed() []int64 {
	k.t.Helper()
	g, c := cudadrv.GraphGet(k.ctx)
	require.Equal(k.t, cudadrv.Call{}, c)
	return []int64{g.GraphReserved - k.base.GraphReserved, g.GraphUsed - k.base.GraphUsed}
}

// freedGraph captures on s a graph of n allocation nodes of size bytes,
// all allocated, then all freed, and instantiates it.
func (k *graphKit) freedGraph(s uintptr, n int, size int64) uintptr {
	k.t.Helper()
	g := k.capture(s, func() {
		ptrs := make([]uintptr, n)
		for i := range ptrs {
			ptrs[i] = k.alloc(s, size)
		}
		for _, p := range ptrs {
			require.Equal(k.t, cudadrv.Success, k.free(p, s))
		}
	})
	return k.exec(g)
}

func (k *graphKit) launchSync(e, s uintptr) {
	k.t.Helper()
	require.Equal(k.t, cudadrv.Success, k.launch(e, s))
	k.sync(s)
}

// graphRows are the rows of the H200's files, in their order.
func graphRows() []graphRow {
	var rows []graphRow
	// One graph of one allocation node, freed in the graph, launched once:
	// reserved and used after the launch and after cuGraphExecDestroy,
	// reserved after cuDeviceGraphMemTrim.
	for _, c := range []struct {
		size int64
		h200 float64
	}{{4096, 32}, {1 << 20, 32}, {2 << 20, 32}, {3 << 20, 32}, {20 << 20, 32}, {31 << 20, 32}, {32 << 20, 32},
		{33 << 20, 64}, {40 << 20, 64}, {64 << 20, 64}, {65 << 20, 96}, {100 << 20, 128}, {128 << 20, 128},
		{200 << 20, 224}, {1024 << 20, 1024}} {
		rows = append(rows, graphRow{
			name: fmt.Sprintf("1 x %d B", c.size),
			run: func(k *graphKit, s, _ uintptr) []int64 {
				e := k.freedGraph(s, 1, c.size)
				k.launchSync(e, s)
				got := k.reservedUsed()
				k.destroyExec(e)
				k.sync(s)
				got = append(got, k.reservedUsed()...)
				k.trim()
				return append(got, k.reservedUsed()[0])
			},
			rule: func(k *graphKit) []int64 {
				n := k.need(c.size)
				return []int64{n, n, n, n, 0}
			},
			h200: []float64{c.h200, c.h200, c.h200, c.h200, 0},
		})
	}
	// Several allocation nodes live at once in one graph, all allocated,
	// then all freed.
	for _, c := range []struct {
		n    int
		size int64
		h200 float64
	}{{100, 4 << 10, 32}, {10, 3 << 20, 32}, {4, 20 << 20, 96}, {3, 33 << 20, 128}, {26, 1 << 20, 32}, {26, 4 << 20, 128}} {
		rows = append(rows, graphRow{
			name: fmt.Sprintf("%d x %d B live at once", c.n, c.size),
			run: func(k *graphKit, s, _ uintptr) []int64 {
				k.launchSync(k.freedGraph(s, c.n, c.size), s)
				return k.reservedUsed()
			},
			rule: func(k *graphKit) []int64 { n := k.need(int64(c.n) * c.size); return []int64{n, n} },
			h200: []float64{c.h200, c.h200},
		})
	}
	// Two graphs launched one after another on one stream, both kept
	// instantiated.
	for _, c := range []struct {
		a, b int64
		h200 float64
	}{{20 << 20, 20 << 20, 32}, {28 << 20, 56 << 20, 64}, {56 << 20, 112 << 20, 128}, {40 << 20, 10 << 20, 64}} {
		rows = append(rows, graphRow{
			name: fmt.Sprintf("%d MiB then %d MiB on one stream", c.a>>20, c.b>>20),
			run: func(k *graphKit, s, _ uintptr) []int64 {
				a, b := k.freedGraph(s, 1, c.a), k.freedGraph(s, 1, c.b)
				require.Equal(k.t, cudadrv.Success, k.launch(a, s))
				require.Equal(k.t, cudadrv.Success, k.launch(b, s))
				k.sync(s)
				return k.reservedUsed()
			},
			rule: func(k *graphKit) []int64 { n := max(k.need(c.a), k.need(c.b)); return []int64{n, n} },
			h200: []float64{c.h200, c.h200},
		})
	}
	// A graph whose 8 MiB allocation outlives its launch, then a 12 MiB
	// graph on the stream, then the 8 MiB freed on the stream.
	rows = append(rows, graphRow{
		name: "8 MiB outliving, then 12 MiB, then the 8 MiB freed",
		run: func(k *graphKit, s, _ uintptr) []int64 {
			a, p := k.allocGraph(s, 8<<20, false)
			ea, eb := k.exec(a), k.freedGraph(s, 1, 12<<20)
			k.launchSync(ea, s)
			got := k.reservedUsed()
			k.launchSync(eb, s)
			got = append(got, k.reservedUsed()...)
			require.Equal(k.t, cudadrv.Success, k.free(p, s))
			k.sync(s)
			return append(got, k.reservedUsed()...)
		},
		rule: func(k *graphKit) []int64 {
			a, b := k.need(8<<20), k.need(8<<20)+k.need(12<<20)
			return []int64{a, a, b, b, b, b}
		},
		h200: []float64{32, 32, 64, 64, 64, 64},
	})
	// Graphs on two streams (graphprobe.c).
	twoStreams := func(name string, a, b int64, between bool, h200 float64) graphRow {
		return graphRow{
			name: name,
			run: func(k *graphKit, s1, s2 uintptr) []int64 {
				ea, eb := k.freedGraph(s1, 1, a), k.freedGraph(s2, 1, b)
				require.Equal(k.t, cudadrv.Success, k.launch(ea, s1))
				if between {
					k.sync(s1)
				}
				require.Equal(k.t, cudadrv.Success, k.launch(eb, s2))
				k.sync(s1)
				k.sync(s2)
				return k.reservedUsed()
			},
			rule: func(k *graphKit) []int64 {
				n := max(k.need(a), k.need(b))
				if !between {
					n = k.need(a) + k.need(b) // the bound: memory of their own
				}
				return []int64{n, n}
			},
			h200: []float64{h200, h200},
		}
	}
	together := func(r graphRow, a, b int64) graphRow {
		r.least = func(k *graphKit) int64 { return max(k.need(a), k.need(b)) }
		return r
	}
	rows = append(rows,
		together(twoStreams("20 MiB on s1 and 20 MiB on s2, launched together", 20<<20, 20<<20, false, 32), 20<<20, 20<<20),
		twoStreams("20 MiB on s1, synchronized, then 20 MiB on s2", 20<<20, 20<<20, true, 32),
		graphRow{
			name: "one 20 MiB graph launched on s1, then on s2",
			run: func(k *graphKit, s1, s2 uintptr) []int64 {
				e := k.freedGraph(s1, 1, 20<<20)
				k.launchSync(e, s1)
				k.launchSync(e, s2)
				return k.reservedUsed()
			},
			rule: func(k *graphKit) []int64 { n := k.need(20 << 20); return []int64{n, n} },
			h200: []float64{32, 32},
		},
		together(twoStreams("40 MiB on s1 and 10 MiB on s2, launched together", 40<<20, 10<<20, false, 64), 40<<20, 10<<20),
		graphRow{
			name: "a 20 MiB graph uploaded, not launched",
			run: func(k *graphKit, s, _ uintptr) []int64 {
				require.Equal(k.t, cudadrv.Success, k.upload(k.freedGraph(s, 1, 20<<20), s))
				k.sync(s)
				return k.reservedUsed()
			},
			rule: func(k *graphKit) []int64 { n := k.need(20 << 20); return []int64{n, n} },
			h200: []float64{32, 32},
		},
		graphRow{
			name: "a 20 MiB graph instantiated, not launched",
			run: func(k *graphKit, s, _ uintptr) []int64 {
				k.freedGraph(s, 1, 20<<20)
				return k.reservedUsed()
			},
			rule: func(*graphKit) []int64 { return []int64{0, 0} },
			h200: []float64{0, 0},
		})
	return rows
}

// TestGraphMemoryRows reproduces each row the H200 printed: on every
// driver, the figures the rule gives for the chunk the driver reserves (a
// back-to-back launch on two streams, timing rather than a rule, between
// the largest need and the sum); on the fake, whose chunk is the H200's
// by default, the H200's own figures too.
func TestGraphMemoryRows(t *testing.T) {
	for _, row := range graphRows() {
		t.Run(row.name, func(t *testing.T) {
			k, s1 := newGraphKit(t)
			s2 := newStream(t, k.ctx)
			got := row.run(k, s1, s2)
			want := row.rule(k)
			require.Len(t, want, len(got))
			mibs := make([]float64, len(got))
			for i, v := range got {
				mibs[i] = float64(v) / mib
			}
			t.Logf("%-52s reserved and used, MiB: %v (the H200's: %v; chunk %d MiB)", row.name+":", mibs, row.h200, k.chunk/mib)
			timing := row.least != nil
			if timing {
				for i, v := range got {
					assert.LessOrEqual(t, v, want[i], "figure %d: at most memory of their own", i)
					assert.GreaterOrEqual(t, v, row.least(k), "figure %d: at least the largest need", i)
				}
			} else {
				assert.Equal(t, want, got, "the driver's rule, for a chunk of %d bytes", k.chunk)
			}
			if k.fake && k.chunk == 32*mib && !timing {
				assert.Equal(t, row.h200, mibs, "the H200's figures")
			}
			k.trim()
		})
	}
}

// GraphChunk learns the chunk, on a device that holds no graph memory, by a
// probe that leaves nothing behind: the figures, the high-water marks
// included, are as they were, and a capture in progress, begun in global
// mode by another thread or by the calling one, ends with its graph. On a
// device that holds graph memory it does not run, and leaves that memory
// as it was: a trim would have returned a finished graph's cached memory,
// and the probe could have reused it.
func TestGraphChunk(t *testing.T) {
	k, s := newGraphKit(t)
	t.Run("quiet", func(t *testing.T) {
		k.trim()
		require.Equal(t, cudadrv.Call{}, cudadrv.GraphResetHighs(k.ctx))
		before := k.figures("before the probe")
		const n = 20
		start := time.Now()
		for range n {
			p, c := cudadrv.GraphChunk(k.ctx)
			require.Equal(t, cudadrv.Call{}, c)
			assert.Equal(t, cudadrv.ChunkProbe{Before: before, Ran: true, Chunk: k.chunk}, p)
		}
		t.Logf("chunk %d MiB, %.1f µs a probe", k.chunk/mib, float64(time.Since(start).Microseconds())/n)
		assert.Equal(t, before, k.figures("after the probes"), "nothing left behind, no high-water mark moved")
		if k.fake {
			assert.Equal(t, fakeChunk(t), k.chunk)
		}
	})
	t.Run("graph memory reserved", func(t *testing.T) {
		e, _ := k.launched(s, 8*mib, true)
		held := k.figures("an 8 MiB graph launched")
		require.Positive(t, held.GraphReserved)
		p, c := cudadrv.GraphChunk(k.ctx)
		require.Equal(t, cudadrv.Call{}, c)
		assert.Equal(t, cudadrv.ChunkProbe{Before: held}, p, "not run")
		assert.Equal(t, held, k.figures("after the probe"), "the graph's memory stays reserved")
		k.destroyExec(e)
		k.trim()
	})
	for _, where := range []string{"another thread", "the capturing thread"} {
		t.Run("during a global capture on "+where, func(t *testing.T) {
			k.trim()
			other := newStream(t, k.ctx)
			var p cudadrv.ChunkProbe
			var c cudadrv.Call
			probe := func() { p, c = cudadrv.GraphChunk(k.ctx) }
			k.in(func() {
				require.Equal(t, cudadrv.Success, cudatest.BeginCapture(other, cudatest.CaptureGlobal))
				ptr := k.alloc(other, mib)
				if where == "another thread" {
					var wg sync.WaitGroup
					wg.Go(func() { onThread(t, k.ctx, probe) })
					wg.Wait()
				} else {
					probe()
				}
				require.Equal(t, cudadrv.Success, k.free(ptr, other), "the capture goes on")
				g, r := cudatest.EndCaptureGraph(other)
				require.Equal(t, cudadrv.Success, r, "and ends with its graph")
				k.graphs[g] = true
			})
			require.Equal(t, cudadrv.Call{}, c)
			assert.True(t, p.Ran)
			assert.Equal(t, k.chunk, p.Chunk)
		})
	}
	t.Run("another chunk", func(t *testing.T) {
		if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", "FAKECUDA_GRAPH_CHUNK=4194304") {
			return
		}
		requireFakeDriver(t)
		k, _ := newGraphKit(t)
		assert.Equal(t, int64(4*mib), k.chunk, "the driver's chunk, whatever it is")
	})
}
