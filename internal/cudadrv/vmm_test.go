//go:build cuda

package cudadrv_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/memtrack/memtrack/internal/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Virtual memory management, on the driver the process loads: the rules of
// RULES.md's "Virtual memory management", through the raw calls
// (internal/cudatest) and through Map and Unmap.

// vmmKit is a device with virtual memory management, its primary
// context and its minimum granularity, and a figure of this process's
// memory on the device that nothing else moves.
type vmmKit struct {
	t    *testing.T
	ctx  cudadrv.Context
	gran int64
	// own returns this process's memory on device 0: NVML's figure of it
	// where NVML gives one, else, on the fake, cuMemGetInfo's used figure
	// (the process alone on its machine); nil where there is neither. A
	// GPU's cuMemGetInfo is no such figure: on an H200 its free figure
	// moved by tens of MiB between two readings with nothing mapped or
	// freed in between (28 MiB in TestMapRefused).
	own func() int64
}

// newVMMKit skips where the driver or device 0 lacks virtual memory
// management.
func newVMMKit(t *testing.T) *vmmKit {
	t.Helper()
	ctx := primary(t, 0)
	if err := cudadrv.VMM(); err != nil {
		t.Skip(err)
	}
	ok, r := cudadrv.VMMSupported(0)
	require.Equal(t, cudadrv.Success, r)
	if !ok {
		t.Skip("device 0 does not support virtual memory management")
	}
	gran, _, r := cudadrv.Granularity(0)
	require.Equal(t, cudadrv.Success, r)
	require.Positive(t, gran)
	k := &vmmKit{t: t, ctx: ctx, gran: gran}
	k.own = processFigure(t, ctx)
	return k
}

// processFigure returns a function that reads this process's memory on
// device 0 (vmmKit.own), or nil where there is none.
func processFigure(t *testing.T, ctx cudadrv.Context) func() int64 {
	t.Helper()
	if lib, err := nvml.Open(); err == nil {
		t.Cleanup(func() { lib.Close() })
		_, u, r := cudadrv.DeviceInfo(0)
		require.Equal(t, cudadrv.Success, r)
		uuid := fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		read := func() (int64, bool) {
			ps, err := lib.Processes(uuid)
			require.NoError(t, err)
			for _, p := range ps {
				if p.PID == os.Getpid() && p.UsedKnown {
					return int64(p.Used), true
				}
			}
			return 0, false
		}
		if _, ok := read(); ok {
			return func() int64 {
				t.Helper()
				n, ok := read()
				require.True(t, ok, "NVML lists this process")
				return n
			}
		}
	}
	if isFake(t) {
		return func() int64 {
			t.Helper()
			free, total, c := cudadrv.MemInfo(ctx)
			require.Equal(t, cudadrv.Call{}, c)
			return total - free
		}
	}
	return nil
}

// used returns this process's memory on the device (own), or 0 where
// there is no figure of it; usedIs checks it, and says once that it
// cannot where there is none.
func (k *vmmKit) used() int64 {
	k.t.Helper()
	if k.own == nil {
		return 0
	}
	return k.own()
}

func (k *vmmKit) usedIs(t *testing.T, want int64, msgAndArgs ...any) {
	t.Helper()
	if k.own == nil {
		t.Log("no figure of this process's memory that only it moves (NVML gives none here, and cuMemGetInfo counts the whole device): not checked")
		return
	}
	assert.Equal(t, want, k.own(), msgAndArgs...)
}

// reserve reserves n granules, aligned to the granularity, freed when the
// test ends unless the test freed them.
func (k *vmmKit) reserve(n int64) uintptr {
	k.t.Helper()
	p, c := cudadrv.AddressReserve(k.ctx, n*k.gran, k.gran)
	require.Equal(k.t, cudadrv.Call{}, c)
	require.NotZero(k.t, p)
	require.Zero(k.t, int64(p)%k.gran, "aligned as asked")
	k.t.Cleanup(func() { cudadrv.AddressFree(k.ctx, p, n*k.gran) })
	return p
}

// in runs f with the device's context current on a locked thread: the raw
// calls run in the current context.
func (k *vmmKit) in(f func()) { onThread(k.t, k.ctx, f) }

