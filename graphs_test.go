package memtrack

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGraphsCheckOrder: the graph calls check in one order in every build,
// as the pool's do: the device (ErrInvalidDevice for the zero Device,
// ErrNotSupported for a device that is not a CUDA GPU), counting nothing.
func TestGraphsCheckOrder(t *testing.T) {
	cpu := freshCPU(t)
	for _, dev := range []struct {
		name string
		d    Device
		want error
	}{{"zero Device", Device{}, ErrInvalidDevice}, {"cpu", cpu, ErrNotSupported}, {"metal", Device{kind: KindMetal}, ErrNotSupported}} {
		t.Run(dev.name, func(t *testing.T) {
			g := dev.d.Graphs()
			assert.Equal(t, dev.d, g.Device())
			c, err := g.Capture(DefaultStream)
			assert.ErrorIs(t, err, dev.want)
			assert.Equal(t, Capture{Device: dev.d}, c)
			list, err := g.Captures()
			assert.ErrorIs(t, err, dev.want)
			assert.Nil(t, list)
			st, err := g.Stats()
			assert.ErrorIs(t, err, dev.want)
			assert.Equal(t, GraphStats{Device: dev.d}, st)
			assert.ErrorIs(t, g.Trim(), dev.want)
		})
	}
	u, err := cpu.Usage()
	require.NoError(t, err)
	assert.NoError(t, u.GraphErr, "a device without CUDA graphs misses nothing")
	assert.Zero(t, u.GraphReserved)
	assert.Equal(t, Stats{Device: cpu}, cpu.MemoryStats(), "nothing counted")
}

// TestGraphsThroughTheBackend: AllocAsync and FreeAsync on a stream that
// captures a graph reach the backend's graph capability, in every build:
// the buffers are the graph's, counted in their capture and in no figure
// of the device's, and a free node of the buffer's own capture frees it.
func TestGraphsThroughTheBackend(t *testing.T) {
	f := &fakeStreams{fakeBackend: newFakeBackend(1, 1<<20), capturing: map[Stream]uint64{7: 41, 8: 42}}
	useBackend(t, KindCUDA, f)
	d, err := CUDA(0)
	require.NoError(t, err)
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	require.NoError(t, d.SetMemoryLimit(100))
	before := d.MemoryStats()

	a, err := d.AllocAsync(300, 7) // above the limit: no limit is on a graph's allocation
	require.NoError(t, err)
	b, err := kv.AllocAsync(200, 7)
	require.NoError(t, err)
	c, err := d.AllocAsync(50, 8)
	require.NoError(t, err)
	assert.NotZero(t, a.DevicePtr(), "the node's address")
	assert.Equal(t, before, d.MemoryStats(), "no figure of the device's moves")
	assert.Zero(t, kv.Stats().Tracked, "nor its category's")

	require.NoError(t, a.FreeAsync(7))
	assert.True(t, a.Freed(), "freed by a free node of its capture")
	assert.Zero(t, a.DevicePtr())
	assert.ErrorIs(t, a.FreeAsync(7), ErrDoubleFree)
	assert.Equal(t, 1, f.graphFrees, "the second free asks nothing of the driver")
	require.NoError(t, c.FreeAsync(7), "a free node of capture 41 of capture 42's allocation")
	assert.False(t, c.Freed(), "another graph frees it at each of its launches")

	got, err := d.Graphs().Capture(7)
	require.NoError(t, err)
	assert.Equal(t, Capture{Device: d, ID: 41, Stream: 7, Capturing: true, Allocs: 2, Frees: 2, Need: 500, Outliving: 200}, got)
	got, err = d.Graphs().Capture(8)
	require.NoError(t, err)
	assert.Equal(t, Capture{Device: d, ID: 42, Stream: 8, Capturing: true, Allocs: 1, Need: 50, Outliving: 50}, got)

	delete(f.capturing, 7) // the capture ends
	got, err = d.Graphs().Capture(7)
	require.NoError(t, err)
	assert.Equal(t, Capture{Device: d, ID: 41, Stream: 7, Allocs: 2, Frees: 2, Need: 500, Outliving: 200}, got, "the last capture memtrack saw on the stream")
	list, err := d.Graphs().Captures()
	require.NoError(t, err)
	assert.Equal(t, []Capture{got, {Device: d, ID: 42, Stream: 8, Capturing: true, Allocs: 1, Need: 50, Outliving: 50}}, list)
	none, err := d.Graphs().Capture(9)
	require.NoError(t, err)
	assert.Equal(t, Capture{Device: d, Stream: 9}, none, "a stream memtrack never saw capturing")

	require.NoError(t, b.FreeAsync(7), "after the launch: the launch's allocation")
	assert.False(t, b.Freed(), "the graph allocates it again at its next launch")
	assert.Equal(t, before, d.MemoryStats())

	f.freeErr = errFakeDriver
	assert.ErrorIs(t, b.FreeAsync(7), errFakeDriver, "the driver's refusal")
	f.freeErr = nil

	f.graphs = GraphStats{GraphReserved: 2 << 20, PeakGraphReserved: 4 << 20, GraphUsed: 1 << 20, PeakGraphUsed: 3 << 20}
	st, err := d.Graphs().Stats()
	require.NoError(t, err)
	assert.Equal(t, GraphStats{Device: d, GraphReserved: 2 << 20, PeakGraphReserved: 4 << 20, GraphUsed: 1 << 20, PeakGraphUsed: 3 << 20}, st)
	u, err := d.Usage()
	require.NoError(t, err)
	assert.Equal(t, [4]int64{2 << 20, 4 << 20, 1 << 20, 3 << 20}, [4]int64{u.GraphReserved, u.PeakGraphReserved, u.GraphUsed, u.PeakGraphUsed})
	require.NoError(t, d.Graphs().Trim())
	assert.Equal(t, 1, f.trims)
	p, err := d.Measure(func() error { return nil })
	require.NoError(t, err)
	assert.Equal(t, int64(200+50), p.EndGraphOutliving, "the Outliving of captures 41 and 42")
	assert.Contains(t, d.MemorySummary(), "graph memory: reserved 2.00 MiB (peak 4.00 MiB), used 1.00 MiB (peak 3.00 MiB)")
}

