//go:build cuda

package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leakAsyncFrom allocates size bytes in stream order on d and drops the
// buffer.
//
//go:noinline
func leakAsyncFrom(t testing.TB, d Device, size int64, s Stream) {
	_, err := d.AllocAsync(size, s)
	require.NoError(t, err)
}

// TestCUDALeakFreedInItsDevicesContext: a leaked CUDA buffer on the second
// GPU is reported with its site and freed there, through the device's
// primary context (the fake refuses a cuMemFree without a current context),
// from the runtime's cleanup goroutine.
func TestCUDALeakFreedInItsDevicesContext(t *testing.T) {
	requireFake(t)
	ds := cudaDevices(t, 2)
	d := ds[1]
	require.NoError(t, d.Sites().SetRate(1))
	t.Cleanup(func() { _ = d.Sites().SetRate(0) })
	require.NoError(t, d.Sites().Enable(8))
	t.Cleanup(d.Sites().Disable)
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle, FreeLeaks: true}))
	t.Cleanup(d.Leaks().Disable)

	free0, _, err := ds[0].MemGetInfo()
	require.NoError(t, err)
	free1, _, err := d.MemGetInfo()
	require.NoError(t, err)
	before := d.MemoryStats()

	leakFrom(t, d, 8<<20)
	l := sink.next(t)
	assert.Equal(t, d, l.Device)
	assert.Equal(t, int64(8<<20), l.Size)
	assert.True(t, l.Freed)
	require.NoError(t, l.Err)
	fn, _ := l.Site()
	assert.Equal(t, "github.com/memtrack/memtrack.leakFrom", fn)

	after := d.MemoryStats()
	assert.Equal(t, before.Tracked, after.Tracked)
	assert.Equal(t, before.Frees+1, after.Frees, "counted as one free")
	assert.Equal(t, before.Leaks+1, after.Leaks)
	got1, _, err := d.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, free1, got1, "the driver has the memory back on cuda:1")
	got0, _, err := ds[0].MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, free0, got0, "cuda:0 untouched")
	sink.none(t)
}

// TestCUDALeakOfAStreamOrderedBuffer: a leaked buffer of AllocAsync is
// freed at once (cuMemFree takes pool memory back), in both figures.
func TestCUDALeakOfAStreamOrderedBuffer(t *testing.T) {
	requireFake(t)
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle, FreeLeaks: true}))
	t.Cleanup(d.Leaks().Disable)
	before := d.MemoryStats()
	usedBefore := poolStats(t, d).PoolUsed

	leakAsyncFrom(t, d, 1<<20, s)
	syncStream(t, d, s)
	l := sink.next(t)
	assert.True(t, l.Freed)
	require.NoError(t, l.Err)
	after := d.MemoryStats()
	assert.Equal(t, before.Tracked, after.Tracked)
	assert.Equal(t, before.Held, after.Held)
	assert.Equal(t, usedBefore, poolStats(t, d).PoolUsed)

	// A watched buffer freed in stream order is no leak.
	b, err := d.AllocAsync(1<<10, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	assert.ErrorIs(t, b.FreeAsync(s), ErrDoubleFree)
	sink.none(t)
	syncStream(t, d, s)
}

// TestCUDARefusedFreeAsyncOfAWatchedBuffer: a FreeAsync refused for a
// stream of another device leaves a watched buffer as it leaves an
// unwatched one: live, counted, watched, and freed by the next FreeAsync
// or Free, after which a LeakCheck lists nothing.
func TestCUDARefusedFreeAsyncOfAWatchedBuffer(t *testing.T) {
	ds := cudaDevices(t, 2)
	d := ds[0]
	s0, s1 := newStream(t, d), newStream(t, ds[1])
	for _, free := range []string{"FreeAsync", "Free"} {
		t.Run(free, func(t *testing.T) {
			check, err := d.Leaks().StartCheck()
			require.NoError(t, err)
			defer check.End()
			before := d.MemoryStats()
			b, err := d.AllocAsync(1<<20, s0)
			require.NoError(t, err)
			mid := d.MemoryStats()
			assert.ErrorIs(t, b.FreeAsync(s1), ErrInvalidArgument)
			assert.False(t, b.Freed())
			assert.Equal(t, mid, d.MemoryStats(), "no figure moves")
			if free == "FreeAsync" {
				require.NoError(t, b.FreeAsync(s0), "the buffer may be freed again")
			} else {
				syncStream(t, d, s0)
				require.NoError(t, b.Free(), "the buffer may be freed again")
			}
			syncStream(t, d, s0)
			after := d.MemoryStats()
			assert.Equal(t, before.Tracked, after.Tracked)
			assert.Equal(t, before.Held, after.Held)
			assert.Equal(t, before.Frees+1, after.Frees)
			assert.Empty(t, check.Leaks(), "freed: not a leak")
		})
	}
}
