//go:build cuda

package memtrack

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
)

// cudaReserve reserves blocks granules on d, released at the end of the
// test.
func cudaReserve(t *testing.T, d Device, blocks int64) (*Reservation, int64) {
	t.Helper()
	g, err := d.MapGranularity()
	if err != nil {
		t.Skipf("no virtual memory management: %v", err)
	}
	r, err := d.Reserve(blocks * g)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Release() })
	return r, g
}

// TestCUDAReservation: a reservation holds no device memory; each mapping
// is memory the driver reports and memtrack tracks, from its map to its
// unmap.
func TestCUDAReservation(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	before := d.MemoryStats()
	usedBefore := used(t, d)
	r, g := cudaReserve(t, d, 8)
	if onFake() {
		assert.Equal(t, int64(2<<20), g, "the fake's default granularity")
	}
	assert.Zero(t, r.Base()%uintptr(g), "the base is aligned to the granularity")
	s := d.MemoryStats()
	assert.Equal(t, before.AddressSpace+8*g, s.AddressSpace)
	assert.Equal(t, before.Reservations+1, s.Reservations)
	if onFake() {
		assert.Equal(t, usedBefore, used(t, d), "a reservation holds no memory")
	}

	require.NoError(t, r.Map(0, 2*g))
	require.NoError(t, r.Map(4*g, g))
	s = d.MemoryStats()
	assert.Equal(t, before.Tracked+3*g, s.Tracked)
	assert.Equal(t, before.Held+3*g, s.Held, "the device holds the mappings")
	assert.Nil(t, r.Bytes(0, g), "the host cannot address device memory")
	if onFake() {
		assert.Equal(t, usedBefore+3*g, used(t, d), "the driver counts physical memory")
		// Mapped memory is accessible to the device (cuMemSetAccess).
		access, res := cudatest.GetAccess(r.Base(), d.Ordinal())
		require.Equal(t, cudadrv.Success, res)
		assert.Equal(t, cudatest.AccessReadWrite, access)
	}
	assert.ErrorIs(t, r.Map(g, 2*g), ErrOverlap)
	assert.ErrorIs(t, r.Map(g/2, g), ErrUnaligned)
	assert.ErrorIs(t, r.Unmap(0, g), ErrNotMapped)
	assert.ErrorIs(t, r.Release(), ErrMappingsLeft)
	assert.Equal(t, before.Tracked+3*g, d.MemoryStats().Tracked, "the refusals changed nothing")

	require.NoError(t, r.Unmap(0, 2*g))
	require.NoError(t, r.Unmap(4*g, g))
	s = d.MemoryStats()
	assert.Equal(t, before.Tracked, s.Tracked)
	assert.Equal(t, before.Held, s.Held)
	if onFake() {
		assert.Equal(t, usedBefore, used(t, d), "the unmap gave the memory back")
	}
	require.NoError(t, r.Release())
	assert.Equal(t, before.AddressSpace, d.MemoryStats().AddressSpace)
	assert.Contains(t, d.MemorySummary(), "tracked bytes")
}