func TestGranularity(t *testing.T) {
	k := newVMMKit(t)
	lo, hi, r := cudadrv.Granularity(0)
	require.Equal(t, cudadrv.Success, r)
	assert.Positive(t, lo)
	assert.GreaterOrEqual(t, hi, lo)
	assert.Zero(t, hi%lo, "the recommended granularity is a multiple of the minimum")
	if isFake(t) && os.Getenv("FAKECUDA_GRANULARITY") == "" {
		assert.Equal(t, int64(2<<20), k.gran, "the fake's default, as a GPU's")
	}
}

// Map makes memory the driver counts and the device can read and write;
// Unmap gives it back; the reservation counted nothing.
func TestMapUnmap(t *testing.T) {
	k := newVMMKit(t)
	before := k.used()
	p := k.reserve(64)
	k.usedIs(t, before, "a reservation holds no physical memory")

	h, c := cudadrv.Map(k.ctx, 0, p+uintptr(2*k.gran), 3*k.gran)
	require.Equal(t, cudadrv.VMMCall{}, c)
	require.NotZero(t, h)
	k.usedIs(t, before+3*k.gran, "the driver counts the memory mapped")
	k.in(func() {
		flags, r := cudatest.GetAccess(p+uintptr(2*k.gran), 0)
		require.Equal(t, cudadrv.Success, r)
		assert.Equal(t, cudatest.AccessReadWrite, flags, "Map made it readable and writable")
		require.Equal(t, cudadrv.Success, cudatest.MemsetD8Async(p+uintptr(2*k.gran), 0xab, 3*k.gran, 0))
		require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(0))
	})

	c = cudadrv.Unmap(k.ctx, p+uintptr(2*k.gran), 3*k.gran, h)
	require.Equal(t, cudadrv.VMMCall{}, c)
	k.usedIs(t, before, "the driver has the memory back")
	require.Equal(t, cudadrv.Call{}, cudadrv.AddressFree(k.ctx, p, 64*k.gran))
}

// Map's and Unmap's refusals name the step whose call failed and leave
// nothing behind.
func TestMapRefused(t *testing.T) {
	k := newVMMKit(t)
	before := k.used()
	p := k.reserve(4)
	for _, tc := range []struct {
		name string
		ptr  uintptr
		size int64
		step cudadrv.Step
	}{
		{"size off the granularity", p, k.gran + 4096, cudadrv.StepCreate},
		{"address off the granularity", p + 4096, k.gran, cudadrv.StepMap},
		{"more than the device has", p, 1 << 50, cudadrv.StepCreate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c := cudadrv.Map(k.ctx, 0, tc.ptr, tc.size)
			assert.Zero(t, h)
			assert.Equal(t, tc.step, c.Step, "%v", c)
			assert.NotEqual(t, cudadrv.Success, c.Op)
			assert.Equal(t, cudadrv.Success, c.Undo)
			assert.Equal(t, cudadrv.Success, c.Enter)
			assert.Equal(t, cudadrv.Success, c.Restore)
			k.usedIs(t, before, "nothing left behind")
		})
	}
	h, c := cudadrv.Map(k.ctx, 0, p, 2*k.gran)
	require.Equal(t, cudadrv.VMMCall{}, c)
	_, c = cudadrv.Map(k.ctx, 0, p, k.gran)
	assert.Equal(t, cudadrv.StepMap, c.Step, "a mapped range is not mapped again")
	k.usedIs(t, before+2*k.gran, "the second map's memory was released")
	c = cudadrv.Unmap(k.ctx, p, k.gran, h)
	assert.Equal(t, cudadrv.StepUnmap, c.Step, "part of a mapping")
	assert.Equal(t, invalidValue, c.Op)
	require.Equal(t, cudadrv.VMMCall{}, cudadrv.Unmap(k.ctx, p, 2*k.gran, h), "the failed unmap released nothing")
	k.usedIs(t, before)
	assert.Equal(t, "cuMemSetAccess", cudadrv.StepAccess.String())
	assert.Equal(t, "", cudadrv.StepNone.String())
}

