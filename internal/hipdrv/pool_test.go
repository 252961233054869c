//go:build rocm

package hipdrv_test

import (
	"fmt"
	"testing"

	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pool returns device 0's current pool and its figures' reader.
func pool(t *testing.T) (hipdrv.Pool, func() hipdrv.PoolAttributes) {
	t.Helper()
	ok, r := hipdrv.PoolsSupported(0)
	require.Equal(t, hipdrv.Success, r)
	require.True(t, ok)
	p, r := hipdrv.MemPool(0)
	require.Equal(t, hipdrv.Success, r)
	return p, func() hipdrv.PoolAttributes {
		a, r := hipdrv.PoolGet(p)
		require.Equal(t, hipdrv.Success, r)
		return a
	}
}

// The pool's figures through an allocation and its deferred free: it
// reserves device memory in granules (2 MiB), which hipMemGetInfo counts;
// the free's bytes leave the used figure when the stream runs it (or at
// once, FAKEHIP_POOL_FREE=enqueued); a synchronize returns what the pool
// reserves above its release threshold (0 by default); the high marks
// keep the peaks.
func TestPoolDeferredFree(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		reading  string
		usedHeld int64 // used while the free waits in the held stream
	}{
		{"executed", 3 * mib},
		{"enqueued", 0},
	} {
		t.Run(tc.reading, func(t *testing.T) {
			if !inChild(t, current, "FAKEHIP_POOL_FREE="+tc.reading) {
				return
			}
			requireFake(t, 1)
			_, get := pool(t)
			s := stream(t, 0)
			free0, _, _ := hipdrv.MemInfo(0)
			a := hipdrv.AllocAsync(0, 3*mib, s)
			require.Equal(t, hipdrv.Call{}, a.Call)
			assert.Equal(t, hipdrv.PoolAttributes{PoolReserved: 4 * mib, PeakPoolReserved: 4 * mib, PoolUsed: 3 * mib, PeakPoolUsed: 3 * mib}, get())
			free1, _, _ := hipdrv.MemInfo(0)
			assert.Equal(t, free0-4*mib, free1, "the device counts what the pool reserves")
			require.Equal(t, hipdrv.Success, hiptest.HoldStream(0, s))
			f := hipdrv.FreeAsync(0, a.Ptr, s, hipdrv.Event{})
			require.Equal(t, hipdrv.Call{}, f.Call)
			assert.Equal(t, tc.usedHeld, get().PoolUsed)
			hiptest.ReleaseStreams()
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
			assert.Equal(t, hipdrv.PoolAttributes{PeakPoolReserved: 4 * mib, PeakPoolUsed: 3 * mib}, get())
			free2, _, _ := hipdrv.MemInfo(0)
			assert.Equal(t, free0, free2)
			hipdrv.EventDestroy(f.Event)
		})
	}
}

