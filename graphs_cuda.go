//go:build cuda

package memtrack

import (
	"fmt"
	"math"

	"github.com/memtrack/memtrack/internal/cudadrv"
)

// CUDA graph memory is the CUDA backend's capability, with stream-ordered
// allocation (streamBackend): allocAsync allocates in a capture's graph
// (cuda_stream.go), and these read what the driver says of captures and of
// the memory it keeps for graphs, free a graph's allocation, and trim.
// Each is one cgo call.

// graphsSupported fails where the driver has no graph memory nodes (CUDA
// before 11.4, or without one of their calls).
func (b *cudaBackend) graphsSupported(ordinal int) error {
	if b.captureMode == cudadrv.AllowCapture {
		return nil
	}
	d := Device{kind: KindCUDA, ordinal: ordinal}
	if err := cudadrv.GraphMem(); err != nil {
		return fmt.Errorf("%w: CUDA graph memory on %v: %w", ErrNotSupported, d, err)
	}
	return fmt.Errorf("%w: CUDA graph memory on %v: the CUDA driver is unavailable", ErrNotSupported, d)
}

// graphRounded returns the bytes of graph memory that an allocation node
// of size bytes on dev takes: size rounded up to the device's allocation
// granularity, which the driver gives (cudadrv.Granularity) and dev keeps.
// Each node in whole granules of its own is what the driver maps at most:
// a driver that packs a graph's nodes together maps less
// (testdata/fakecuda/RULES.md, FAKECUDA_GRAPH_ROUND).
func graphRounded(dev *cudaDevice, size int64) (int64, error) {
	g := dev.granule.Load()
	if g == 0 {
		n, r := cudadrv.Granularity(dev.ordinal)
		if r != cudadrv.Success {
			return 0, resultError("allocation granularity", "asking the device's allocation granularity, in which graph memory is mapped", r)
		}
		if n <= 0 {
			return 0, fmt.Errorf("%w: cuda:%d: the driver gives an allocation granularity of %d bytes", ErrNotSupported, dev.ordinal, n)
		}
		dev.granule.Store(n)
		g = n
	}
	if size > math.MaxInt64-(g-1) {
		return math.MaxInt64, nil
	}
	return (size + g - 1) / g * g, nil
}

// captureOf asks the driver what capture stream takes part in.
func (b *cudaBackend) captureOf(ordinal int, stream Stream) (captureState, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "capture info")
	if err != nil {
		return captureState{}, fillError(err, d, 0, nil)
	}
	c := cudadrv.CheckStream(ctx, uintptr(stream))
	if c.OtherDevice && c.Enter == cudadrv.Success {
		dev.settle("capture info", resultOf(c.Call))
		return captureState{}, fmt.Errorf("%w: Graphs().Capture on %v with stream %#x, which belongs to cuda:%d; use a stream of %v",
			ErrInvalidArgument, d, uintptr(stream), c.StreamDevice, d)
	}
	if err := dev.settle("capture info", resultOf(c.Call)); err != nil {
		return captureState{}, fillError(err, d, 0, nil)
	}
	return captureState{ID: c.CaptureID, Capturing: c.Capturing, Invalidated: c.CaptureStatus == cudadrv.CaptureInvalidated}, nil
}

// freeGraph frees m, a graph's allocation, on stream (cuMemFreeAsync, no
// event: the memory is the graph's, in no figure that waits for the free).
func (b *cudaBackend) freeGraph(ordinal int, size int64, m *memory, stream Stream) (uint64, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "free")
	if err != nil {
		return 0, fillError(err, d, size, nil)
	}
	f := cudadrv.FreeGraph(ctx, m.ptr, uintptr(stream))
	if (f.OtherDevice || f.CaptureStatus == cudadrv.CaptureInvalidated) && f.Enter == cudadrv.Success {
		dev.settle("free", resultOf(f.Call)) // a failed restore is logged there
		return 0, refusedStream("FreeAsync", d, stream, f)
	}
	if err := dev.settle("free", resultOf(f.Call)); err != nil {
		if f.Invalidated {
			return 0, &invalidatedIn{id: f.CaptureID, err: err}
		}
		return 0, fillError(err, d, size, nil)
	}
	return f.CaptureID, nil
}

// graphStats reads the graph memory figures of device ordinal.
func (b *cudaBackend) graphStats(ordinal int) (GraphStats, error) {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "graph memory")
	if err != nil {
		return GraphStats{}, fillError(err, d, 0, nil)
	}
	g, c := cudadrv.GraphGet(ctx)
	if err := dev.settle("graph memory", resultOf(c)); err != nil {
		return GraphStats{}, fillError(err, d, 0, nil)
	}
	return GraphStats{GraphReserved: g.GraphReserved, PeakGraphReserved: g.PeakGraphReserved,
		GraphUsed: g.GraphUsed, PeakGraphUsed: g.PeakGraphUsed}, nil
}

// trimGraphs returns the graph memory of device ordinal that no graph
// uses to the device (cuDeviceGraphMemTrim).
func (b *cudaBackend) trimGraphs(ordinal int) error {
	d := Device{kind: KindCUDA, ordinal: ordinal}
	dev, ctx, err := b.device(ordinal, "trim graphs")
	if err != nil {
		return fillError(err, d, 0, nil)
	}
	return fillError(dev.settle("trim graphs", resultOf(cudadrv.GraphTrim(ctx))), d, 0, nil)
}

// resetGraphHighs resets the graph memory high-water marks of device
// ordinal, where its driver has graph memory (cuDeviceSetGraphMemAttribute
// accepts 0 alone for them).
func (b *cudaBackend) resetGraphHighs(ordinal int) {
	if b.captureMode != cudadrv.AllowCapture {
		return
	}
	if dev, ctx, err := b.device(ordinal, "reset graph highs"); err == nil {
		dev.settle("reset graph highs", resultOf(cudadrv.GraphResetHighs(ctx)))
	}
}