// A map that runs past the end of its reservation: the reference asks for
// "an address reservation previously reserved" and says nothing of a
// range that leaves it, and an H200 mapped one (2 granules at the last
// granule of a reservation of 4: cuMemMap answered 0). The driver being no
// guard, memtrack checks its ranges itself (Reservation.Map, ErrOutOfRange,
// before any driver call). Whatever the driver answers, nothing is left
// behind: a mapping left there lay across the next reservation's addresses
// and made its first map fail (on the H200, TestVMMContextRestored's, with
// 1).
func TestMapPastTheReservation(t *testing.T) {
	k := newVMMKit(t)
	before := k.used()
	p := k.reserve(4)
	h, c := cudadrv.Map(k.ctx, 0, p+uintptr(3*k.gran), 2*k.gran)
	t.Logf("a map of 2 granules at the last granule of a reservation of 4: %+v", c)
	if isFake(t) {
		require.Equal(t, cudadrv.VMMCall{}, c, "mapped, as on an H200")
	}
	if c.Op == cudadrv.Success {
		require.NotZero(t, h)
		k.usedIs(t, before+2*k.gran, "the mapping's memory")
		require.Equal(t, cudadrv.VMMCall{}, cudadrv.Unmap(k.ctx, p+uintptr(3*k.gran), 2*k.gran, h))
	}
	k.usedIs(t, before, "nothing left behind")
	require.Equal(t, cudadrv.Call{}, cudadrv.AddressFree(k.ctx, p, 4*k.gran), "nothing mapped there any more")
}

// Where cuMemSetAccess fails, Map unmaps and releases what it made: the
// fake's third cuMemSetAccess of the process fails.
func TestMapUndo(t *testing.T) {
	if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", "FAKECUDA_FAIL=cuMemSetAccess:1:999,cuMemMap:2:2") {
		return
	}
	requireFakeDriver(t)
	k := newVMMKit(t)
	before := k.used()
	p := k.reserve(4)
	h, c := cudadrv.Map(k.ctx, 0, p, 2*k.gran)
	assert.Zero(t, h)
	assert.Equal(t, cudadrv.VMMCall{Call: cudadrv.Call{Op: 999}, Step: cudadrv.StepAccess}, c)
	k.usedIs(t, before, "unmapped and released")
	h, c = cudadrv.Map(k.ctx, 0, p, 2*k.gran)
	assert.Zero(t, h)
	assert.Equal(t, cudadrv.VMMCall{Call: cudadrv.Call{Op: cudadrv.OutOfMemory}, Step: cudadrv.StepMap}, c)
	k.usedIs(t, before, "released")
	h, c = cudadrv.Map(k.ctx, 0, p, 2*k.gran)
	require.Equal(t, cudadrv.VMMCall{}, c, "the range was left unmapped")
	require.Equal(t, cudadrv.VMMCall{}, cudadrv.Unmap(k.ctx, p, 2*k.gran, h))
}

// NVML's figure of the process counts the physical memory, as cuMemGetInfo
// does ("all of the memory used by the application"), and no address
// space: on the fake, exactly; on a GPU the figures are logged.
func TestVMMProcessFigure(t *testing.T) {
	k := newVMMKit(t)
	lib, err := nvml.Open()
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { lib.Close() })
	_, u, r := cudadrv.DeviceInfo(0)
	require.Equal(t, cudadrv.Success, r)
	uuid := fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	used := func() int64 {
		t.Helper()
		ps, err := lib.Processes(uuid)
		require.NoError(t, err)
		for _, p := range ps {
			if p.PID == os.Getpid() && p.UsedKnown {
				return int64(p.Used)
			}
		}
		t.Skip("NVML gives no figure of this process")
		return 0
	}
	devFree := func() int64 { // cuMemGetInfo, beside NVML's figure: the whole device's
		t.Helper()
		free, _, c := cudadrv.MemInfo(k.ctx)
		require.Equal(t, cudadrv.Call{}, c)
		return free
	}
	before, free := used(), devFree()
	p := k.reserve(16)
	reserved := used()
	h, c := cudadrv.Map(k.ctx, 0, p, 4*k.gran)
	require.Equal(t, cudadrv.VMMCall{}, c)
	mapped, freeMapped := used(), devFree()
	require.Equal(t, cudadrv.VMMCall{}, cudadrv.Unmap(k.ctx, p, 4*k.gran, h))
	unmapped := used()
	t.Logf("NVML's figure of this process: %+d bytes reserving 16 granules, %+d mapping 4, %+d unmapping them; cuMemGetInfo's free %+d mapping them",
		reserved-before, mapped-reserved, unmapped-mapped, freeMapped-free)
	if !isFake(t) {
		return
	}
	assert.Equal(t, before, reserved, "address space is not counted")
	assert.Equal(t, 4*k.gran, mapped-reserved, "physical memory is")
	assert.Equal(t, before, unmapped)
	assert.Equal(t, free-4*k.gran, freeMapped)
}