// The release threshold: a synchronize of the stream, of an event or of
// the device keeps what the pool reserves up to it and returns the rest; a
// trim releases what it kept.
func TestPoolReleaseThreshold(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	p, get := pool(t)
	for _, tc := range []struct {
		name string
		sync func(s uintptr) hipdrv.Result
	}{
		{"stream", func(s uintptr) hipdrv.Result { return hiptest.StreamSynchronize(0, s) }},
		{"event", func(s uintptr) hipdrv.Result {
			e, r := hiptest.RecordEvent(0, s)
			if r == hipdrv.Success {
				r = hiptest.EventSynchronize(e)
				hiptest.EventDestroy(e)
			}
			return r
		}},
		{"device", func(uintptr) hipdrv.Result { return hiptest.DeviceSynchronize(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stream(t, 0)
			require.Equal(t, hipdrv.Success, hipdrv.PoolSetReleaseThreshold(p, 8*mib))
			defer hipdrv.PoolSetReleaseThreshold(p, 0)
			a := hipdrv.AllocAsync(0, 5*mib, s)
			b := hipdrv.AllocAsync(0, 5*mib, s)
			require.Equal(t, hipdrv.Call{}, a.Call)
			require.Equal(t, hipdrv.Call{}, b.Call)
			assert.Equal(t, 10*mib, get().PoolReserved)
			f := hipdrv.FreeAsync(0, a.Ptr, s, hipdrv.Event{})
			g := hipdrv.FreeAsync(0, b.Ptr, s, hipdrv.Event{})
			require.Equal(t, hipdrv.Success, tc.sync(s))
			got := get()
			assert.Equal(t, 8*mib, got.PoolReserved, "kept up to the threshold")
			assert.Equal(t, 8*mib, got.ReleaseThreshold)
			require.Equal(t, hipdrv.Success, hipdrv.PoolTrimTo(p, 0))
			assert.Zero(t, get().PoolReserved)
			hipdrv.EventDestroy(f.Event)
			hipdrv.EventDestroy(g.Event)
		})
	}
}

// A trim keeps what backs live allocations and frees the host has not
// observed complete ("eg. by a synchronize"; FAKEHIP_TRIM_OBSERVED=executed
// counts a free as observed once it ran), and at least what it is asked to
// keep where the pool holds more.
func TestPoolTrim(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		reading string
		kept    int64 // after a trim to 0, the free having run but not been synchronized
	}{
		{"sync", 4 * mib},
		{"executed", 2 * mib},
	} {
		t.Run(tc.reading, func(t *testing.T) {
			if !inChild(t, current, "FAKEHIP_TRIM_OBSERVED="+tc.reading) {
				return
			}
			requireFake(t, 1)
			p, get := pool(t)
			s := stream(t, 0)
			live := hipdrv.AllocAsync(0, mib, s)
			freed := hipdrv.AllocAsync(0, 3*mib, s)
			require.Equal(t, hipdrv.Call{}, live.Call)
			require.Equal(t, hipdrv.Call{}, freed.Call)
			assert.Equal(t, 4*mib, get().PoolReserved)
			f := hipdrv.FreeAsync(0, freed.Ptr, s, hipdrv.Event{})
			require.Equal(t, hipdrv.Call{}, f.Call)
			for hiptest.StreamQuery(0, s) == hipdrv.NotReady {
				// The free runs on the stream's thread; a query observes nothing.
			}
			require.Equal(t, hipdrv.Success, hipdrv.PoolTrimTo(p, 0))
			assert.Equal(t, tc.kept, get().PoolReserved)
			require.Equal(t, hipdrv.Success, hipdrv.PoolTrimTo(p, 6*mib))
			assert.Equal(t, tc.kept, get().PoolReserved, "asked to keep more than it holds: nothing happens")
			g := hipdrv.FreeAsync(0, live.Ptr, s, hipdrv.Event{})
			require.Equal(t, hipdrv.Call{}, g.Call)
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
			assert.Zero(t, get().PoolReserved)
			hipdrv.EventDestroy(f.Event)
			hipdrv.EventDestroy(g.Event)
		})
	}
}

// The high watermarks accept 0 alone ("High watermark can only be reset
// to zero"), the current figures nothing; what a reset mark then reads the
// reference does not say: the current figure, or 0 (FAKEHIP_HIGH_RESET).
func TestPoolResetHighs(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		reading    string
		used, resv int64 // the marks after a reset with 1 MiB used of 2 MiB reserved
	}{
		{"current", mib, 2 * mib},
		{"zero", 0, 0},
	} {
		t.Run(tc.reading, func(t *testing.T) {
			if !inChild(t, current, "FAKEHIP_HIGH_RESET="+tc.reading) {
				return
			}
			requireFake(t, 1)
			p, get := pool(t)
			s := stream(t, 0)
			require.Equal(t, hipdrv.Success, hipdrv.PoolSetReleaseThreshold(p, 64*mib))
			a := hipdrv.AllocAsync(0, 5*mib, s)
			b := hipdrv.AllocAsync(0, mib, s)
			f := hipdrv.FreeAsync(0, a.Ptr, s, hipdrv.Event{})
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
			require.Equal(t, hipdrv.Success, hipdrv.PoolTrimTo(p, 0))
			got := get()
			assert.Equal(t, [4]int64{mib, 6 * mib, 2 * mib, 6 * mib}, [4]int64{got.PoolUsed, got.PeakPoolUsed, got.PoolReserved, got.PeakPoolReserved})
			require.Equal(t, hipdrv.Success, hipdrv.PoolResetHighs(p))
			got = get()
			assert.Equal(t, [2]int64{tc.used, tc.resv}, [2]int64{got.PeakPoolUsed, got.PeakPoolReserved})
			for _, attr := range hiptest.PoolFigureAttributes {
				assert.Equal(t, hipdrv.InvalidValue, hiptest.PoolSetAttribute(p, attr, 1), "attribute %d", attr)
			}
			c := hipdrv.AllocAsync(0, 2*mib, s)
			got = get()
			assert.Equal(t, [2]int64{3 * mib, 4 * mib}, [2]int64{got.PeakPoolUsed, got.PeakPoolReserved}, "the marks rise again")
			for _, x := range []uintptr{b.Ptr, c.Ptr} {
				hipdrv.EventDestroy(hipdrv.FreeAsync(0, x, s, hipdrv.Event{}).Event)
			}
			require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(0, s))
			hipdrv.EventDestroy(f.Event)
		})
	}
}

