package memtrack

import "github.com/memtrack/memtrack/internal/captures"

// Graphs is the CUDA graph memory of one device: the graphs that its
// streams capture, with what each will need at a launch, and the memory the
// driver keeps for them. Obtain it with [Device.Graphs]; it is a small
// comparable value, as [Device] is. On a device that is not a CUDA GPU, or
// whose driver has no graph memory nodes (CUDA before 11.4, or a device
// without memory pools), its methods fail with [ErrNotSupported]; on an AMD
// GPU, Stats and Trim give the HIP runtime's graph memory figures (ROCm
// 5.3), and memtrack captures nothing (docs/rocm.md).
//
// While a stream captures a graph (cuStreamBeginCapture), [Device.AllocAsync]
// on it adds an allocation node to the graph and [Buffer.FreeAsync] a free
// node: the graph allocates and frees that memory at each launch, at an
// address fixed across launches, which the buffer's DevicePtr gives at
// once. Such a buffer is the graph's: the host holds nothing of it between
// launches, so it is in no figure of the device's ([Stats], its categories,
// the memory limit, the history, the leak watch). Its capture counts it,
// and [Capture].Need is what one launch of the graph needs. See
// docs/graphs.md.
type Graphs struct{ dev Device }

// Graphs returns the device's graph memory.
func (d Device) Graphs() Graphs { return Graphs{dev: d} }

// Device returns the device of the graphs.
func (g Graphs) Device() Device { return g.dev }

// Capture is what memtrack counted of one stream capture (a CUDA graph,
// once the capture ends) on a device: the allocation and free nodes that
// [Device.AllocAsync] and [Buffer.FreeAsync] added to it, and what they
// make the graph need at each launch.
type Capture struct {
	Device Device
	// ID is the driver's ID of the capture, unique over the process's
	// lifetime (cuStreamGetCaptureInfo); 0 for none.
	ID uint64
	// Stream is the stream memtrack first saw in the capture: the one the
	// capture began on, unless memtrack first saw a stream that joined it
	// (by waiting for an event recorded in it).
	Stream Stream
	// Capturing says that the capture was still in progress when memtrack
	// last saw it. Invalidated says that the driver invalidated it: it
	// ends with no graph, and nothing of it will launch. The driver names
	// an invalidated capture by no ID, so Invalidated is known in two
	// cases only: a reading of a stream whose capture the driver has
	// invalidated ([Graphs.Capture] while it is in progress) has
	// Invalidated and no ID, and stands for that reading alone; and the
	// capture's own record has Invalidated where memtrack's own
	// allocation or free node in it, made just after the driver gave its
	// ID, was refused and left it invalidated. A capture invalidated
	// otherwise (by another call on its streams) keeps Invalidated false
	// in its record: whether a capture made a graph is what
	// cuStreamEndCapture returns, and a program reads the capture just
	// before that call, as [Graphs.Capture] says.
	Capturing, Invalidated bool
	// Allocs and Frees are the allocation and free nodes memtrack added
	// to the capture's graph (a free node of another graph's allocation
	// included).
	Allocs, Frees int64
	// Need is the peak of the capture's own allocations, in the order
	// they were captured, each rounded up to the device's allocation
	// granularity (cuMemGetAllocationGranularity, 2 MiB on current GPUs;
	// [Buffer.RoundedSize] of the allocation's buffer): what one launch
	// of the graph needs. The driver reserves it at the graph's first
	// launch or upload; a driver that packs a graph's allocations into
	// shared granules, which the documentation leaves open, reserves less
	// (down to the peak of the bytes asked for, rounded up once), never
	// more. Graphs launched one after another on one stream share that
	// memory ([Measurement.WithGraphs]).
	Need int64
	// Outliving is the memory of the capture's allocations that the
	// capture does not free, rounded as in Need: each launch makes them
	// again, and they stay allocated after it until freed ([Buffer.Free],
	// [Buffer.FreeAsync], or another graph's free node), their physical
	// memory apart from every other graph's. It is part of Need.
	Outliving int64
}