// Map and Unmap switch to the context and back, as every operation does.
func TestVMMContextRestored(t *testing.T) {
	k := newVMMKit(t)
	p := k.reserve(2)
	onThread(t, 0, func() {
		h, c := cudadrv.Map(k.ctx, 0, p, k.gran)
		require.Equal(t, cudadrv.VMMCall{}, c)
		assert.Zero(t, current(t), "no context current after Map")
		require.Equal(t, cudadrv.VMMCall{}, cudadrv.Unmap(k.ctx, p, k.gran, h))
		assert.Zero(t, current(t), "nor after Unmap")
	})
}

// The driver calls of one map and one unmap, counted by the fake: a map is
// cuMemCreate, cuMemMap and cuMemSetAccess, an unmap cuMemUnmap and
// cuMemRelease, as the raw pair's, plus the context switch (one
// cuCtxGetCurrent, and two cuCtxSetCurrent where another context is
// current) and the stream-capture mode made relaxed and put back (two
// cuThreadExchangeStreamCaptureMode).
func TestVMMDriverCalls(t *testing.T) {
	k := newVMMKit(t)
	if _, ok := cudatest.CountCalls(); !ok {
		t.Skip("the driver counts no calls: needs the fake driver of testdata/fakecuda")
	}
	p := k.reserve(4)
	names := cudatest.VMMEntryPoints()
	for _, tc := range []struct {
		name    string
		current cudadrv.Context
		ctxSets uint64
	}{
		{"the primary context current", k.ctx, 0},
		{"no context current", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onThread(t, tc.current, func() {
				n, _ := cudatest.CountCalls(names...)
				h, c := cudadrv.Map(k.ctx, 0, p, 2*k.gran)
				require.Equal(t, cudadrv.VMMCall{}, c)
				mapped := n.Made()
				n.Reset()
				require.Equal(t, cudadrv.VMMCall{}, cudadrv.Unmap(k.ctx, p, 2*k.gran, h))
				unmapped := n.Made()
				around := map[string]uint64{"cuCtxGetCurrent": 1, "cuThreadExchangeStreamCaptureMode": 2}
				if tc.ctxSets > 0 {
					around["cuCtxSetCurrent"] = tc.ctxSets
				}
				want := func(calls map[string]uint64) map[string]uint64 {
					for n, v := range around {
						calls[n] = v
					}
					return calls
				}
				assert.Equal(t, want(map[string]uint64{"cuMemCreate": 1, "cuMemMap": 1, "cuMemSetAccess": 1}), mapped, "one map")
				assert.Equal(t, want(map[string]uint64{"cuMemUnmap": 1, "cuMemRelease": 1}), unmapped, "one unmap")
				t.Logf("driver calls of a map: %v; of an unmap: %v", mapped, unmapped)
			})
		})
	}
	onThread(t, k.ctx, func() {
		n, _ := cudatest.CountCalls(names...)
		h, r := cudatest.RawMap(0, p, 2*k.gran)
		require.Equal(t, cudadrv.Success, r)
		assert.Equal(t, map[string]uint64{"cuMemCreate": 1, "cuMemMap": 1, "cuMemSetAccess": 1}, n.Made(), "the raw map")
		n.Reset()
		require.Equal(t, cudadrv.Success, cudatest.RawUnmap(p, 2*k.gran, h))
		assert.Equal(t, map[string]uint64{"cuMemUnmap": 1, "cuMemRelease": 1}, n.Made(), "the raw unmap")
	})
}

