//go:build cuda

package main

import (
	"fmt"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
)

// The driver calls of CUDA graphs (begin and end a capture, instantiate,
// launch) are the program's, through its binding; memtrack makes none of
// them. This example makes them through the module's test equipment
// (internal/cudatest), which calls the driver memtrack loads, in place of a
// binding's.

// decodeGraphs is the decode step of a server captured in CUDA graphs, one
// per batch size, on one stream, as a server captures them once the cache
// is sized: their allocations go through memtrack (Category.AllocAsync and
// Buffer.FreeAsync on the capturing stream), which counts what each graph
// needs at a launch (Graphs.Capture) before any is launched.
type decodeGraphs struct {
	dev      memtrack.Device
	ctx      uintptr
	stream   uintptr
	graphs   []uintptr
	execs    []uintptr
	captures []memtrack.Capture
	batches  []int
}

// captureDecode captures a decode step for each batch size of 1, 2, 4, ...
// up to workers, through layers layers with activations of act per
// request, in category cat of dev.
func captureDecode(dev memtrack.Device, cat memtrack.Category, workers, layers int, act int64) (*decodeGraphs, error) {
	if dev.Kind() != memtrack.KindCUDA {
		return nil, fmt.Errorf("-graphs captures CUDA graphs: run it on a CUDA device (-device cuda:0), not %v", dev)
	}
	if err := cudatest.Load(); err != nil {
		return nil, err
	}
	ctx, r := cudadrv.Retain(dev.Ordinal())
	if r != cudadrv.Success {
		return nil, fmt.Errorf("retaining the primary context of %v: CUresult %d", dev, r)
	}
	g := &decodeGraphs{dev: dev, ctx: uintptr(ctx)}
	var err error
	call := func(what string, r cudadrv.Result) {
		if err == nil && r != cudadrv.Success {
			err = fmt.Errorf("%s: CUresult %d (%s)", what, r, cudadrv.Name(r))
		}
	}
	call("cuStreamCreate", cudatest.InContext(g.ctx, func() {
		var r cudadrv.Result
		g.stream, r = cudatest.StreamCreate()
		call("cuStreamCreate", r)
	}))
	for batch := 1; err == nil && batch <= workers; batch *= 2 {
		call("capture", cudatest.InContext(g.ctx, func() {
			call("cuStreamBeginCapture", cudatest.BeginCapture(g.stream, cudatest.CaptureRelaxed))
			if err != nil {
				return
			}
			stepErr := decodeStep(cat, memtrack.Stream(g.stream), layers, int64(batch)*act)
			c, cerr := dev.Graphs().Capture(memtrack.Stream(g.stream)) // final: the capture ends next
			graph, r := cudatest.EndCaptureGraph(g.stream)
			call("cuStreamEndCapture", r)
			if err == nil {
				g.graphs = append(g.graphs, graph)
			}
			for _, e := range []error{stepErr, cerr} {
				if err == nil && e != nil {
					err = e
				}
			}
			if err != nil {
				return
			}
			exec, r := cudatest.GraphInstantiate(graph, false)
			call("cuGraphInstantiateWithFlags", r)
			if err == nil {
				g.execs = append(g.execs, exec)
				g.captures = append(g.captures, c)
				g.batches = append(g.batches, batch)
			}
		}))
	}
	if err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

// decodeStep is one decode step of batch requests' activations of act
// bytes (batch × act): each layer allocates its scratch and output, frees
// the scratch and its input; the residual stream stays live for the step.
// On a capturing stream each allocation and free is a node of the graph.
func decodeStep(cat memtrack.Category, s memtrack.Stream, layers int, act int64) error {
	residual, err := cat.AllocAsync(act, s)
	if err != nil {
		return err
	}
	in, err := cat.AllocAsync(act, s)
	if err != nil {
		return err
	}
	for range layers {
		scratch, err := cat.AllocAsync(4*act, s)
		if err != nil {
			return err
		}
		out, err := cat.AllocAsync(act, s)
		if err != nil {
			return err
		}
		if err := scratch.FreeAsync(s); err != nil {
			return err
		}
		if err := in.FreeAsync(s); err != nil {
			return err
		}
		in = out
	}
	if err := in.FreeAsync(s); err != nil {
		return err
	}
	return residual.FreeAsync(s)
}

// print writes each graph's need, as its capture says.
func (g *decodeGraphs) print() {
	fmt.Printf("decode step captured in CUDA graphs, one per batch size, on one stream (Graphs.Capture):\n")
	for i, c := range g.captures {
		fmt.Printf("  batch %2d: graph needs %s per launch (%d allocation nodes, %d free nodes)\n", g.batches[i], size(c.Need), c.Allocs, c.Frees)
	}
}

// launch launches every graph once, one after another on the stream, and
// waits for them: the driver reserves their memory now.
func (g *decodeGraphs) launch() error {
	var err error
	r := cudatest.InContext(g.ctx, func() {
		for _, e := range g.execs {
			if r := cudatest.GraphLaunch(e, g.stream); r != cudadrv.Success {
				err = fmt.Errorf("cuGraphLaunch: CUresult %d (%s)", r, cudadrv.Name(r))
				return
			}
		}
		if r := cudatest.StreamSynchronize(g.stream); r != cudadrv.Success {
			err = fmt.Errorf("cuStreamSynchronize: CUresult %d (%s)", r, cudadrv.Name(r))
		}
	})
	if err == nil && r != cudadrv.Success {
		err = fmt.Errorf("making the context current: CUresult %d", r)
	}
	return err
}

// close destroys the graph execs, the graphs and the stream.
func (g *decodeGraphs) close() {
	cudatest.InContext(g.ctx, func() {
		for _, e := range g.execs {
			cudatest.GraphExecDestroy(e)
		}
		for _, graph := range g.graphs {
			cudatest.GraphDestroy(graph)
		}
		if g.stream != 0 {
			cudatest.StreamDestroy(g.stream)
		}
	})
	g.execs, g.graphs, g.stream = nil, nil, 0
}
