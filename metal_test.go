//go:build metal && darwin && !ios

// These tests need a Mac with a Metal GPU, the Xcode command-line tools and
// cgo: go test -tags metal ./... . Where Metal(0) fails (a build without
// cgo, or no Metal device) they fail and say why: they never skip.

package memtrack_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metalDevice returns metal:0, failing the test if this build or machine
// has none.
func metalDevice(t *testing.T) memtrack.Device {
	t.Helper()
	d, err := memtrack.Metal(0)
	require.NoError(t, err, "metal:0 must exist on a Mac with a Metal GPU, built with -tags metal and cgo")
	return d
}

func TestMetalDevices(t *testing.T) {
	d := metalDevice(t)
	assert.Equal(t, memtrack.KindMetal, d.Kind())
	assert.Equal(t, "metal:0", d.String())

	ds, err := memtrack.Devices()
	require.NoError(t, err)
	n := 0
	for _, dev := range ds {
		if dev.Kind() == memtrack.KindMetal {
			assert.Equal(t, n, dev.Ordinal(), "Devices lists the Metal GPUs in ordinal order")
			n++
		}
	}
	require.GreaterOrEqual(t, n, 1, "Devices lists metal:0")
	for i := range n {
		_, err := memtrack.Metal(i)
		assert.NoError(t, err, "metal:%d", i)
	}
	for _, bad := range []int{n, n + 1, -1} {
		_, err := memtrack.Metal(bad)
		assert.ErrorIs(t, err, memtrack.ErrInvalidOrdinal, "metal:%d", bad)
	}
	parsed, err := memtrack.ParseDevice("metal:0")
	require.NoError(t, err)
	assert.Equal(t, d, parsed)
}

// TestMetalAllocCounts checks, for sizes around Metal's page rounding, that
// an allocation counts exactly its requested size, that the buffer is
// zeroed shared memory the host can write, and that Free uncounts it once.
func TestMetalAllocCounts(t *testing.T) {
	d := metalDevice(t)
	for _, size := range []int64{1, 4095, 4096, 16<<10 + 1, 1<<20 + 3, 64 << 20} {
		before := d.MemoryStats()
		b, err := d.Alloc(size)
		require.NoError(t, err, "Alloc(%d)", size)

		live := d.MemoryStats()
		assert.Equal(t, before.Tracked+size, live.Tracked, "Current counts the requested size")
		assert.Equal(t, before.AllocBytes+size, live.AllocBytes)
		assert.Equal(t, before.Allocs+1, live.Allocs)
		assert.Equal(t, before.Buffers+1, live.Buffers)
		assert.Equal(t, before.FailedAllocs, live.FailedAllocs)
		assert.Equal(t, size, b.Size())
		assert.GreaterOrEqual(t, b.RoundedSize(), size, "allocatedSize is at least the length")

		host := b.Bytes()
		require.Len(t, host, int(size), "shared storage: the host sees the buffer")
		assert.True(t, bytes.Equal(host, make([]byte, size)), "a new buffer is zeroed")
		host[size-1] = 0xA5
		assert.Equal(t, byte(0xA5), b.Bytes()[size-1], "the host view writes the buffer")

		require.NoError(t, b.Free())
		after := d.MemoryStats()
		assert.Equal(t, before.Tracked, after.Tracked, "Free uncounts the buffer")
		assert.Equal(t, before.Buffers, after.Buffers)
		assert.Equal(t, before.Frees+1, after.Frees)
		assert.Equal(t, before.FreedBytes+size, after.FreedBytes)
		assert.Nil(t, b.Bytes(), "no host view after Free")
		assert.True(t, b.Freed())

		assert.ErrorIs(t, b.Free(), memtrack.ErrDoubleFree)
		assert.Equal(t, after, d.MemoryStats(), "a second Free changes nothing")
	}
}