// A map or an unmap on one thread while another thread captures in global
// mode neither fails nor invalidates the capture, whether or not the
// driver counts the calls as potentially unsafe (FAKECUDA_VMM_CAPTURE): they
// run in relaxed mode.
func TestVMMDuringCapture(t *testing.T) {
	k := newVMMKit(t)
	p := k.reserve(2)
	s := newStream(t, k.ctx)
	onThread(t, k.ctx, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureGlobal))
		done := make(chan struct{})
		go func() {
			defer close(done)
			h, c := cudadrv.Map(k.ctx, 0, p, k.gran)
			assert.Equal(t, cudadrv.VMMCall{}, c)
			assert.Equal(t, cudadrv.VMMCall{}, cudadrv.Unmap(k.ctx, p, k.gran, h))
		}()
		<-done
		_, r := cudatest.EndCapture(s)
		assert.Equal(t, cudadrv.Success, r, "the capture is valid")
	})
}

// The rules, through the raw calls.
func TestVMMRules(t *testing.T) {
	k := newVMMKit(t)
	g := k.gran
	at := func(p uintptr, granules int64) uintptr { return p + uintptr(granules*g) }
	create := func(granules int64) cudadrv.Handle {
		t.Helper()
		h, r := cudatest.MemCreate(0, granules*g)
		require.Equal(t, cudadrv.Success, r)
		return h
	}
	k.in(func() {
		t.Run("sizes and offsets are multiples of the granularity", func(t *testing.T) {
			p := k.reserve(4)
			_, r := cudatest.MemCreate(0, g/2)
			assert.Equal(t, invalidValue, r, "cuMemCreate")
			h := create(2)
			assert.Equal(t, invalidValue, cudatest.MemMap(p+4096, 2*g, h), "cuMemMap at an address off the granularity")
			// The reference says "must be a multiple"; an H200 answered 801.
			assert.Equal(t, cudadrv.NotSupported, cudatest.MemMap(p, g+4096, h), "cuMemMap of a size off it")
			assert.Equal(t, cudadrv.Success, cudatest.MemRelease(h))
			// The reference asks for whole host pages; an H200 answered 1
			// to 2 MiB + 4 KiB.
			_, r = cudatest.AddressReserve(g+int64(os.Getpagesize()), 0)
			assert.Equal(t, invalidValue, r, "cuMemAddressReserve of a size off it")
		})
		t.Run("a reservation holds no physical memory", func(t *testing.T) {
			before := k.used()
			p, r := cudatest.AddressReserve(1<<40, 0) // a TiB
			require.Equal(t, cudadrv.Success, r)
			k.usedIs(t, before)
			assert.Equal(t, cudadrv.Success, cudatest.AddressFree(p, 1<<40))
		})
		t.Run("physical memory exists from create to release", func(t *testing.T) {
			before := k.used()
			h := create(3)
			k.usedIs(t, before+3*g, "counted at cuMemCreate, mapped or not")
			assert.Equal(t, cudadrv.Success, cudatest.MemRelease(h))
			k.usedIs(t, before)
		})
		t.Run("release frees nothing while a mapping remains", func(t *testing.T) {
			before := k.used()
			p := k.reserve(4)
			h := create(2)
			require.Equal(t, cudadrv.Success, cudatest.MemMap(p, 2*g, h))
			require.Equal(t, cudadrv.Success, cudatest.MemMap(at(p, 2), 2*g, h), "a second mapping of the same memory")
			require.Equal(t, cudadrv.Success, cudatest.MemRelease(h))
			k.usedIs(t, before+2*g, "released, still mapped twice")
			require.Equal(t, cudadrv.Success, cudatest.MemUnmap(p, 2*g))
			k.usedIs(t, before+2*g, "still mapped once")
			require.Equal(t, cudadrv.Success, cudatest.MemUnmap(at(p, 2), 2*g))
			k.usedIs(t, before, "freed with the last mapping")
		})
		t.Run("no access until access is set", func(t *testing.T) {
			p := k.reserve(2)
			h := create(2)
			require.Equal(t, cudadrv.Success, cudatest.MemMap(p, 2*g, h))
			f, r := cudatest.GetAccess(p, 0)
			require.Equal(t, cudadrv.Success, r)
			assert.Equal(t, cudatest.AccessNone, f, "a new mapping")
			require.Equal(t, cudadrv.Success, cudatest.SetAccess(p, 2*g, 0, cudatest.AccessReadWrite))
			f, _ = cudatest.GetAccess(at(p, 1), 0)
			assert.Equal(t, cudatest.AccessReadWrite, f)
			require.Equal(t, cudadrv.Success, cudatest.MemUnmap(p, 2*g))
			_, r = cudatest.GetAccess(p, 0)
			assert.Equal(t, invalidValue, r, "nothing mapped")
			require.Equal(t, cudadrv.Success, cudatest.MemMap(p, 2*g, h), "mapped again")
			f, _ = cudatest.GetAccess(p, 0)
			assert.Equal(t, cudatest.AccessNone, f, "a mapping again starts with no access")
			assert.Equal(t, invalidValue, cudatest.SetAccess(p, g, 0, cudatest.AccessReadWrite), "access is set on whole mappings")
			require.Equal(t, cudadrv.Success, cudatest.MemUnmap(p, 2*g))
			require.Equal(t, cudadrv.Success, cudatest.MemRelease(h))
		})
		t.Run("unmap takes whole mappings, never part of one", func(t *testing.T) {
			before := k.used()
			p := k.reserve(4)
			a, b := create(2), create(1)
			require.Equal(t, cudadrv.Success, cudatest.MemMap(p, 2*g, a))
			require.Equal(t, cudadrv.Success, cudatest.MemMap(at(p, 2), g, b))
			require.Equal(t, cudadrv.Success, cudatest.MemRelease(a))
			require.Equal(t, cudadrv.Success, cudatest.MemRelease(b))
			assert.Equal(t, invalidValue, cudatest.MemUnmap(p, g), "part of a mapping")
			assert.Equal(t, invalidValue, cudatest.MemUnmap(at(p, 1), 2*g), "parts of two")
			k.usedIs(t, before+3*g, "nothing unmapped")
			c := create(1)
			assert.Equal(t, invalidValue, cudatest.MemMap(at(p, 1), g, c), "nor mapped over")
			// NVIDIA's samples unmap several mappings back to back in one
			// call; an H200 unmapped a range with a granule never mapped
			// after them too (answering 0, its free figure 6 MiB up), and
			// a granule with nothing mapped (answering 0).
			require.Equal(t, cudadrv.Success, cudatest.MemUnmap(p, 4*g), "two whole mappings and a granule never mapped")
			k.usedIs(t, before+g, "only the handle not mapped is left")
			assert.Equal(t, cudadrv.Success, cudatest.MemUnmap(at(p, 1), g), "a granule with nothing mapped")
			require.Equal(t, cudadrv.Success, cudatest.MemMap(at(p, 1), g, c), "the range is free to map")
			require.Equal(t, cudadrv.Success, cudatest.MemUnmap(p, 3*g), "one mapping between granules never mapped")
			require.Equal(t, cudadrv.Success, cudatest.MemRelease(c))
			k.usedIs(t, before)
		})
	})
}