// TestCUDAReservationDriverCalls counts the driver calls of a map and of
// an unmap exactly, beside the raw calls they wrap (cudatest.RawMap,
// cudatest.RawUnmap), with the device's primary context current and with
// none: a map is cuMemCreate, cuMemMap and cuMemSetAccess, an unmap
// cuMemUnmap and cuMemRelease, each in one cgo call that reads the current
// context (cuCtxGetCurrent), sets the device's where it is not current and
// restores it (2 cuCtxSetCurrent), and relaxes the capture mode and
// restores it (2 cuThreadExchangeStreamCaptureMode).
func TestCUDAReservationDriverCalls(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	driverCalls(t)
	_, ctx, err := cudaDeviceOf(d.Ordinal(), "test")
	require.NoError(t, err)
	r, g := cudaReserve(t, d, 4)
	names := []string{"cuCtxGetCurrent", "cuCtxSetCurrent", "cuThreadExchangeStreamCaptureMode",
		"cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cuMemRelease",
		"cuMemAddressReserve", "cuMemAddressFree", "cuMemGetAllocationGranularity", "cuDeviceGetAttribute"}
	const pairs = 16
	for _, c := range []struct {
		thread  string
		current uintptr
		ctxSets uint64
	}{
		{"the primary context current", uintptr(ctx), 0},
		{"no context current", 0, 2},
	} {
		t.Run(c.thread, func(t *testing.T) {
			var maps, unmaps, rawMaps, rawUnmaps map[string]uint64
			require.Equal(t, cudadrv.Success, cudatest.InContext(c.current, func() {
				counter, ok := cudatest.CountCalls(names...)
				require.True(t, ok)
				sum := func(into *map[string]uint64) {
					if *into == nil {
						*into = map[string]uint64{}
					}
					for n, v := range counter.Made() {
						(*into)[n] += v
					}
					counter.Reset()
				}
				for range pairs {
					counter.Reset()
					require.NoError(t, r.Map(g, 2*g))
					sum(&maps)
					require.NoError(t, r.Unmap(g, 2*g))
					sum(&unmaps)
				}
				if c.current == 0 {
					return // the raw calls need a current context
				}
				for range pairs {
					counter.Reset()
					h, res := cudatest.RawMap(d.Ordinal(), r.Base()+uintptr(g), 2*g)
					require.Equal(t, cudadrv.Success, res)
					sum(&rawMaps)
					require.Equal(t, cudadrv.Success, cudatest.RawUnmap(r.Base()+uintptr(g), 2*g, h))
					sum(&rawUnmaps)
				}
			}))
			perPair := func(m map[string]uint64) map[string]uint64 {
				out := map[string]uint64{}
				for n, v := range m {
					assert.Zero(t, v%pairs, "%s: %d calls in %d pairs", n, v, pairs)
					out[n] = v / pairs
				}
				return out
			}
			wantMap := map[string]uint64{"cuCtxGetCurrent": 1, "cuThreadExchangeStreamCaptureMode": 2,
				"cuMemCreate": 1, "cuMemMap": 1, "cuMemSetAccess": 1}
			wantUnmap := map[string]uint64{"cuCtxGetCurrent": 1, "cuThreadExchangeStreamCaptureMode": 2,
				"cuMemUnmap": 1, "cuMemRelease": 1}
			if c.ctxSets > 0 {
				wantMap["cuCtxSetCurrent"], wantUnmap["cuCtxSetCurrent"] = c.ctxSets, c.ctxSets
			}
			assert.Equal(t, wantMap, perPair(maps), "driver calls per map")
			assert.Equal(t, wantUnmap, perPair(unmaps), "driver calls per unmap")
			if c.current != 0 {
				assert.Equal(t, map[string]uint64{"cuMemCreate": 1, "cuMemMap": 1, "cuMemSetAccess": 1}, perPair(rawMaps), "the raw map")
				assert.Equal(t, map[string]uint64{"cuMemUnmap": 1, "cuMemRelease": 1}, perPair(rawUnmaps), "the raw unmap")
			}
		})
	}
}