func TestMetalMemGetInfo(t *testing.T) {
	d := metalDevice(t)
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	assert.Positive(t, total, "recommendedMaxWorkingSetSize")
	assert.GreaterOrEqual(t, free, int64(0))
	assert.LessOrEqual(t, free, total)

	// While a buffer lives, the driver's figure holds at least its
	// allocatedSize (currentAllocatedSize counts every resource of the
	// device).
	b, err := d.Alloc(64 << 20)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Free()) }()
	u, err := d.Usage()
	require.NoError(t, err)
	assert.Equal(t, total, u.Total)
	assert.Equal(t, d.MemoryAllocated(), u.Tracked)
	assert.GreaterOrEqual(t, u.Used, min(b.RoundedSize(), u.Total), "the driver sees the live buffer")
}

func TestMetalOutOfMemory(t *testing.T) {
	d := metalDevice(t)
	t.Cleanup(func() { require.NoError(t, d.SetMemoryLimit(0)) })
	for _, tc := range []struct {
		name  string
		limit int64 // above what is tracked now; 0: none
		size  int64
	}{
		{"over the memory limit", 1 << 20, 2 << 20},
		{"past the device's largest buffer", 0, 1 << 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := d.MemoryAllocated()
			lim := int64(0)
			if tc.limit > 0 {
				lim = base + tc.limit
			}
			require.NoError(t, d.SetMemoryLimit(lim))
			before := d.MemoryStats()

			b, err := d.Alloc(tc.size)
			assert.Nil(t, b)
			require.ErrorIs(t, err, memtrack.ErrOutOfMemory)
			var oom *memtrack.OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, d, oom.Device)
			assert.Equal(t, tc.size, oom.Requested)
			assert.Equal(t, lim, oom.Limit)

			after := d.MemoryStats()
			assert.Equal(t, before.FailedAllocs+1, after.FailedAllocs, "one failed allocation")
			after.FailedAllocs = before.FailedAllocs
			assert.Equal(t, before, after, "nothing else moved")

			if tc.limit > 0 { // what fits under the limit is still granted
				b, err := d.Alloc(tc.limit)
				require.NoError(t, err)
				require.NoError(t, b.Free())
			}
		})
	}
}

// TestMetalConcurrentAlloc has many goroutines hold Metal buffers at the same
// moment (a barrier), so the peak must be exactly their sum, then free them
// all, so the figures must return to where they were.
func TestMetalConcurrentAlloc(t *testing.T) {
	goroutines, perG := 32, 8
	if testing.Short() {
		goroutines, perG = 8, 4
	}
	const size = 64<<10 + 1
	d := metalDevice(t)
	d.ResetPeakMemoryStats()
	before := d.MemoryStats()

	var allocated, done sync.WaitGroup
	release := make(chan struct{})
	errs := make(chan error, 2*goroutines*perG) // at most two per buffer: never blocks
	for g := range goroutines {
		allocated.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			bufs := make([]*memtrack.Buffer, 0, perG)
			for range perG {
				b, err := d.Alloc(size)
				if err != nil {
					errs <- err
					continue
				}
				b.Bytes()[size-1] = byte(g)
				bufs = append(bufs, b)
			}
			allocated.Done()
			<-release
			for _, b := range bufs {
				if b.Bytes()[size-1] != byte(g) {
					errs <- fmt.Errorf("goroutine %d's buffer was overwritten", g)
				}
				if err := b.Free(); err != nil {
					errs <- err
				}
			}
		}()
	}
	allocated.Wait()
	held := d.MemoryStats()
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	n := int64(goroutines * perG)
	assert.Equal(t, before.Tracked+n*size, held.Tracked, "all buffers held at once")
	assert.Equal(t, before.Tracked+n*size, held.PeakTracked, "the peak is exactly their sum")
	assert.Equal(t, before.Buffers+n, held.PeakBuffers)

	after := d.MemoryStats()
	assert.Equal(t, before.Tracked, after.Tracked, "all freed")
	assert.Equal(t, before.Buffers, after.Buffers)
	assert.Equal(t, before.Allocs+n, after.Allocs)
	assert.Equal(t, before.Frees+n, after.Frees)
	assert.Equal(t, before.Tracked+n*size, after.PeakTracked, "the peak stays until reset")
}