// readings runs observe, which returns the reading the driver follows, in
// this process, logging it as "vmm NAME reading: …" for
// scripts/gpu-check.sh, and, on the fake, checks it against the fake's
// switch env (want0 where it is unset); then, on the fake, in a process of
// its own for each of the other readings, with the switch set to it.
func readings(t *testing.T, name, env, want0 string, others []string, observe func(t *testing.T, k *vmmKit) (reading, why string)) {
	t.Run("as configured", func(t *testing.T) {
		k := newVMMKit(t)
		reading, why := observe(t, k)
		t.Logf("vmm %s reading: %s (%s)", name, reading, why)
		if !isFake(t) {
			return
		}
		want := os.Getenv(env)
		if want == "" {
			want = want0
		}
		assert.Equal(t, want, reading, "the fake's reading, %s=%s", env, os.Getenv(env))
	})
	for _, r := range others {
		t.Run(r, func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", env+"="+r) {
				return
			}
			requireFakeDriver(t)
			k := newVMMKit(t)
			reading, _ := observe(t, k)
			assert.Equal(t, r, reading)
		})
	}
}

// cuMemAddressFree of a range still mapped, which the guide tells
// programs not to do ("Users must ensure that the entire VA range is
// unmapped before calling cuMemAddressFree") and the reference does not
// settle: refused, unmapped with it, or the range freed once unmapped
// (FAKECUDA_VMM_ADDRESS_FREE). Whatever the reading, nothing is left.
func TestAddressFreeReading(t *testing.T) {
	readings(t, "address-free", "FAKECUDA_VMM_ADDRESS_FREE", "refuse", []string{"refuse", "unmap", "defer"},
		func(t *testing.T, k *vmmKit) (string, string) {
			g := k.gran
			var reading, why string
			k.in(func() {
				before := k.used()
				p, r := cudatest.AddressReserve(4*g, g)
				require.Equal(t, cudadrv.Success, r)
				h, r := cudatest.RawMap(0, p, 2*g)
				require.Equal(t, cudadrv.Success, r)
				require.Equal(t, cudadrv.Success, cudatest.MemRelease(h))
				assert.Equal(t, invalidValue, cudatest.AddressFree(p, 2*g), "the size must match the reservation's")
				freed := cudatest.AddressFree(p, 4*g)
				_, access := cudatest.GetAccess(p, 0)
				switch {
				case freed != cudadrv.Success:
					reading, why = "refuse", fmt.Sprintf("cuMemAddressFree answered %d (%s)", freed, cudadrv.Name(freed))
					assert.Equal(t, cudadrv.Success, access, "still mapped")
					k.usedIs(t, before+2*g, "the memory still held")
					require.Equal(t, cudadrv.Success, cudatest.MemUnmap(p, 2*g))
					require.Equal(t, cudadrv.Success, cudatest.AddressFree(p, 4*g))
				case access != cudadrv.Success:
					reading, why = "unmap", "cuMemAddressFree succeeded and unmapped what was mapped"
					k.usedIs(t, before, "the memory freed with the mapping")
				default:
					reading, why = "defer", "cuMemAddressFree succeeded; the mapping stays until unmapped"
					k.usedIs(t, before+2*g)
					assert.Equal(t, invalidValue, cudatest.AddressFree(p, 4*g), "freed once")
					require.Equal(t, cudadrv.Success, cudatest.MemUnmap(p, 2*g))
				}
				k.usedIs(t, before, "nothing left")
				assert.Equal(t, invalidValue, cudatest.AddressFree(p, 4*g), "the reservation is gone")
			})
			return reading, why
		})
}

