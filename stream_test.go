package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStreamCallsCheckOrder: the stream-ordered and pool calls check in
// one order in every build, with or without -tags cuda: the argument first
// (ErrInvalidSize), then the device (ErrInvalidDevice for the zero Device,
// ErrNotSupported for a device that is not a CUDA GPU), counting nothing.
func TestStreamCallsCheckOrder(t *testing.T) {
	cpu := freshCPU(t)
	cat, err := cpu.Category("stream order")
	require.NoError(t, err)
	calls := []struct {
		name string
		call func(Device) error
		bad  bool // an argument out of range
	}{
		{"AllocAsync(0)", func(d Device) error { _, err := d.AllocAsync(0, DefaultStream); return err }, true},
		{"AllocAsync(-1)", func(d Device) error { _, err := d.AllocAsync(-1, DefaultStream); return err }, true},
		{"Pool().Trim(-1)", func(d Device) error { return d.Pool().Trim(-1) }, true},
		{"Pool().SetReleaseThreshold(-1)", func(d Device) error { return d.Pool().SetReleaseThreshold(-1) }, true},
		{"AllocAsync(8)", func(d Device) error { _, err := d.AllocAsync(8, DefaultStream); return err }, false},
		{"Pool().Trim(0)", func(d Device) error { return d.Pool().Trim(0) }, false},
		{"Pool().SetReleaseThreshold(0)", func(d Device) error { return d.Pool().SetReleaseThreshold(0) }, false},
		{"PoolStats", func(d Device) error { _, err := d.Pool().Stats(); return err }, false},
		{"PoolUsage", func(d Device) error { _, err := d.Pool().Usage(); return err }, false},
	}
	for _, dev := range []struct {
		name string
		d    Device
		want error // for a call whose argument is right
	}{{"zero Device", Device{}, ErrInvalidDevice}, {"cpu", cpu, ErrNotSupported}} {
		for _, c := range calls {
			t.Run(dev.name+"/"+c.name, func(t *testing.T) {
				want := dev.want
				if c.bad {
					want = ErrInvalidSize
				}
				assert.ErrorIs(t, c.call(dev.d), want)
			})
		}
	}
	_, err = cat.AllocAsync(0, DefaultStream)
	assert.ErrorIs(t, err, ErrInvalidSize, "through a category too")
	_, err = cat.AllocAsync(8, DefaultStream)
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.Equal(t, Stats{Device: cpu}, cpu.MemoryStats(), "nothing counted")
}

// fakeStreams is a fake backend with the stream-ordered capability
// (streamBackend): its stream-ordered buffers are the fake's buffers, and
// its pool uses what they take.
//
// A stream in capturing captures the graph of that ID: its allocations are
// the graph's, at addresses of their own, and its frees free nodes.
type fakeStreams struct {
	*fakeBackend
	freeErr    error // returned by freeAsync, if set
	asyncFrees int   // frees freeAsync made
	inPool     int64 // bytes of live stream-ordered buffers

	capturing  map[Stream]uint64 // the streams that capture, and their captures' IDs
	refuseNode error             // where set, a node in a capture is refused with it, and the capture invalidated
	nodes      uintptr           // the graph allocations made, which give their addresses
	graphFrees int               // frees freeGraph made
	graphs     GraphStats        // what graphStats returns
	trims      int               // the trims trimGraphs made
	chunk      int64             // what graphChunk returns (1 where 0)
	chunkBound bool              // graphChunk's chunk is a bound, not learned
	chunkErr   error             // where set, graphChunk fails with it
}

func (f *fakeStreams) poolsSupported(int) error { return nil }

func (f *fakeStreams) allocAsync(ordinal int, size int64, s Stream, m *memory) (uint64, error) {
	if id := f.capturing[s]; id != 0 {
		if f.refuseNode != nil {
			return 0, uncounted{&invalidatedIn{id: id, err: f.refuseNode}}
		}
		f.nodes++
		m.ptr = 0x100000 * f.nodes
		return id, nil
	}
	err := f.alloc(ordinal, size, m)
	if err == nil {
		f.inPool += size
	}
	return 0, err
}

func (f *fakeStreams) allocInCapture(ordinal int, size int64, s Stream, m *memory) (uint64, error) {
	if f.capturing[s] == 0 {
		return 0, nil
	}
	return f.allocAsync(ordinal, size, s, m)
}