// TestGraphsChunk: a capture counts its allocations' bytes as asked, and
// reads them in whole chunks of the device's graph memory, as the backend
// gives the chunk (learned, or a bound while it is not): Need is the peak's
// bytes rounded up once, Outliving what the outliving allocations may pin,
// Measure's EndGraphOutliving each capture's, and a buffer's RoundedSize is
// its size. A capture without an allocation asks for no chunk; where the
// backend can give none, a reading that needs it fails, and Measure leaves
// its graph figures 0, so that the pass's graph memory stays in the
// untracked growth.
func TestGraphsChunk(t *testing.T) {
	f := &fakeStreams{fakeBackend: newFakeBackend(1, 1<<20), capturing: map[Stream]uint64{7: 41, 8: 42, 9: 43}, chunk: 100}
	useBackend(t, KindCUDA, f)
	d, err := CUDA(0)
	require.NoError(t, err)
	a, err := d.AllocAsync(30, 7)
	require.NoError(t, err)
	assert.Equal(t, int64(30), a.RoundedSize(), "a graph's memory is rounded as a whole, not each allocation")
	b, err := d.AllocAsync(50, 7)
	require.NoError(t, err)
	require.NoError(t, a.FreeAsync(7))
	_, err = d.AllocAsync(10, 7)
	require.NoError(t, err)
	_, err = d.AllocAsync(120, 8)
	require.NoError(t, err)
	got, err := d.Graphs().Capture(7)
	require.NoError(t, err)
	assert.Equal(t, Capture{Device: d, ID: 41, Stream: 7, Capturing: true, Allocs: 3, Frees: 1, Need: 100, Outliving: 100}, got,
		"80 bytes live at once, 60 outliving: a chunk each")
	chunk, learned, err := d.Graphs().Chunk()
	require.NoError(t, err)
	assert.Equal(t, [2]any{int64(100), true}, [2]any{chunk, learned})
	p, err := d.Measure(func() error { return nil })
	require.NoError(t, err)
	assert.Equal(t, int64(100+200), p.EndGraphOutliving, "each capture's Outliving: no more than its Need")

	f.chunk, f.chunkBound = 300, true // a multiple of the chunk, while it is not learned
	got, err = d.Graphs().Capture(8)
	require.NoError(t, err)
	assert.Equal(t, int64(300), got.Need)
	_, learned, err = d.Graphs().Chunk()
	require.NoError(t, err)
	assert.False(t, learned)

	f.chunkErr = errFakeDriver
	_, err = d.Graphs().Capture(7)
	assert.ErrorIs(t, err, errFakeDriver, "the chunk is needed and cannot be had")
	_, err = d.Graphs().Captures()
	assert.ErrorIs(t, err, errFakeDriver)
	none, err := d.Graphs().Capture(9)
	require.NoError(t, err, "a capture without an allocation asks for no chunk")
	assert.Equal(t, Capture{Device: d, ID: 43, Stream: 9, Capturing: true}, none)
	f.graphs.GraphReserved = 1 << 10
	p, err = d.Measure(func() error { return nil })
	require.NoError(t, err)
	assert.Equal(t, [3]int64{}, [3]int64{p.StartGraphReserved, p.EndGraphReserved, p.EndGraphOutliving},
		"no graph figures: the pass's graph memory stays in the untracked growth")
	assert.False(t, b.Freed())
}