// graphs returns the device table of the device, or the error of graph
// call op where the device has no graph memory: as [Device.streamTable]
// says, and a CUDA device needs graph memory nodes besides memory pools.
func (g Graphs) graphs(op string, change bool) (*deviceTable, error) {
	s, _, err := g.dev.streamTable(op, change, "CUDA graphs")
	if err != nil {
		return nil, err
	}
	if _, err := s.graphMemory(g.dev); err != nil {
		return nil, err
	}
	return s, nil
}

// Capture returns the capture that stream takes part in, as the driver
// reports it now, or, where the stream is not capturing, the last capture
// memtrack saw on it; ID is 0 where there is none. Read it just before
// the capture ends (cuStreamEndCapture), when it is final, to know what the
// graph will need before it is launched: a capture the driver has
// invalidated then reads Invalidated, with no ID (the driver gives an
// invalidated capture none, so that memtrack cannot tell it from the
// stream's last capture, which may have ended before it began), and
// [Measurement.WithGraphs] refuses it. Read after the capture ended, it
// is the record memtrack kept, Invalidated only where memtrack learned
// of the invalidation by the capture's ID (see [Capture]). It fails with
// [ErrInvalidArgument] for a stream of another device, and as
// [Graphs.Stats] does.
func (g Graphs) Capture(stream Stream) (Capture, error) {
	s, err := g.graphs("Graphs().Capture", false)
	if err != nil {
		return Capture{Device: g.dev}, err
	}
	st, err := s.stream.captureOf(g.dev.ordinal, stream)
	err = fillError(err, g.dev, 0, nil)
	if err != nil {
		return Capture{Device: g.dev}, err
	}
	return captureOf(g.dev, capturesOf(s, g.dev.ordinal).OnStream(uintptr(stream), st)), nil
}

// Captures returns the captures memtrack saw on the device, the
// oldest first: those in progress, whose state it asks the driver, and the
// last [MaxCaptures] that ended. A capture whose stream the driver reports
// in an invalidated capture, which it names by no ID, is left as it was
// (see [Capture]). It fails as [Graphs.Stats] does.
func (g Graphs) Captures() ([]Capture, error) {
	s, err := g.graphs("Graphs().Captures", false)
	if err != nil {
		return nil, err
	}
	set := slotOf[captures.Set](s, g.dev.ordinal, capturesSlot, nil)
	if set == nil {
		return nil, nil
	}
	list := set.List(func(stream uintptr) (captureState, error) {
		return s.stream.captureOf(g.dev.ordinal, Stream(stream))
	})
	out := make([]Capture, len(list))
	for i, c := range list {
		out[i] = captureOf(g.dev, c)
	}
	return out, nil
}

// Stats returns the driver's graph memory figures of the device. It fails
// with [ErrNotSupported] on a device that is not a CUDA GPU, has no memory
// pools, or whose driver has no graph memory nodes (CUDA before 11.4).
func (g Graphs) Stats() (GraphStats, error) {
	s, err := g.graphs("Graphs().Stats", false)
	if err != nil {
		return GraphStats{Device: g.dev}, err
	}
	st, err := s.stream.graphStats(g.dev.ordinal)
	err = fillError(err, g.dev, 0, nil)
	st.Device = g.dev
	return st, err
}

// Trim returns to the device the graph memory that no graph uses now
// (cuDeviceGraphMemTrim): what no launch in flight or scheduled maps, and no
// allocation that outlived its launch holds. Freeing a graph's allocations,
// or destroying the graph, returns nothing to the device: Trim does, as
// [Pool.Trim] does for the memory pool, which is another pool. It fails as
// [Graphs.Stats] does.
func (g Graphs) Trim() error {
	s, err := g.graphs("Graphs().Trim", true)
	if err != nil {
		return err
	}
	return fillError(s.stream.trimGraphs(g.dev.ordinal), g.dev, 0, nil)
}

// captureOf returns c, a capture of device d, as a Capture.
func captureOf(d Device, c captures.Capture) Capture {
	return Capture{Device: d, ID: c.ID, Stream: Stream(c.Stream), Capturing: c.Capturing, Invalidated: c.Invalidated,
		Allocs: c.Allocs, Frees: c.Frees, Need: c.Need, Outliving: c.Outliving}
}