func (f *fakeStreams) graphsSupported(int) error { return nil }

func (f *fakeStreams) captureOf(_ int, s Stream) (captureState, error) {
	id := f.capturing[s]
	return captureState{ID: id, Capturing: id != 0}, nil
}

func (f *fakeStreams) freeGraph(_ int, _ int64, _ *memory, s Stream) (uint64, error) {
	if f.freeErr != nil {
		return 0, f.freeErr
	}
	if id := f.capturing[s]; id != 0 && f.refuseNode != nil {
		return 0, &invalidatedIn{id: id, err: f.refuseNode}
	}
	f.graphFrees++
	return f.capturing[s], nil
}

func (f *fakeStreams) graphStats(int) (GraphStats, error) { return f.graphs, nil }
func (f *fakeStreams) trimGraphs(int) error               { f.trims++; return nil }

// graphChunk is f.chunk (1, which rounds nothing, where 0), learned unless
// f.chunkBound.
func (f *fakeStreams) graphChunk(int) (int64, bool, error) {
	if f.chunkErr != nil {
		return 0, false, f.chunkErr
	}
	return max(f.chunk, 1), !f.chunkBound, nil
}

func (f *fakeStreams) freeAsync(ordinal int, size int64, m *memory, _ Stream) error {
	if f.freeErr != nil {
		return f.freeErr
	}
	f.asyncFrees++
	f.inPool -= size
	return f.free(ordinal, size, m)
}

func (f *fakeStreams) poolStats(int) (PoolStats, error) {
	return PoolStats{PoolUsed: f.inPool, PoolReserved: f.inPool + 1000}, nil
}
func (f *fakeStreams) pooled(int) int64                     { return f.inPool }
func (f *fakeStreams) trimPool(int, int64) error            { return nil }
func (f *fakeStreams) setReleaseThreshold(int, int64) error { return nil }

// TestStreamsThroughTheBackend: AllocAsync, FreeAsync and the pool calls
// reach a backend's stream-ordered capability, in every build, and count
// as the CUDA backend's do: a free the backend refuses leaves the buffer
// live and counted, and it may be freed again.
func TestStreamsThroughTheBackend(t *testing.T) {
	f := &fakeStreams{fakeBackend: newFakeBackend(1, 1<<20)}
	useBackend(t, KindCUDA, f)
	d, err := CUDA(0)
	require.NoError(t, err)
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)

	b, err := d.AllocAsync(100, DefaultStream)
	require.NoError(t, err)
	c, err := kv.AllocAsync(50, DefaultStream)
	require.NoError(t, err)
	assert.Equal(t, int64(150), d.MemoryAllocated())
	assert.Equal(t, int64(50), kv.Stats().Tracked)
	u, err := d.Pool().Usage()
	require.NoError(t, err)
	assert.Equal(t, PoolUsage{Device: d, Tracked: 150, Held: 150, PoolUsed: 150, PoolReserved: 1150, Cached: 1000}, u)
	ps, err := d.Pool().Stats()
	require.NoError(t, err)
	assert.Equal(t, d, ps.Device)
	assert.NoError(t, d.Pool().Trim(0))
	assert.NoError(t, d.Pool().SetReleaseThreshold(0))

	f.freeErr = errFakeDriver
	assert.ErrorIs(t, b.FreeAsync(DefaultStream), errFakeDriver)
	assert.False(t, b.Freed(), "a refused free leaves the buffer live")
	assert.Equal(t, int64(150), d.MemoryAllocated(), "and counted")
	f.freeErr = nil
	require.NoError(t, b.FreeAsync(DefaultStream))
	assert.True(t, b.Freed())
	assert.ErrorIs(t, b.FreeAsync(DefaultStream), ErrDoubleFree)
	require.NoError(t, c.FreeAsync(Stream(0x10)))
	assert.Equal(t, 2, f.asyncFrees)
	assert.Zero(t, d.MemoryAllocated())
	assert.Zero(t, kv.Stats().Tracked, "uncounted in its category")
	used, live, _ := f.state(0)
	assert.Zero(t, used)
	assert.Zero(t, live)

	p, err := d.Alloc(8)
	require.NoError(t, err)
	assert.ErrorIs(t, p.FreeAsync(DefaultStream), ErrInvalidArgument, "a buffer of Alloc is freed with Free")
	require.NoError(t, p.Free())
}