// TestWithGraphs: graphs of one call (one stream) share one reservation,
// the largest need less what outlives a launch; calls (streams) add up;
// what is not a capture of the device that will launch is refused, and p
// is returned unchanged.
func TestWithGraphs(t *testing.T) {
	d := Device{kind: KindCUDA}
	c := func(id uint64, need, outliving int64) Capture {
		return Capture{Device: d, ID: id, Need: need, Outliving: outliving}
	}
	p := Measurement{Device: d}
	for _, tc := range []struct {
		name  string
		calls [][]Capture
		want  int64
	}{
		{"none", nil, 0},
		{"one graph", [][]Capture{{c(1, 8, 0)}}, 8},
		{"one stream: the largest", [][]Capture{{c(1, 8, 0), c(2, 12, 0), c(3, 4, 0)}}, 12},
		{"two streams: the sum", [][]Capture{{c(1, 8, 0)}, {c(2, 12, 0)}}, 20},
		{"outliving allocations apart", [][]Capture{{c(1, 8, 2), c(2, 12, 1)}}, max(8-2, 12-1) + 2 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := p
			for _, call := range tc.calls {
				var err error
				q, err = q.WithGraphs(call...)
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, q.GraphNeed)
		})
	}
	p.GraphNeed = 5
	for _, bad := range []Capture{
		{Device: CPU(), ID: 1, Need: 8},
		{Device: Device{kind: KindCUDA, ordinal: 1}, ID: 1, Need: 8},
		{Device: d, Need: 8},
		{Device: d, ID: 1, Need: 8, Invalidated: true},
		{Device: d, ID: 1, Need: 8, Outliving: 9},
		{Device: d, ID: 1, Need: -1},
	} {
		q, err := p.WithGraphs(c(7, 8, 0), bad)
		assert.ErrorIs(t, err, ErrInvalidArgument, "%+v", bad)
		assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "%v", err)
		assert.Equal(t, p, q, "unchanged")
	}
}

// TestBudgetGraphs: graph memory is set aside once, as GraphReserved: what
// the pass's graphs reserved (the growth of Usage.GraphReserved since the
// baseline, or the start for SharedBudget) leaves the untracked growth, so
// that SetAside is as before, split; what graphs captured after the pass
// need (GraphNeed) is added; where both are there, the larger, not both.
func TestBudgetGraphs(t *testing.T) {
	const gib = 1 << 30
	base, m := measuringExample(0)
	plain, err := m.Budget(base, 0.9, gib/4)
	require.NoError(t, err)
	for _, tc := range []struct {
		name                        string
		baseGraphs, start, end      int64
		outliving, need             int64
		baseErr                     error
		graphs, untracked, setAside int64
	}{
		{"no graphs", 0, 0, 0, 0, 0, nil, 0, gib / 2, plain.SetAside},
		{"launched in the pass", 0, 0, gib / 4, 0, 0, nil, gib / 4, gib / 4, plain.SetAside},
		{"launched before the pass and in it", gib / 8, gib / 4, gib / 4, 0, 0, nil, gib / 8, gib/2 - gib/8, plain.SetAside},
		{"captured after the pass", 0, 0, 0, 0, gib / 8, nil, gib / 8, gib / 2, plain.SetAside + gib/8},
		{"both: the larger", 0, 0, gib / 4, 0, gib / 8, nil, gib / 4, gib / 4, plain.SetAside},
		{"both: the need larger", 0, 0, gib / 8, 0, gib / 4, nil, gib / 4, gib/2 - gib/8, plain.SetAside + gib/8},
		{"no figures at the baseline", 0, 0, gib / 4, 0, 0, ErrNotSupported, 0, gib / 2, plain.SetAside},
		// An allocation left live by the pass's launch holds memory the
		// later graphs do not reuse.
		{"both, an allocation of the pass outliving", 0, 0, gib / 8, gib / 16, gib / 4, nil, gib/16 + gib/4, gib/2 - gib/8, plain.SetAside + gib/16 + gib/8},
		{"both, outliving the whole of the pass's", 0, 0, gib / 4, gib / 4, gib / 8, nil, gib/4 + gib/8, gib / 4, plain.SetAside + gib/8},
		{"outliving more than the pass reserved", 0, 0, gib / 8, gib, gib / 8, nil, gib / 4, gib/2 - gib/8, plain.SetAside + gib/8},
		{"outliving, no later graphs", 0, 0, gib / 4, gib / 4, 0, nil, gib / 4, gib / 4, plain.SetAside},
		{"outliving, nothing launched in the pass", 0, 0, 0, gib, gib / 8, nil, gib / 8, gib / 2, plain.SetAside + gib/8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := base
			base.GraphReserved, base.GraphErr = tc.baseGraphs, tc.baseErr
			m := m
			m.StartGraphReserved, m.EndGraphReserved, m.EndGraphOutliving, m.GraphNeed = tc.start, tc.end, tc.outliving, tc.need
			b, err := m.Budget(base, 0.9, gib/4)
			require.NoError(t, err)
			assert.Equal(t, tc.graphs, b.GraphReserved)
			assert.Equal(t, tc.untracked, b.UntrackedIncrease)
			assert.Equal(t, tc.setAside, b.SetAside)
			assert.Equal(t, plain.Requested-tc.setAside, b.Available)
		})
	}
	t.Run("SharedBudget", func(t *testing.T) {
		sharedPlain, err := m.SharedBudget(0.9, gib/4)
		require.NoError(t, err)
		m := m
		m.StartGraphReserved, m.EndGraphReserved = gib/8, gib/4 // gib/8 in StartUsed already
		b, err := m.SharedBudget(0.9, gib/4)
		require.NoError(t, err)
		assert.Equal(t, int64(gib/8), b.GraphReserved)
		assert.Equal(t, int64(gib/2-gib/8), b.UntrackedIncrease)
		assert.Equal(t, sharedPlain.SetAside, b.SetAside)
		m.GraphNeed = gib / 4
		b, err = m.SharedBudget(0.9, gib/4)
		require.NoError(t, err)
		assert.Equal(t, int64(gib/4), b.GraphReserved)
		assert.Equal(t, sharedPlain.SetAside+gib/8, b.SetAside)
		m.EndGraphOutliving = gib // more than the pass reserved: what it reserved is set apart
		b, err = m.SharedBudget(0.9, gib/4)
		require.NoError(t, err)
		assert.Equal(t, int64(gib/8+gib/4), b.GraphReserved)
	})
}