// A reservation with alignment 0 gets the driver's default alignment,
// which the documents do not give (FAKECUDA_VMM_ALIGN); one with an
// alignment asked for is aligned to it, as memtrack asks. The sizes are
// whole granules: an H200 refused 2 MiB + 4 KiB (cuMemAddressReserve
// answered 1), though the reference asks for whole host pages only.
func TestAddressAlignReading(t *testing.T) {
	readings(t, "align", "FAKECUDA_VMM_ALIGN", "granularity", []string{"granularity", "page"},
		func(t *testing.T, k *vmmKit) (string, string) {
			var reading, why string
			k.in(func() {
				page := int64(os.Getpagesize())
				reading = "granularity"
				for range 16 { // a page-aligned base is granularity-aligned by chance one time in gran/page
					p, r := cudatest.AddressReserve(k.gran, 0)
					require.Equal(t, cudadrv.Success, r)
					assert.Zero(t, int64(p)%page, "page-aligned at least")
					why = fmt.Sprintf("alignment 0 gave %#x", p)
					require.Equal(t, cudadrv.Success, cudatest.AddressFree(p, k.gran))
					if int64(p)%k.gran != 0 {
						reading = "page"
						break
					}
					// Keep the range taken, so that the next is elsewhere.
					q, r := cudatest.AddressReserve(k.gran, k.gran)
					require.Equal(t, cudadrv.Success, r)
					defer cudatest.AddressFree(q, k.gran)
				}
				for range 8 {
					p, c := cudadrv.AddressReserve(k.ctx, k.gran, 4*k.gran)
					require.Equal(t, cudadrv.Call{}, c)
					assert.Zero(t, int64(p)%(4*k.gran))
					require.Equal(t, cudadrv.Call{}, cudadrv.AddressFree(k.ctx, p, k.gran))
				}
			})
			return reading, why
		})
}

