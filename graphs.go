package memtrack

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"
)

// Graphs is the CUDA graph memory of one device: the graphs that its
// streams capture, with what each will need at a launch, and the memory the
// driver keeps for them. Obtain it with [Device.Graphs]; it is a small
// comparable value, as [Device] is. On a device that is not a CUDA GPU, or
// whose driver has no graph memory nodes (CUDA before 11.4, or a device
// without memory pools), its methods fail with [ErrNotSupported].
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

// MaxCaptures is how many ended captures each device keeps, besides those
// in progress, for [Graphs.Captures] and [Graphs.Capture]: the most
// recently ended ones. A program that captures more graphs keeps the
// [Capture] values it needs itself (read each with Graphs.Capture just
// before it ends the capture).
const MaxCaptures = 4096

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
	if err != nil {
		return Capture{Device: g.dev}, err
	}
	return graphCapturesOf(s, g.dev.ordinal).onStream(g.dev, stream, st), nil
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
	gc := slotOf[graphCaptures](s, g.dev.ordinal, graphsSlot, nil)
	if gc == nil {
		return nil, nil
	}
	return gc.list(g.dev, func(stream Stream) (captureState, error) {
		return s.stream.captureOf(g.dev.ordinal, stream)
	}), nil
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
	return s.stream.trimGraphs(g.dev.ordinal)
}

// graphBuffer is a graph's buffer: the Buffer that AllocAsync returns on a
// capturing stream, with the capture it belongs to.
type graphBuffer struct {
	Buffer
	capture *capture
}

// graphOf returns the graphBuffer of b, a buffer whose source is
// fromGraph: Device.captured made it as the first field of one.
func graphOf(b *Buffer) *graphBuffer { return (*graphBuffer)(unsafe.Pointer(b)) }

// captured is the tail of the allocation path for a graph's allocation:
// the stream-ordered allocation that r asked for, which the backend made in
// capture id at memory m, with the graph memory it takes in m.reserved
// where the backend rounds it. The capture counts that; the ledger, the
// device-side figure and the hooks do not, since the host holds nothing
// of it between the graph's launches.
func (d Device) captured(s *deviceTable, r *request, m memory, id uint64) *Buffer {
	rounded := r.size
	if m.reserved > 0 {
		rounded = m.reserved // the graph memory the node takes (cudaBackend.inCapture)
	}
	c := graphCapturesOf(s, d.ordinal).allocated(id, r.stream, rounded)
	g := &graphBuffer{capture: c}
	g.fill(d, r)
	g.mem, g.from, g.cat, g.state = m, fromGraph, 0, stateGraph
	g.self = &g.Buffer
	return &g.Buffer
}

// takeInCapture is the allocation path of a stream-ordered request that a
// limit refused: where the stream captures a graph, the graph's allocation
// (no limit is on it: it is not tracked); where the stream is bad input,
// its error. It returns neither where the stream is not capturing, and the
// limit's refusal stands.
func (d Device) takeInCapture(s *deviceTable, r *request) (*Buffer, error) {
	var m memory
	id, err := s.stream.allocInCapture(d.ordinal, r.size, r.stream, &m)
	if err != nil {
		if u, ok := err.(uncounted); ok {
			return nil, d.invalidatedBy(s, r, u.err)
		}
		return nil, err
	}
	if id == 0 {
		return nil, nil
	}
	return d.captured(s, r, m, id), nil
}

// releaseGraph is the release path of a graph's buffer, which no claim
// takes: the backend frees it now (Free: cuMemFree) or in stream order
// (FreeAsync: cuMemFreeAsync). On a stream that captures its own graph the
// free is a free node of it: the capture's figures count it, and the buffer
// is freed. Elsewhere the free is of the allocation of the graph's last
// launch, which outlived it (or, on a stream that captures another graph,
// a free node of that graph, which frees it at that graph's launch): the
// buffer stays the graph's, to be freed again after the next launch, and no
// figure moves. The driver refuses a free of an allocation that is not
// live.
func (b *Buffer) releaseGraph(how releaseKind, stream Stream) error {
	t := tableOf(b.kind)
	o := int(b.ordinal)
	c := graphOf(b).capture
	if how != freeInStream {
		if err := t.b.free(o, b.size, &b.mem); err != nil {
			return notLive(err, b)
		}
		return nil
	}
	id, err := t.stream.freeGraph(o, b.size, &b.mem, stream)
	if err != nil {
		if e, ok := err.(*invalidatedIn); ok {
			graphCapturesOf(t, o).invalidated(e.id, stream)
			return wrapf(fillError(e.err, b.Device(), b.size, nil),
				"free node of a %d-byte graph allocation at %#x in CUDA graph capture %d on %v, refused (a graph frees an allocation once, cuGraphAddMemFreeNode); the driver invalidated the capture, which ends with no graph",
				b.size, b.mem.ptr, e.id, b.Device())
		}
		return notLive(err, b)
	}
	switch {
	case id == 0:
	case id == c.id:
		if b.moveState(stateGraph, stateFreed) { // the driver takes one free node of an allocation in its graph
			graphCapturesOf(t, o).freed(id, stream, b.RoundedSize())
		}
	default:
		graphCapturesOf(t, o).freed(id, stream, 0)
	}
	return nil
}