// TestGraphsInvalidatedByRefusedNode: where the driver refuses an
// allocation or free node in a capture whose ID the same call read, and
// the refusal leaves the capture invalidated, the capture's record says
// so, the error names the capture, and nothing is counted; on the path of
// a request within the memory limit and of one over it, which no limit
// refuses in a capture.
func TestGraphsInvalidatedByRefusedNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(d Device, b *Buffer) error
	}{
		{"allocation node", func(d Device, _ *Buffer) error { _, err := d.AllocAsync(50, 7); return err }},
		{"allocation node over the limit", func(d Device, _ *Buffer) error { _, err := d.AllocAsync(500, 7); return err }},
		{"free node", func(_ Device, b *Buffer) error { return b.FreeAsync(7) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeStreams{fakeBackend: newFakeBackend(1, 1<<20), capturing: map[Stream]uint64{7: 41, 8: 42}}
			useBackend(t, KindCUDA, f)
			d, err := CUDA(0)
			require.NoError(t, err)
			require.NoError(t, d.SetMemoryLimit(100))
			other, err := d.AllocAsync(30, 8) // capture 42's, outliving it
			require.NoError(t, err)
			_, err = d.AllocAsync(20, 7)
			require.NoError(t, err)
			before := d.MemoryStats()
			want, err := d.Graphs().Capture(7)
			require.NoError(t, err)
			require.False(t, want.Invalidated)

			f.refuseNode = errFakeDriver
			err = tc.op(d, other) // a free node of capture 42's allocation in capture 41, or a new allocation node
			assert.ErrorIs(t, err, errFakeDriver)
			assert.ErrorContains(t, err, "capture 41")
			assert.ErrorContains(t, err, "invalidated")
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "%v", err)
			assert.False(t, other.Freed())
			assert.Equal(t, before, d.MemoryStats(), "nothing counted")
			got, err := d.Graphs().Capture(7)
			require.NoError(t, err)
			want.Invalidated = true
			assert.Equal(t, want, got, "the capture the driver invalidated, known by its ID")
			_, err = Measurement{Device: d}.WithGraphs(got)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			c42, err := d.Graphs().Capture(8)
			require.NoError(t, err)
			assert.False(t, c42.Invalidated, "no other capture")
		})
	}
	t.Run("the first node of a capture", func(t *testing.T) {
		f := &fakeStreams{fakeBackend: newFakeBackend(1, 1<<20), capturing: map[Stream]uint64{9: 43}, refuseNode: errFakeDriver}
		useBackend(t, KindCUDA, f)
		d, err := CUDA(0)
		require.NoError(t, err)
		_, err = d.AllocAsync(50, 9)
		assert.ErrorIs(t, err, errFakeDriver)
		got, err := d.Graphs().Capture(9)
		require.NoError(t, err)
		assert.Equal(t, Capture{Device: d, ID: 43, Stream: 9, Capturing: true, Invalidated: true}, got, "known by its ID, with no node")
	})
}
