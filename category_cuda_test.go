//go:build cuda

package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCUDACategories allocates through categories on the driver (the fake
// of testdata/fakecuda, or a GPU): each category counts its own buffers,
// the device counts all of them, the driver's memory moves by exactly the
// buffers allocated, and a category's limit refuses a request before the
// driver is asked. Memory allocated with cu and tracked in a category
// counts there too.
func TestCUDACategories(t *testing.T) {
	ds := cudaDevices(t, 2)
	d := ds[1]
	w, err := d.Category("cuda weights")
	require.NoError(t, err)
	ws, err := d.Category("cuda workspace")
	require.NoError(t, err)
	other, err := ds[0].Category("cuda weights")
	require.NoError(t, err)
	before := d.MemoryStats()
	free0, _, err := d.MemGetInfo()
	require.NoError(t, err)

	const size = 64 << 20
	b, err := w.Alloc(size)
	require.NoError(t, err)
	assert.NotZero(t, b.DevicePtr())
	assert.Equal(t, before.Tracked+size, d.MemoryAllocated())
	assert.Equal(t, int64(size), w.Stats().Tracked)
	assert.Zero(t, other.Stats().Tracked, "the same name on another device is another category")
	if onFake() {
		f, _, err := d.MemGetInfo()
		require.NoError(t, err)
		assert.Equal(t, free0-size, f, "the driver's memory moved by the buffer")
	}

	require.NoError(t, ws.SetMemoryLimit(size))
	_, err = ws.Alloc(size + 1)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, "cuda workspace", oom.Category)
	if onFake() {
		f, _, err := d.MemGetInfo()
		require.NoError(t, err)
		assert.Equal(t, free0-size, f, "a request over the category's limit never reaches the driver")
	}

	// Memory of another binding (an address it gave), tracked in a category.
	h, err := ws.Track(4096, 0x7f0000c0de00)
	require.NoError(t, err)
	assert.Equal(t, int64(4096), ws.Stats().Tracked)
	assert.Equal(t, h, KindCUDA.TrackedAt(0x7f0000c0de00))
	freed := false
	require.NoError(t, h.FreeWith(func() error { freed = true; return nil }))
	assert.True(t, freed)

	require.NoError(t, b.Free())
	assert.Equal(t, CategoryStats{Device: d, Category: "cuda weights", PeakTracked: size, AllocBytes: size, FreedBytes: size, PeakBuffers: 1, Allocs: 1, Frees: 1}, w.Stats())
	assert.Equal(t, CategoryStats{Device: d, Category: "cuda workspace", PeakTracked: 4096, AllocBytes: 4096, FreedBytes: 4096, PeakBuffers: 1, Allocs: 1, Frees: 1, FailedAllocs: 1, Limit: size}, ws.Stats())
	assert.Equal(t, before.Tracked, d.MemoryAllocated())
	require.NoError(t, ws.SetMemoryLimit(0))
}

// TestCUDACategoryAllocAsync allocates in stream order through a category:
// the category counts the buffer until FreeAsync (or Free) returns, and
// its limit refuses as Alloc's does.
func TestCUDACategoryAllocAsync(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	kv, err := d.Category("cuda async kv_cache")
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(3<<20))
	defer kv.SetMemoryLimit(0)
	before := d.MemoryStats()
	a, err := kv.AllocAsync(2<<20, s)
	require.NoError(t, err)
	_, err = kv.AllocAsync(2<<20, s)
	assert.ErrorIs(t, err, ErrOutOfMemory)
	b, err := kv.AllocAsync(1<<20, s)
	require.NoError(t, err)
	assert.Equal(t, before.Tracked+3<<20, d.MemoryAllocated())
	assert.Equal(t, int64(3<<20), kv.Stats().Tracked)
	require.NoError(t, a.FreeAsync(s))
	syncStream(t, d, s)
	require.NoError(t, b.Free())
	assert.Equal(t, CategoryStats{Device: d, Category: "cuda async kv_cache", PeakTracked: 3 << 20, AllocBytes: 3 << 20, FreedBytes: 3 << 20,
		PeakBuffers: 2, Allocs: 2, Frees: 2, FailedAllocs: 1, Limit: 3 << 20}, kv.Stats())
	assert.Equal(t, before.Tracked, d.MemoryAllocated())

	var zero Category
	_, err = zero.AllocAsync(1, s)
	assert.ErrorIs(t, err, ErrInvalidCategory)
}

// TestCUDACategoryAllocAsyncOtherDeviceStream: a stream of another device
// is bad input, refused first whatever limit the request passes, the
// category's or the device's: no failure is counted, no observer runs, and
// the pool gives nothing.
func TestCUDACategoryAllocAsyncOtherDeviceStream(t *testing.T) {
	ds := cudaDevices(t, 2)
	d := ds[0]
	s1 := newStream(t, ds[1])
	kv, err := d.Category("cuda async other stream")
	require.NoError(t, err)
	runs := 0
	obs, err := d.OnOutOfMemory(func(*OutOfMemoryError) { runs++ })
	require.NoError(t, err)
	defer obs.Remove()
	for _, tc := range []struct {
		name               string
		catLimit, devLimit int64
	}{{"no limit", 0, 0}, {"over the category's limit", 1 << 10, 0}, {"over the device's limit", 0, d.MemoryAllocated() + 1<<10}} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, kv.SetMemoryLimit(tc.catLimit))
			require.NoError(t, d.SetMemoryLimit(tc.devLimit))
			defer func() {
				require.NoError(t, kv.SetMemoryLimit(0))
				require.NoError(t, d.SetMemoryLimit(0))
			}()
			before, cbefore, pool := d.MemoryStats(), kv.Stats(), poolStats(t, d)
			b, err := kv.AllocAsync(1<<20, s1)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.NotErrorIs(t, err, ErrOutOfMemory)
			assert.Equal(t, before, d.MemoryStats(), "no figure moves")
			assert.Equal(t, cbefore, kv.Stats())
			assert.Zero(t, runs, "no observer runs")
			assert.Equal(t, pool.PoolUsed, poolStats(t, d).PoolUsed, "the pool gave nothing")
		})
	}
}