// TestCUDAReservationRefusals: a map past the end of the reservation,
// over a mapping or off the granularity, and an unmap of anything but one
// whole mapping, are refused by memtrack's own check (internal/addrspace),
// before any driver call, changing no figure. The driver is no guard: an
// H200 mapped 2 granules at the last granule of a reservation of 4
// (cuMemMap answered 0), and unmapped a range of two mappings and a
// granule never mapped (testdata/fakecuda/RULES.md), as the fake does.
func TestCUDAReservationRefusals(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	r, g := cudaReserve(t, d, 8)
	require.NoError(t, r.Map(0, 2*g))
	require.NoError(t, r.Map(2*g, g))
	t.Cleanup(func() { _ = r.Unmap(0, 2*g); _ = r.Unmap(2*g, g) })
	require.NoError(t, cudatest.Load())
	counter, counted := cudatest.CountCalls(cudatest.VMMEntryPoints()...)
	for _, tc := range []struct {
		name string
		op   func() error
		want error
	}{
		{"a map past the end", func() error { return r.Map(7*g, 2*g) }, ErrOutOfRange},
		{"a map at the end", func() error { return r.Map(8*g, g) }, ErrOutOfRange},
		{"a map over a mapping", func() error { return r.Map(g, 2*g) }, ErrOverlap},
		{"a map off the granularity", func() error { return r.Map(4*g, g+4096) }, ErrUnaligned},
		{"an unmap of part of a mapping", func() error { return r.Unmap(0, g) }, ErrNotMapped},
		{"an unmap of two mappings", func() error { return r.Unmap(0, 3*g) }, ErrNotMapped},
		{"an unmap of nothing mapped", func() error { return r.Unmap(4*g, g) }, ErrNotMapped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := d.MemoryStats()
			if counted {
				counter.Reset()
			}
			assert.ErrorIs(t, tc.op(), tc.want)
			if counted {
				assert.Empty(t, counter.Made(), "no driver call")
			}
			assert.Equal(t, before, d.MemoryStats(), "no figure moved")
			assert.Equal(t, 3*g, r.Mapped())
		})
	}
}

// TestCUDAReturnCheck: after an unmap the driver has the memory back, by
// its device-wide figure and by NVML's figure of this process, within the
// granularity (exactly, on the fake).
func TestCUDAReturnCheck(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	r, g := cudaReserve(t, d, 8)
	for i := range int64(4) {
		require.NoError(t, r.Map(2*i*g, 2*g))
	}
	c, err := d.StartReturnCheck()
	require.NoError(t, err)
	require.NoError(t, r.Unmap(0, 2*g))
	require.NoError(t, r.Unmap(2*g, 2*g))
	ret, err := c.End()
	require.NoError(t, err)
	t.Log(ret)
	assert.Equal(t, 4*g, ret.Unmapped)
	assert.Equal(t, 4*g, ret.Expected)
	assert.Equal(t, g, ret.Granularity)
	assert.True(t, ret.Returned(), "%v", ret)
	if onFake() {
		assert.Equal(t, 4*g, ret.DeviceReturned, "the fake's device is this process's alone")
		if ret.PerProcess {
			assert.Equal(t, 4*g, ret.ProcessReturned)
		}
	}
	assert.Contains(t, ret.String(), "given back")
	require.NoError(t, r.Unmap(4*g, 2*g))
	require.NoError(t, r.Unmap(6*g, 2*g))
}

// TestCUDAReturnCheckCountsLeakUnmaps: on the second GPU, a mapping that
// the leak watch unmaps (FreeLeaks) while a return check runs counts in
// the check's Unmapped, and the driver has its memory back.
func TestCUDAReturnCheckCountsLeakUnmaps(t *testing.T) {
	d := cudaDevices(t, 2)[1]
	ret := testReturnCheckCountsLeakUnmaps(t, d, nil)
	if onFake() {
		assert.Equal(t, ret.Expected, ret.DeviceReturned, "the fake's device is this process's alone")
		if ret.PerProcess {
			assert.Equal(t, ret.Expected, ret.ProcessReturned)
		}
	}
}