// Whether the calls that create and map memory are potentially unsafe
// during stream capture, as cuMemAlloc is (FAKECUDA_VMM_CAPTURE): a raw
// cuMemCreate, in the default global mode, on one thread while another
// captures in global mode, fails and invalidates the capture, or does
// neither. (Map and Unmap run in relaxed mode, and are allowed either way:
// TestVMMDuringCapture.)
func TestVMMCaptureReading(t *testing.T) {
	readings(t, "capture", "FAKECUDA_VMM_CAPTURE", "allowed", []string{"allowed", "unsafe"},
		func(t *testing.T, k *vmmKit) (string, string) {
			s := newStream(t, k.ctx)
			var created, ended cudadrv.Result
			onThread(t, k.ctx, func() {
				require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureGlobal))
				done := make(chan struct{})
				go func() {
					defer close(done)
					onThread(t, k.ctx, func() {
						var h cudadrv.Handle
						if h, created = cudatest.MemCreate(0, k.gran); created == cudadrv.Success {
							assert.Equal(t, cudadrv.Success, cudatest.MemRelease(h))
						}
					})
				}()
				<-done
				_, ended = cudatest.EndCapture(s)
			})
			why := fmt.Sprintf("cuMemCreate during another thread's global capture answered %d, cuStreamEndCapture %d", created, ended)
			if created == cudadrv.Success {
				assert.Equal(t, cudadrv.Success, ended, "the capture is valid")
				return "allowed", why
			}
			assert.Equal(t, cudadrv.Result(900), created, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
			assert.Equal(t, cudadrv.Result(901), ended, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
			return "unsafe", why
		})
}

// A device without virtual memory management says so, and a driver
// without the calls makes VMM name the one missing.
func TestVMMMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		call string // what VMM names, or "" where the calls are there
	}{
		{"device 1 without it", "FAKECUDA_VMM=1,0", ""},
		{"no cuMemMap", "FAKECUDA_HIDE=cuMemMap", "cuMemMap"},
		{"no cuMemGetAllocationGranularity", "FAKECUDA_HIDE=cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", tc.env) {
				return
			}
			requireFakeDriver(t)
			ctx := primary(t, 0)
			if tc.call == "" {
				require.NoError(t, cudadrv.VMM())
				for dev, want := range []bool{true, false} {
					ok, r := cudadrv.VMMSupported(dev)
					require.Equal(t, cudadrv.Success, r)
					assert.Equal(t, want, ok, "device %d", dev)
				}
				_, _, r := cudadrv.Granularity(1)
				assert.Equal(t, cudadrv.NotSupported, r)
				p, c := cudadrv.AddressReserve(ctx, 2<<20, 2<<20)
				require.Equal(t, cudadrv.Call{}, c)
				_, vc := cudadrv.Map(ctx, 1, p, 2<<20)
				assert.Equal(t, cudadrv.StepCreate, vc.Step)
				assert.Equal(t, cudadrv.NotSupported, vc.Op, "cuMemCreate on device 1")
				assert.Equal(t, cudadrv.Call{}, cudadrv.AddressFree(ctx, p, 2<<20))
				return
			}
			var m *cudadrv.MissingError
			require.ErrorAs(t, cudadrv.VMM(), &m)
			assert.Equal(t, tc.call, m.Call)
			assert.Equal(t, 10020, m.Version)
			assert.Contains(t, m.Error(), tc.call+" of CUDA 10.2 (cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)")
			_, c := cudadrv.AddressReserve(ctx, 2<<20, 0)
			_, _, r := cudadrv.Granularity(0)
			if tc.call == "cuMemMap" {
				assert.Equal(t, cudadrv.NotSupported, c.Op)
				_, vc := cudadrv.Map(ctx, 0, 0, 2<<20)
				assert.Equal(t, cudadrv.NotSupported, vc.Op)
				assert.Equal(t, cudadrv.NotSupported, cudadrv.Unmap(ctx, 0, 2<<20, 1).Op)
				assert.Equal(t, cudadrv.Success, r, "the granularity is there")
			} else {
				assert.Equal(t, cudadrv.NotSupported, r)
			}
		})
	}
}

// isFake reports whether the driver loaded is the fake of testdata/fakecuda.
func isFake(t *testing.T) bool {
	t.Helper()
	name, _, r := cudadrv.DeviceInfo(0)
	require.Equal(t, cudadrv.Success, r)
	return strings.HasPrefix(name, "memtrack fakecuda")
}