// invalidatedIn is the error of an allocation or free node that the driver
// refused in the active capture id, which it left invalidated: the one way
// memtrack learns which capture the driver invalidated, since the driver
// gives an invalidated capture no ID. The path that meets it records the
// invalidation in the capture's record.
type invalidatedIn struct {
	id  uint64
	err error
}

func (e *invalidatedIn) Error() string { return e.err.Error() }
func (e *invalidatedIn) Unwrap() error { return e.err }

// invalidatedBy returns err, the error of stream-ordered request r that
// counted nothing; where it is an allocation node that the driver refused
// in a capture it then invalidated, the capture's record says so, and the
// error names the capture.
func (d Device) invalidatedBy(s *deviceTable, r *request, err error) error {
	e, ok := err.(*invalidatedIn)
	if !ok {
		return err
	}
	graphCapturesOf(s, d.ordinal).invalidated(e.id, r.stream)
	return wrapf(e.err, "allocation node in CUDA graph capture %d on %v, refused; the driver invalidated the capture, which ends with no graph", e.id, d)
}

// notLive completes the error of a refused free of graph buffer b.
func notLive(err error, b *Buffer) error {
	if _, ok := err.(*BackendError); ok {
		return wrapf(fillError(err, b.Device(), b.size, nil),
			"free of a %d-byte graph allocation at %#x (a graph's allocation is live from each launch of its graph until freed; its own capture frees it once)",
			b.size, b.mem.ptr)
	}
	return fillError(err, b.Device(), b.size, nil)
}

// graphsSlot is the slot of the CUDA graphs' captures (hooks.go).
const graphsSlot = 5

// graphCapturesOf returns the captures of device ordinal of s, which is in
// use, making them on first use.
func graphCapturesOf(s *deviceTable, ordinal int) *graphCaptures {
	return slotOf(s, ordinal, graphsSlot, func() *graphCaptures { return new(graphCaptures) })
}

// graphCaptures is the captures memtrack saw on one device, in its state,
// under one lock: capture is not the allocation path of a program's steps, which
// launch the graphs.
type graphCaptures struct {
	mu       sync.Mutex
	byID     map[uint64]*capture
	byStream map[Stream]*capture // each stream's last capture
	ended    []*capture          // the captures that ended, the oldest first, at most MaxCaptures
	// outliving is the Outliving of every capture counted on the device,
	// those forgotten past MaxCaptures included, less those known
	// invalidated (Measurement.EndGraphOutliving).
	outliving int64
}

// capture is one capture's figures, guarded by its device's
// graphCaptures.mu.
type capture struct {
	id                     uint64
	stream                 Stream
	streams                []Stream // the streams whose last capture it is
	capturing, invalidated bool
	allocs, frees          int64
	live, need             int64
}

// seenLocked returns the record of capture id, seen on stream, making it;
// a stream takes part in one capture at a time, and leaves it only when
// the capture ends, so the stream's last capture, if another, has ended.
// The lock is held.
func (g *graphCaptures) seenLocked(id uint64, stream Stream) *capture {
	if g.byID == nil {
		g.byID, g.byStream = map[uint64]*capture{}, map[Stream]*capture{}
	}
	c := g.byID[id]
	if c == nil {
		c = &capture{id: id, stream: stream, capturing: true}
		g.byID[id] = c
	}
	if prev := g.byStream[stream]; prev != c {
		if prev != nil {
			g.endLocked(prev)
		}
		g.byStream[stream] = c
		c.streams = append(c.streams, stream)
	}
	return c
}