// TestMetalInfo: the device has a name, and its registry ID in hex as its
// UUID.
func TestMetalInfo(t *testing.T) {
	d := metalDevice(t)
	info, err := d.Info()
	require.NoError(t, err)
	assert.Equal(t, d, info.Device)
	assert.NotEmpty(t, info.Name)
	assert.Regexp(t, `^0x[0-9a-f]+$`, info.UUID)
	t.Logf("%v: %q, registry ID %s", d, info.Name, info.UUID)
}

// TestMetalCategories allocates through categories on the Metal GPU: each
// counts its own buffers, the device all of them, and a category's limit
// refuses before the GPU is asked.
func TestMetalCategories(t *testing.T) {
	d := metalDevice(t)
	w, err := d.Category("metal weights")
	require.NoError(t, err)
	kv, err := d.Category("metal kv_cache")
	require.NoError(t, err)
	before := d.MemoryStats()
	b, err := w.Alloc(1 << 20)
	require.NoError(t, err)
	assert.Len(t, b.Bytes(), 1<<20, "shared storage, as through the device")
	require.NoError(t, kv.SetMemoryLimit(4096))
	_, err = kv.Alloc(8192)
	require.ErrorIs(t, err, memtrack.ErrOutOfMemory)
	k, err := kv.Alloc(4096)
	require.NoError(t, err)
	assert.Equal(t, before.Tracked+1<<20+4096, d.MemoryAllocated())
	assert.Equal(t, int64(1<<20), w.Stats().Tracked)
	assert.Equal(t, memtrack.CategoryStats{Device: d, Category: "metal kv_cache", Tracked: 4096, PeakTracked: 4096, AllocBytes: 4096,
		Buffers: 1, PeakBuffers: 1, Allocs: 1, FailedAllocs: 1, Limit: 4096}, kv.Stats())
	require.NoError(t, b.Free())
	require.NoError(t, k.Free())
	assert.Zero(t, w.Stats().Tracked)
	assert.Zero(t, kv.Stats().Tracked)
	assert.Equal(t, before.Tracked, d.MemoryAllocated())
	require.NoError(t, kv.SetMemoryLimit(0))
}

// On Metal a plan is predicted at the sizes asked (Metal rounds a buffer by
// a rule memtrack learns only once it is allocated), from the device's
// figure, which is no figure of this process's as a driver accounts it:
// the prediction stands, and its check says plainly that it cannot be
// made.
func TestMetalFit(t *testing.T) {
	d := metalDevice(t)
	plan := memtrack.Plan{Device: d, Parts: []memtrack.PlanPart{{Category: memtrack.CategoryWeights, Size: 3<<20 + 5, Count: 2}},
		Transient: 1 << 20, BlockSize: 1 << 20}
	p, err := plan.Predict()
	require.NoError(t, err)
	assert.Equal(t, int64(1), p.AllocUnit)
	assert.Equal(t, int64(2*(3<<20+5)), p.Predicted)
	assert.Equal(t, p.Predicted+1<<20, p.Need)
	assert.Equal(t, memtrack.SourceUnchecked, p.Source)
	assert.False(t, p.PerProcess)
	assert.Positive(t, p.Total)
	_, err = p.Check()
	require.ErrorIs(t, err, memtrack.ErrNotSupported)
	assert.Contains(t, err.Error(), "stands unchecked")

	for _, bad := range []memtrack.PlanPart{{Via: memtrack.ViaAllocAsync, Size: 1, Count: 1}, {Via: memtrack.ViaMap, Size: 1 << 20, Count: 1}} {
		_, err := memtrack.Plan{Device: d, Parts: []memtrack.PlanPart{bad}}.Predict()
		assert.ErrorIs(t, err, memtrack.ErrNotSupported, "%v on Metal", bad.Via)
	}
}
