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
	// Need is the peak of the bytes of the capture's own allocations live
	// at once, in the order they were captured, rounded up once to the
	// chunk in which the driver reserves graph memory ([Graphs.Chunk]):
	// what one launch of the graph needs, which the driver reserves at the
	// graph's first launch or upload. The driver rounds a graph's memory
	// as a whole, not each allocation: an NVIDIA H200 (driver 580.159.04,
	// a chunk of 32 MiB) reserved 32 MiB for one allocation of 4 KiB to 32
	// MiB, 64 for 33 MiB, 32 for 100 allocations of 4 KiB live at once and
	// 96 for four of 20 MiB. Graphs launched one after another on one
	// stream share that memory ([Measurement.WithGraphs]).
	Need int64
	// Outliving is the memory that the capture's allocations it does not
	// free may pin: each launch makes them again, and they stay allocated
	// after it until freed ([Buffer.Free], [Buffer.FreeAsync], or another
	// graph's free node), each pinning every chunk it lies in, apart from
	// every other graph's, wherever the driver placed it among the graph's
	// allocations (the H200: an 8 MiB allocation left live by its launch
	// held one chunk, 32 MiB, where it came first or after 40 MiB the graph
	// freed, and two where it came after 30 MiB). memtrack does not see
	// where the driver places them: it counts the most they may lie in, n
	// allocations of b bytes in at most ceil((b-n)/chunk) + 2n - 1 chunks,
	// and never more than Need, which it is part of.
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
	c := capturesOf(s, g.dev.ordinal).OnStream(uintptr(stream), st)
	chunk, err := s.graphChunk(g.dev, c.PeakBytes)
	if err != nil {
		return Capture{Device: g.dev}, err
	}
	return captureOf(g.dev, c, chunk), nil
}

// Captures returns the captures memtrack saw on the device, the oldest
// first: those in progress and the last [MaxCaptures] that ended, each as
// memtrack last saw it. It asks the driver nothing about their streams: a
// stream's handle is the program's, which may have destroyed it, and a
// call with a destroyed stream's handle is undefined behaviour (an NVIDIA
// H200 stopped the process with SIGSEGV). So a capture that ended since
// memtrack last saw it reads Capturing until memtrack sees its stream
// again: [Graphs.Capture] of that stream, or an allocation or free node of
// a later capture on it. Read a capture with Graphs.Capture just before it
// ends, as that method says, for its final state. A capture invalidated
// unseen reads as memtrack last saw it too (see [Capture]). It fails as
// [Graphs.Stats] does.
func (g Graphs) Captures() ([]Capture, error) {
	s, err := g.graphs("Graphs().Captures", false)
	if err != nil {
		return nil, err
	}
	set := slotOf[captures.Set](s, g.dev.ordinal, capturesSlot, nil)
	if set == nil {
		return nil, nil
	}
	list := set.List()
	var bytes int64
	for _, c := range list {
		bytes = max(bytes, c.PeakBytes)
	}
	chunk, err := s.graphChunk(g.dev, bytes)
	if err != nil {
		return nil, err
	}
	out := make([]Capture, len(list))
	for i, c := range list {
		out[i] = captureOf(g.dev, c, chunk)
	}
	return out, nil
}

// Chunk returns the chunk in which the CUDA driver reserves the device's
// graph memory: one graph's memory is its peak footprint rounded up to it,
// and an allocation that outlives its launch pins every chunk it lies in
// ([Capture].Need and Outliving are counted in it). NVIDIA documents no
// chunk (an NVIDIA H200 with driver 580.159.04 reserves 32 MiB), so
// memtrack learns it from the driver, once per device: a probe graph of
// one allocation node of 1 byte, captured on a stream of memtrack's own in
// relaxed capture mode, uploaded (cuGraphUpload), measured by the growth
// of the device's reserved graph memory, destroyed, and trimmed
// (cuDeviceGraphMemTrim), about 100 µs (the H200: 162 µs through Python's
// ctypes). No call of the probe fails for, or invalidates, a capture that
// the program has begun, in any mode and on any thread. The probe runs at
// the device's first allocation in a capture, and at a reading that needs
// the chunk while it is not learned, only where the device holds no graph
// memory: there the trim returns the probe's reservation alone, and no
// finished graph's memory can serve the probe, so that its reading is
// exact. Where the device holds graph memory at each try, learned is false
// and chunk is the greatest common divisor of the reserved graph memory
// and its high-water mark, both whole chunks, so a multiple of the chunk:
// what it rounds to is never below what the driver reserves. It fails with
// [ErrNotSupported] as [Graphs.Stats] does, and on an AMD GPU, where
// memtrack adds no node to a graph.
func (g Graphs) Chunk() (chunk int64, learned bool, err error) {
	s, err := g.graphs("Graphs().Chunk", false)
	if err != nil {
		return 0, false, err
	}
	chunk, learned, err = s.stream.graphChunk(g.dev.ordinal)
	return chunk, learned, fillError(err, g.dev, 0, nil)
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

// captureOf returns c, a capture of device d, as a Capture, its bytes in
// whole chunks of d's graph memory.
func captureOf(d Device, c captures.Capture, chunk int64) Capture {
	need := captures.RoundUp(c.PeakBytes, chunk)
	return Capture{Device: d, ID: c.ID, Stream: Stream(c.Stream), Capturing: c.Capturing, Invalidated: c.Invalidated,
		Allocs: c.Allocs, Frees: c.Frees, Need: need, Outliving: captures.Pinned(c.OutlivingBytes, c.OutlivingAllocs, need, chunk)}
}