// endLocked records that c has ended, and forgets the oldest ended
// captures past MaxCaptures. The lock is held.
func (g *graphCaptures) endLocked(c *capture) {
	if !c.capturing {
		return
	}
	c.capturing = false
	g.ended = append(g.ended, c)
	for len(g.ended) > MaxCaptures {
		old := g.ended[0]
		g.ended[0] = nil
		g.ended = g.ended[1:]
		delete(g.byID, old.id)
		for _, s := range old.streams {
			if g.byStream[s] == old {
				delete(g.byStream, s)
			}
		}
	}
}

// allocated counts an allocation node of size bytes that capture id,
// seen on stream, just made, and returns the capture's record.
func (g *graphCaptures) allocated(id uint64, stream Stream, size int64) *capture {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.seenLocked(id, stream)
	c.allocs++
	c.live += size
	c.need = max(c.need, c.live)
	if !c.invalidated {
		g.outliving += size
	}
	return c
}

// freed counts a free node of capture id, seen on stream, which frees
// size bytes of its own allocations (0 for another graph's allocation).
func (g *graphCaptures) freed(id uint64, stream Stream, size int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.seenLocked(id, stream)
	c.frees++
	c.live -= size
	if !c.invalidated {
		g.outliving -= size
	}
}

// graphOutliving returns the Outliving of every capture counted on device
// ordinal, but those known invalidated (graphCaptures.outlivingNow).
func (s *deviceTable) graphOutliving(ordinal int) int64 {
	if g := slotOf[graphCaptures](s, ordinal, graphsSlot, nil); g != nil {
		return g.outlivingNow()
	}
	return 0
}

// outlivingNow returns the Outliving of every capture counted on the
// device, but those known invalidated, whose graphs never launch.
func (g *graphCaptures) outlivingNow() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.outliving
}

// invalidated records that the driver invalidated capture id, seen on
// stream, which memtrack learned by its ID.
func (g *graphCaptures) invalidated(id uint64, stream Stream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.seenLocked(id, stream); !c.invalidated {
		c.invalidated = true
		g.outliving -= c.live
	}
}

// onStream returns the capture of device d that stream takes part in, as
// the driver reported it (st), or the stream's last one. A stream in an
// invalidated capture, which the driver names by no ID, reads as such,
// and no record moves: the stream's last capture may be it, or may have
// ended before it began.
func (g *graphCaptures) onStream(d Device, stream Stream, st captureState) Capture {
	g.mu.Lock()
	defer g.mu.Unlock()
	var c *capture
	switch {
	case st.id != 0:
		c = g.seenLocked(st.id, stream)
	case st.invalidated:
		return Capture{Device: d, Stream: stream, Capturing: true, Invalidated: true}
	case g.byStream != nil:
		c = g.byStream[stream]
		if c != nil && !st.capturing {
			g.endLocked(c)
		}
	}
	if c == nil {
		return Capture{Device: d, Stream: stream}
	}
	return c.value(d)
}

// list returns the captures of device d, the oldest first, after asking
// the driver (query) whether those in progress still are.
func (g *graphCaptures) list(d Device, query func(Stream) (captureState, error)) []Capture {
	g.mu.Lock()
	var ongoing []*capture
	for _, c := range g.byID {
		if c.capturing {
			ongoing = append(ongoing, c)
		}
	}
	g.mu.Unlock()
	// The driver is asked without the lock: a capture that ends meanwhile
	// is seen ended next time.
	states := make([]captureState, len(ongoing))
	errs := make([]error, len(ongoing))
	for i, c := range ongoing {
		states[i], errs[i] = query(c.stream)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, c := range ongoing {
		switch {
		case errs[i] != nil:
			// Its stream is gone: nothing captures on it any more.
			g.endLocked(c)
		case states[i].id == c.id:
		case states[i].invalidated:
			// An invalidated capture, with no ID: c, or one begun after
			// c ended. Nothing is known of c.
		default:
			g.endLocked(c)
		}
	}
	out := make([]Capture, 0, len(g.byID))
	for _, c := range g.byID {
		out = append(out, c.value(d))
	}
	slices.SortFunc(out, func(a, b Capture) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// value returns c as a Capture of device d. The lock is held.
func (c *capture) value(d Device) Capture {
	return Capture{Device: d, ID: c.id, Stream: c.stream, Capturing: c.capturing, Invalidated: c.invalidated,
		Allocs: c.allocs, Frees: c.frees, Need: c.need, Outliving: c.live}
}