// A stream-ordered allocation that the device has not room for is
// hipErrorOutOfMemory and reserves nothing; so is one that another
// process's memory leaves no room for.
func TestPoolOutOfMemory(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, fmt.Sprintf("FAKEHIP_CAPACITY=%d", 8*mib)) {
		return
	}
	requireFake(t, 1)
	_, get := pool(t)
	s := stream(t, 0)
	p, c := hipdrv.Alloc(0, 4*mib)
	require.Equal(t, hipdrv.Call{}, c)
	for _, size := range []int64{9 * mib, 5 * mib} {
		a := hipdrv.AllocAsync(0, size, s)
		assert.Equal(t, hipdrv.Call{Op: hipdrv.OutOfMemory}, a.Call, "%d bytes", size)
		assert.Zero(t, a.Ptr)
		assert.Zero(t, get().PoolReserved)
	}
	a := hipdrv.AllocAsync(0, 4*mib, s)
	assert.Equal(t, hipdrv.Call{}, a.Call)
	// hipFree frees a stream-ordered allocation too, after its implicit
	// synchronize.
	assert.Equal(t, hipdrv.Call{}, hipdrv.Free(0, a.Ptr))
	assert.Zero(t, get().PoolUsed)
	assert.Equal(t, hipdrv.Call{}, hipdrv.Free(0, p))
}

// A device without memory pools (FAKEHIP_POOLS=0), or a runtime without
// their calls: every pool call answers hipErrorNotSupported.
func TestNoPools(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, "FAKEHIP_POOLS=0") {
		return
	}
	requireFake(t, 1)
	ok, r := hipdrv.PoolsSupported(0)
	require.Equal(t, hipdrv.Success, r)
	assert.False(t, ok)
	_, r = hipdrv.MemPool(0)
	assert.Equal(t, hipdrv.NotSupported, r)
	a := hipdrv.AllocAsync(0, mib, 0)
	assert.Equal(t, hipdrv.Call{Op: hipdrv.NotSupported}, a.Call)
}

// Graph memory: the figures read, the marks reset, the trim runs (the fake
// makes no graphs: every figure is 0); a device that does not exist is
// refused; a ROCm 5.2 runtime has none of the calls.
func TestGraphMem(t *testing.T) {
	current, rocm52 := fakeDirs(t)
	for _, tc := range []struct {
		name string
		dir  string
		want hipdrv.Result
	}{
		{"ROCm 6.4", current, hipdrv.Success},
		{"ROCm 5.2", rocm52, hipdrv.NotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, tc.dir) {
				return
			}
			requireFake(t, 1)
			g, r := hipdrv.GraphGet(0)
			assert.Equal(t, tc.want, r)
			assert.Zero(t, g)
			assert.Equal(t, tc.want, hipdrv.GraphResetHighs(0))
			assert.Equal(t, tc.want, hipdrv.GraphTrim(0))
			if tc.want == hipdrv.Success {
				_, r = hipdrv.GraphGet(1)
				assert.Equal(t, hipdrv.InvalidDevice, r)
			}
		})
	}
}

// The pool reserves device memory in granules of its own
// (FAKEHIP_POOL_GRANULE: "The OS allocations may happen at different
// granularity from the user allocations", hipMemPoolTrimTo).
func TestPoolGranule(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		granule, size, reserved int64
	}{
		{64 << 10, 100 << 10, 128 << 10},
		{2 * mib, 100 << 10, 2 * mib},
		{1, 100 << 10, 100 << 10},
	} {
		t.Run(fmt.Sprint(tc.granule), func(t *testing.T) {
			if !inChild(t, current, fmt.Sprintf("FAKEHIP_POOL_GRANULE=%d", tc.granule)) {
				return
			}
			requireFake(t, 1)
			_, get := pool(t)
			a := hipdrv.AllocAsync(0, tc.size, 0)
			require.Equal(t, hipdrv.Call{}, a.Call)
			assert.Equal(t, tc.reserved, get().PoolReserved)
		})
	}
}