// TestCUDAReservationChildren runs the cases that need a driver of their
// own, each in a process of its own (runChild): the driver is loaded once
// and the fake reads its switches once.
func TestCUDAReservationChildren(t *testing.T) {
	requireFake(t)
	for _, c := range []struct {
		child string
		env   []string
	}{
		{"TestCUDAChildNoVMM", []string{"FAKECUDA_VMM=0", "MEMTRACK_WANT=CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0"}},
		{"TestCUDAChildNoVMM", []string{"FAKECUDA_HIDE=cuMemMap", "MEMTRACK_WANT=cuMemMap of CUDA 10.2"}},
		{"TestCUDAChildNoVMM", []string{"FAKECUDA_VERSION=10010", "MEMTRACK_WANT=cuMemAddressReserve of CUDA 10.2"}},
		{"TestCUDAChildMapOutOfMemory", []string{"FAKECUDA_CAPACITY=67108864"}},
		{"TestCUDAChildReleaseRefused", []string{"FAKECUDA_FAIL=cuMemRelease:1:1"}},
	} {
		t.Run(c.child+"/"+strings.Join(c.env, ","), func(t *testing.T) {
			runChild(t, c.child, c.env)
		})
	}
}

// TestCUDAChildNoVMM: a device without virtual memory management, or a
// driver without its calls, answers ErrNotSupported, saying why, and
// changes no figure.
func TestCUDAChildNoVMM(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	before := d.MemoryStats()
	_, err := d.MapGranularity()
	require.ErrorIs(t, err, ErrNotSupported)
	assert.ErrorContains(t, err, os.Getenv("MEMTRACK_WANT"))
	_, err = d.Reserve(2 << 20)
	require.ErrorIs(t, err, ErrNotSupported)
	_, err = d.StartReturnCheck()
	require.ErrorIs(t, err, ErrNotSupported)
	assert.Equal(t, before, d.MemoryStats())
	b, err := d.Alloc(1 << 20) // the rest works
	require.NoError(t, err)
	require.NoError(t, b.Free())
}

// TestCUDAChildMapOutOfMemory: a mapping the driver refuses (cuMemCreate:
// CUDA_ERROR_OUT_OF_MEMORY) is an OutOfMemoryError with its report, counted
// in FailedAllocs and nowhere else; the range stays free and nothing is
// left on the device.
func TestCUDAChildMapOutOfMemory(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	r, g := cudaReserve(t, d, 64)
	require.NoError(t, r.Map(0, 4*g))
	before, usedBefore := d.MemoryStats(), used(t, d)
	err := r.Map(4*g, 32*g) // a 64 MiB device, 8 MiB mapped already
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, 32*g, oom.Requested)
	assert.Contains(t, oom.Reason, "cuMemCreate")
	assert.Equal(t, 4*g, oom.Tracked)
	after := d.MemoryStats()
	assert.Equal(t, before.FailedAllocs+1, after.FailedAllocs)
	assert.Equal(t, before.Tracked, after.Tracked)
	assert.Equal(t, usedBefore, used(t, d))
	assert.Equal(t, 4*g, r.Mapped())
	require.NoError(t, r.Map(4*g, 2*g), "what fits maps")
	require.NoError(t, r.Unmap(4*g, 2*g))
	require.NoError(t, r.Unmap(0, 4*g))
}

// TestCUDAChildReleaseRefused: where the driver unmaps a mapping but
// refuses to release its memory (cuMemRelease fails), the unmap succeeds
// (the range is unmapped), memtrack uncounts it, and the return check
// finds the memory not given back and says so.
func TestCUDAChildReleaseRefused(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	r, g := cudaReserve(t, d, 4)
	require.NoError(t, r.Map(0, 2*g))
	c, err := d.StartReturnCheck()
	require.NoError(t, err)
	require.NoError(t, r.Unmap(0, 2*g))
	ret, err := c.End()
	require.NoError(t, err)
	t.Log(ret)
	assert.Zero(t, r.Mapped())
	assert.False(t, ret.Returned())
	assert.Equal(t, 2*g, ret.NotGiven())
	assert.Contains(t, ret.String(), "NOT given back")
	require.NoError(t, r.Map(0, 2*g), "the range is free again")
	require.NoError(t, r.Unmap(0, 2*g))
}
