//go:build cuda

package memtrack

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mumax/3/cuda/cu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// retireModes are the two ways FreeAsync learns that a free has executed;
// the tests run with each.
var retireModes = []struct {
	name string
	mode uint32
}{{"hostfunc", retireByHostFunc}, {"event", retireByEvent}}

// inContext runs f, a sequence of cu calls, in d's primary context on a
// locked thread, and restores the thread's context.
func inContext(t testing.TB, d Device, f func()) {
	t.Helper()
	_, ctx, err := cudaDeviceOf(d.Ordinal(), "test")
	require.NoError(t, err)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, guard("test", func() {
		prev := cu.CtxGetCurrent()
		cu.CtxSetCurrent(cuCtx(ctx))
		defer cu.CtxSetCurrent(prev)
		f()
	}))
}

// newStream creates a stream on d, destroyed when the test ends.
func newStream(t testing.TB, d Device) Stream {
	t.Helper()
	var s cu.Stream
	inContext(t, d, func() { s = cu.StreamCreate() })
	t.Cleanup(func() { inContext(t, d, func() { s.Destroy() }) })
	return Stream(s)
}

// syncStream waits until s (on d) has executed everything enqueued.
func syncStream(t testing.TB, d Device, s Stream) {
	t.Helper()
	inContext(t, d, func() { cu.StreamSynchronize(cu.Stream(s)) })
}

// withRetire sets how FreeAsync learns of executed frees on d, for the test.
func withRetire(t testing.TB, d Device, mode uint32) {
	sd := sideOf(d.Ordinal())
	old := sd.retire.Swap(mode)
	t.Cleanup(func() { sd.retire.Store(old) })
}

func poolStats(t testing.TB, d Device) PoolStats {
	t.Helper()
	p, err := d.PoolStats()
	require.NoError(t, err)
	return p
}

func TestCUDAAllocFreeAsync(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	require.NoError(t, d.EnableMemoryHistory(64))
	t.Cleanup(d.DisableMemoryHistory)
	for _, m := range retireModes {
		t.Run(m.name, func(t *testing.T) {
			withRetire(t, d, m.mode)
			for _, stream := range []Stream{s, DefaultStream} {
				before := d.MemoryStats()
				const size = 3 << 20
				b, err := d.AllocAsync(size, stream)
				require.NoError(t, err)
				assert.NotZero(t, b.DevicePtr())
				assert.Nil(t, b.Bytes())
				assert.Equal(t, d, b.Device())
				during := d.MemoryStats()
				assert.Equal(t, before.Tracked+size, during.Tracked)
				assert.Equal(t, before.Held+size, during.Held)
				assert.Equal(t, before.Allocs+1, during.Allocs)
				assert.Equal(t, before.Buffers+1, during.Buffers)

				require.NoError(t, b.FreeAsync(stream))
				assert.True(t, b.Freed())
				assert.Zero(t, b.DevicePtr())
				assert.Equal(t, before.Tracked, d.MemoryAllocated(), "the tracked figure drops at FreeAsync's return")
				assert.ErrorIs(t, b.FreeAsync(stream), ErrDoubleFree)
				assert.ErrorIs(t, b.Free(), ErrDoubleFree)

				syncStream(t, d, stream)
				after := d.MemoryStats()
				assert.Equal(t, before.Tracked, after.Tracked)
				assert.Equal(t, before.Held, after.Held, "the device-side figure meets it once the stream has run the free")
				assert.Equal(t, before.Frees+1, after.Frees)
				assert.Equal(t, before.FreedBytes+size, after.FreedBytes)
				assert.Equal(t, before.FailedAllocs, after.FailedAllocs)

				h, err := d.MemoryHistory()
				require.NoError(t, err)
				require.GreaterOrEqual(t, len(h.Events), 2)
				last := h.Events[len(h.Events)-2:]
				assert.Equal(t, []HistoryAction{HistoryAlloc, HistoryFree}, []HistoryAction{last[0].Action, last[1].Action})
				assert.Equal(t, []uintptr{uintptr(stream), uintptr(stream)}, []uintptr{last[0].Stream, last[1].Stream}, "the history names the stream")
			}
		})
	}
}

// TestCUDAFreeOfAsyncBuffer: Free releases a stream-ordered buffer at once,
// from both figures.
func TestCUDAFreeOfAsyncBuffer(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	before := d.MemoryStats()
	b, err := d.AllocAsync(1<<20, s)
	require.NoError(t, err)
	syncStream(t, d, s) // the work that uses it is done
	require.NoError(t, b.Free())
	after := d.MemoryStats()
	assert.Equal(t, before.Tracked, after.Tracked)
	assert.Equal(t, before.Held, after.Held)
	assert.ErrorIs(t, b.FreeAsync(s), ErrDoubleFree)
}

func TestCUDAAllocAsyncErrors(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	total := func() int64 { _, tot, err := d.MemGetInfo(); require.NoError(t, err); return tot }()

	type check func(t *testing.T, err error)
	oom := func(code int, reason string) check {
		return func(t *testing.T, err error) {
			var e *OutOfMemoryError
			require.ErrorAs(t, err, &e)
			assert.ErrorIs(t, err, ErrOutOfMemory)
			assert.Equal(t, d, e.Device)
			assert.Equal(t, code, e.Code)
			assert.Contains(t, e.Error(), reason)
		}
	}
	for _, tc := range []struct {
		name   string
		size   int64
		limit  int64
		failed int64 // failures it counts
		check  check
	}{
		{"zero size", 0, 0, 0, func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrInvalidSize) }},
		{"negative size", -5, 0, 0, func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrInvalidSize) }},
		{"past the device", total + 1, 0, 1, oom(int(cu.ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY")},
		{"past the limit", 2 << 20, 1 << 20, 1, oom(0, "memory limit")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.limit > 0 {
				require.NoError(t, d.SetMemoryLimit(d.MemoryAllocated()+tc.limit))
				defer func() { require.NoError(t, d.SetMemoryLimit(0)) }()
			}
			before := d.MemoryStats()
			pool := poolStats(t, d)
			b, err := d.AllocAsync(tc.size, s)
			assert.Nil(t, b)
			tc.check(t, err)
			after := d.MemoryStats()
			before.FailedAllocs += tc.failed
			assert.Equal(t, before, after, "only the failure is counted")
			assert.Equal(t, pool.PoolUsed, poolStats(t, d).PoolUsed, "the pool gave nothing")
		})
	}

	t.Run("FreeAsync of a nil buffer", func(t *testing.T) {
		var b *Buffer
		assert.ErrorIs(t, b.FreeAsync(s), ErrNilBuffer)
	})
	t.Run("FreeAsync of a buffer from Alloc", func(t *testing.T) {
		b, err := d.Alloc(1 << 10)
		require.NoError(t, err)
		before := d.MemoryStats()
		err = b.FreeAsync(s)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), "free it with Free")
		assert.False(t, b.Freed())
		assert.Equal(t, before, d.MemoryStats())
		require.NoError(t, b.Free())
	})
	t.Run("not a CUDA device", func(t *testing.T) {
		before := CPU().MemoryStats()
		b, err := CPU().AllocAsync(1<<10, DefaultStream)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, ErrNotSupported)
		_, err = CPU().PoolStats()
		assert.ErrorIs(t, err, ErrNotSupported)
		assert.ErrorIs(t, CPU().TrimPool(0), ErrNotSupported)
		assert.Equal(t, before, CPU().MemoryStats())
	})
	t.Run("negative pool figures", func(t *testing.T) {
		assert.ErrorIs(t, d.TrimPool(-1), ErrInvalidSize)
		assert.ErrorIs(t, d.SetPoolReleaseThreshold(-1), ErrInvalidSize)
	})
}

// TestCUDAPoolTrimAndThreshold: with a release threshold the pool keeps its
// reserve across a synchronization; TrimPool returns it; with the threshold
// back at 0 a synchronization returns it.
func TestCUDAPoolTrimAndThreshold(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	const size, n = 3 << 20, 10
	require.NoError(t, d.SetPoolReleaseThreshold(1<<30))
	defer func() { require.NoError(t, d.SetPoolReleaseThreshold(0)) }()
	assert.Equal(t, int64(1<<30), poolStats(t, d).ReleaseThreshold)

	round := func() {
		var bufs []*Buffer
		for range n {
			b, err := d.AllocAsync(size, s)
			require.NoError(t, err)
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			require.NoError(t, b.FreeAsync(s))
		}
		syncStream(t, d, s)
	}
	round()
	kept := poolStats(t, d)
	assert.GreaterOrEqual(t, kept.PoolReserved, int64(size*n), "the threshold keeps the reserve")
	if onFake() {
		assert.Equal(t, int64(size*n), kept.PoolReserved, "30 MiB is 15 granules of 2 MiB")
		assert.Zero(t, kept.PoolUsed)
	}
	require.NoError(t, d.TrimPool(0))
	trimmed := poolStats(t, d)
	assert.Less(t, trimmed.PoolReserved, kept.PoolReserved)
	if onFake() {
		assert.Zero(t, trimmed.PoolReserved)
	}

	require.NoError(t, d.SetPoolReleaseThreshold(0))
	round()
	if onFake() {
		assert.Zero(t, poolStats(t, d).PoolReserved, "with threshold 0 a synchronization releases the reserve")
	}
}

// TestCUDAResetEveryPeak: ResetPeakMemoryStats resets the tracked peak, the
// device-side peak and the pool's two highs at once.
func TestCUDAResetEveryPeak(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	b, err := d.AllocAsync(8<<20, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	syncStream(t, d, s)
	st, pool := d.MemoryStats(), poolStats(t, d)
	require.Greater(t, st.PeakHeld, st.Held)
	require.Greater(t, pool.PeakPoolUsed, pool.PoolUsed)

	d.ResetPeakMemoryStats()
	st, pool = d.MemoryStats(), poolStats(t, d)
	assert.Equal(t, st.Tracked, st.PeakTracked)
	assert.Equal(t, st.Held, st.PeakHeld)
	assert.Equal(t, pool.PoolUsed, pool.PeakPoolUsed)
	assert.Equal(t, pool.PoolReserved, pool.PeakPoolReserved)
}

// TestCUDAStreamsConcurrent: workers on two devices allocate on one stream
// and free on another, with both ways of learning of executed frees. Every
// worker holds one buffer on each device at one moment (a barrier), so the
// tracked peak is exact; after the streams are synchronized the device-side
// figure meets the tracked one.
func TestCUDAStreamsConcurrent(t *testing.T) {
	ds := cudaDevices(t, 1)
	if d1, err := CUDA(1); err == nil {
		ds = append(ds, d1)
	}
	const workers, size = 8, 1 << 20
	rounds := 100
	if testing.Short() {
		rounds = 10
	}
	streams := make([][]Stream, len(ds))
	var base []Stats
	for i, d := range ds {
		streams[i] = []Stream{DefaultStream, newStream(t, d), newStream(t, d), newStream(t, d)}
		withRetire(t, d, retireModes[i%2].mode)
		for _, s := range streams[i] {
			syncStream(t, d, s)
		}
		d.ResetPeakMemoryStats()
		base = append(base, d.MemoryStats())
	}

	var held, release, done sync.WaitGroup
	held.Add(workers)
	release.Add(1)
	errs := make(chan error, workers)
	for w := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			for r := range rounds {
				var bufs []*Buffer
				for i, d := range ds {
					ss := streams[i]
					b, err := d.AllocAsync(size, ss[(w+r)%len(ss)])
					if err != nil {
						errs <- err
						return
					}
					bufs = append(bufs, b)
				}
				if r == 0 {
					held.Done()
					release.Wait()
				}
				for i, b := range bufs {
					ss := streams[i]
					if err := b.FreeAsync(ss[(w+r+1)%len(ss)]); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	held.Wait()
	for i, d := range ds {
		s := d.MemoryStats()
		assert.Equal(t, base[i].Tracked+workers*size, s.Tracked)
		assert.GreaterOrEqual(t, s.Held, s.Tracked)
	}
	release.Done()
	done.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i, d := range ds {
		for _, s := range streams[i] {
			syncStream(t, d, s)
		}
		s := d.MemoryStats()
		assert.Equal(t, base[i].Tracked, s.Tracked)
		assert.Equal(t, base[i].Held, s.Held, "%v: every executed free reached the device-side figure", d)
		assert.Equal(t, base[i].Tracked+workers*size, s.PeakTracked, "%v: the tracked peak is exact", d)
		assert.GreaterOrEqual(t, s.PeakHeld, s.PeakTracked)
		assert.Equal(t, base[i].Allocs+int64(workers*rounds), s.Allocs)
		assert.Equal(t, base[i].Frees+int64(workers*rounds), s.Frees)
	}
}

// The checks below need the fake driver configured for them, in a process
// of its own (as TestCUDAFaults does): TestCUDAStreamChildren runs each
// TestCUDAStreamChild* in the test binary again with the fake's environment.
func TestCUDAStreamChildren(t *testing.T) {
	requireFake(t)
	gate := filepath.Join(t.TempDir(), "gate")
	cases := []struct {
		child string
		env   []string
	}{
		{"TestCUDAStreamChildLag", []string{"FAKECUDA_STREAM_GATE=" + gate, "MEMTRACK_RETIRE=hostfunc"}},
		{"TestCUDAStreamChildLag", []string{"FAKECUDA_STREAM_GATE=" + gate, "MEMTRACK_RETIRE=event"}},
		{"TestCUDAStreamChildMeasureLag", []string{"FAKECUDA_STREAM_GATE=" + gate}},
		{"TestCUDAStreamChildRounding", []string{"FAKECUDA_POOL_ROUND=4096"}},
		{"TestCUDAStreamChildAllocFault", []string{"FAKECUDA_FAIL_ALLOC_ASYNC=2"}},
		{"TestCUDAStreamChildFreeFault", []string{"FAKECUDA_FAIL_FREE_ASYNC=1"}},
		{"TestCUDAStreamChildNoPools", []string{"FAKECUDA_NO_POOLS=1"}},
	}
	for _, c := range cases {
		t.Run(c.child+"/"+strings.Join(c.env[len(c.env)-1:], ","), func(t *testing.T) {
			os.Remove(gate)
			cmd := exec.Command(os.Args[0], "-test.run=^"+c.child+"$", "-test.v", "-test.count=1")
			gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
			cmd.Env = append(os.Environ(), "MEMTRACK_STREAM_CHILD="+c.child, "GORACE="+gorace, "MEMTRACK_GATE="+gate)
			cmd.Env = append(cmd.Env, c.env...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "child output:\n%s", out)
			assert.Contains(t, string(out), "--- PASS: "+c.child, "child output:\n%s", out)
		})
	}
}

func streamChild(t *testing.T) Device {
	if os.Getenv("MEMTRACK_STREAM_CHILD") != t.Name() {
		t.Skip("run by TestCUDAStreamChildren in a process of its own")
	}
	return cudaDevices(t, 1)[0]
}

// TestCUDAStreamChildLag: every stream holds its work until the test opens
// the gate. Freed on the host, a buffer stays in the device-side figure and
// in the pool; once the stream has run, the figures meet, and the
// device-side peak is the pool's USED_MEM_HIGH.
func TestCUDAStreamChildLag(t *testing.T) {
	d := streamChild(t)
	mode := retireByHostFunc
	if os.Getenv("MEMTRACK_RETIRE") == "event" {
		mode = retireByEvent
	}
	withRetire(t, d, mode)
	s1, s2 := newStream(t, d), newStream(t, d)
	d.ResetPeakMemoryStats()

	a, err := d.AllocAsync(4<<20, s1)
	require.NoError(t, err)
	b, err := d.AllocAsync(2<<20, s1)
	require.NoError(t, err)
	require.NoError(t, a.FreeAsync(s2)) // on another stream than its allocation
	c, err := d.AllocAsync(1<<20, s2)
	require.NoError(t, err)

	st, pool := d.MemoryStats(), poolStats(t, d)
	assert.Equal(t, int64(3<<20), st.Tracked, "b and c")
	assert.Equal(t, int64(7<<20), st.Held, "a is freed on the host only")
	assert.Equal(t, int64(6<<20), st.PeakTracked)
	assert.Equal(t, int64(7<<20), st.PeakHeld)
	assert.Equal(t, int64(7<<20), pool.PoolUsed)
	u, err := d.PoolUsage()
	require.NoError(t, err)
	assert.Equal(t, int64(4<<20), u.InFlight)
	assert.Zero(t, u.Rounding)
	assert.Equal(t, int64(8<<20)-int64(7<<20), u.Cached, "7 MiB in 2 MiB granules")

	require.NoError(t, b.FreeAsync(s1))
	require.NoError(t, c.FreeAsync(s1))
	assert.Zero(t, d.MemoryAllocated())
	assert.Equal(t, int64(7<<20), d.MemoryStats().Held, "nothing has run yet")

	require.NoError(t, os.WriteFile(os.Getenv("MEMTRACK_GATE"), nil, 0o600))
	syncStream(t, d, s1)
	syncStream(t, d, s2)
	st, pool = d.MemoryStats(), poolStats(t, d)
	assert.Zero(t, st.Tracked)
	assert.Zero(t, st.Held, "the device-side figure meets the tracked one")
	assert.Equal(t, int64(7<<20), st.PeakHeld)
	assert.Equal(t, pool.PeakPoolUsed, st.PeakHeld, "nothing is rounded: the device-side peak is the pool's")
	assert.Zero(t, pool.PoolUsed)
	assert.Zero(t, pool.PoolReserved, "released at the synchronization (threshold 0)")
	assert.Equal(t, int64(8<<20), pool.PeakPoolReserved)
}

// TestCUDAStreamChildRounding: the pool rounds each allocation up to 4 KiB;
// PoolUsage names the difference.
func TestCUDAStreamChildRounding(t *testing.T) {
	d := streamChild(t)
	s := newStream(t, d)
	var bufs []*Buffer
	for range 3 {
		b, err := d.AllocAsync(1000, s)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	u, err := d.PoolUsage()
	require.NoError(t, err)
	assert.Equal(t, int64(3000), u.Held)
	assert.Equal(t, int64(3*4096), u.PoolUsed)
	assert.Equal(t, int64(3*4096-3000), u.Rounding)
	for _, b := range bufs {
		require.NoError(t, b.FreeAsync(s))
	}
	syncStream(t, d, s)
	st, pool := d.MemoryStats(), poolStats(t, d)
	assert.Equal(t, int64(3000), st.PeakHeld)
	assert.Equal(t, int64(3*4096), pool.PeakPoolUsed)
}

// TestCUDAStreamChildAllocFault: the fake's pool refuses the second
// cuMemAllocAsync.
func TestCUDAStreamChildAllocFault(t *testing.T) {
	d := streamChild(t)
	first, err := d.AllocAsync(1<<20, DefaultStream)
	require.NoError(t, err)
	before := d.MemoryStats()
	b, err := d.AllocAsync(2<<20, DefaultStream)
	assert.Nil(t, b)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int(cu.ERROR_OUT_OF_MEMORY), oom.Code)
	assert.Equal(t, int64(2<<20), oom.Requested)
	assert.Equal(t, int64(1<<20), oom.Tracked)
	before.FailedAllocs++
	assert.Equal(t, before, d.MemoryStats(), "a refused allocation counts one failure and nothing else")
	require.NoError(t, first.FreeAsync(DefaultStream))
}

// TestCUDAStreamChildFreeFault: the fake refuses the first cuMemFreeAsync;
// the buffer stays live and counted, and a second FreeAsync frees it.
func TestCUDAStreamChildFreeFault(t *testing.T) {
	d := streamChild(t)
	s := newStream(t, d)
	b, err := d.AllocAsync(1<<20, s)
	require.NoError(t, err)
	ptr := b.DevicePtr()
	before := d.MemoryStats()
	err = b.FreeAsync(s)
	var be *BackendError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "free", be.Op)
	assert.Equal(t, "CUDA_ERROR_INVALID_VALUE", be.Name)
	assert.Equal(t, d, be.Device)
	assert.False(t, b.Freed())
	assert.Equal(t, ptr, b.DevicePtr())
	assert.Equal(t, before, d.MemoryStats(), "a refused free uncounts nothing")

	require.NoError(t, b.FreeAsync(s))
	syncStream(t, d, s)
	st := d.MemoryStats()
	assert.Zero(t, st.Tracked)
	assert.Zero(t, st.Held)
}

// TestCUDAStreamChildNoPools: a device without memory pools answers every
// pool call with ErrNotSupported and a reason, and counts nothing.
func TestCUDAStreamChildNoPools(t *testing.T) {
	d := streamChild(t)
	before := d.MemoryStats()
	b, err := d.AllocAsync(1<<20, DefaultStream)
	assert.Nil(t, b)
	require.ErrorIs(t, err, ErrNotSupported)
	assert.Contains(t, err.Error(), "MEMORY_POOLS_SUPPORTED")
	_, err = d.PoolStats()
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.ErrorIs(t, d.TrimPool(0), ErrNotSupported)
	assert.ErrorIs(t, d.SetPoolReleaseThreshold(0), ErrNotSupported)
	assert.Equal(t, before, d.MemoryStats())
	assert.NotContains(t, d.MemorySummary(), "memory pool:")

	// Device.Alloc is unaffected.
	buf, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, buf.Free())
}

// TestCUDAStreamReconcile prints, per size, the figures of a stream-ordered
// allocation freed behind a delay: a memset of a large buffer enqueued
// first on the same stream (no kernel to compile). Two buffers are
// allocated and freed one after the other on the stream; the host sees one
// at a time, the device may hold both. It prints memtrack's tracked peak,
// its device-side peak and the pool's USED_MEM_HIGH and RESERVED_MEM_HIGH.
// scripts/gpu-check.sh runs it on a GPU with MEMTRACK_RECONCILE=1.
func TestCUDAStreamReconcile(t *testing.T) {
	if os.Getenv("MEMTRACK_RECONCILE") != "1" {
		t.Skip("set MEMTRACK_RECONCILE=1 (scripts/gpu-check.sh does)")
	}
	d := cudaDevices(t, 1)[0]
	if _, err := d.PoolStats(); err != nil {
		t.Skip(err)
	}
	s := newStream(t, d)
	blockerSize, repeat := int64(1<<30), 32 // about 10 ms of memset on a current GPU
	if onFake() {
		blockerSize, repeat = 1<<20, 4
	}
	blocker, err := d.Alloc(blockerSize)
	require.NoError(t, err)
	defer func() { require.NoError(t, blocker.Free()) }()

	var out strings.Builder
	fmt.Fprintf(&out, "%10s %12s %14s %12s %12s %14s %14s\n", "size", "tracked pk", "device-side pk", "pool used hi", "pool rsv hi", "held at free", "tracked at free")
	for _, size := range []int64{1 << 10, 1 << 20, 64 << 20, 256 << 20} {
		syncStream(t, d, s)
		require.NoError(t, d.TrimPool(0))
		d.ResetPeakMemoryStats()
		inContext(t, d, func() {
			for range repeat {
				cu.MemsetD8Async(cu.DevicePtr(blocker.DevicePtr()), 1, blockerSize, cu.Stream(s))
			}
		})
		a, err := d.AllocAsync(size, s)
		require.NoError(t, err)
		require.NoError(t, a.FreeAsync(s))
		b, err := d.AllocAsync(size, s)
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(s))
		atFree := d.MemoryStats()
		syncStream(t, d, s)
		st, pool := d.MemoryStats(), poolStats(t, d)

		assert.Equal(t, blockerSize+size, st.PeakTracked, "the host holds one buffer at a time")
		assert.GreaterOrEqual(t, atFree.Held, atFree.Tracked)
		assert.Equal(t, st.Tracked, st.Held, "after the synchronization the figures meet")
		assert.GreaterOrEqual(t, st.PeakHeld, st.PeakTracked)
		assert.GreaterOrEqual(t, pool.PeakPoolReserved, pool.PeakPoolUsed)
		fmt.Fprintf(&out, "%10s %12d %14d %12d %12d %14d %14d\n", formatBytes(size), st.PeakTracked-blockerSize, st.PeakHeld-blockerSize,
			pool.PeakPoolUsed, pool.PeakPoolReserved, atFree.Held-blockerSize, atFree.Tracked-blockerSize)
	}
	t.Log("\n" + out.String())
}

// TestCUDAPendingEventsBounded: with events, a program that frees in stream
// order and never reads its figures must not pile up a pending free (and an
// event) per FreeAsync. An allocation that stays within the device-side
// peak no longer reaps the pending events (count), so FreeAsync reaps them
// itself once reapBatch wait; the figures stay exact when read.
func TestCUDAPendingEventsBounded(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	withRetire(t, d, retireByEvent)
	sd := sideOf(d.Ordinal())
	// A peak well above what the loop holds, so that no allocation of the
	// loop raises it (and reaps on the way).
	big, err := d.Alloc(64 << 20)
	require.NoError(t, err)
	require.NoError(t, big.Free())
	before := d.MemoryStats()
	const rounds = 20 * reapBatch
	most := int64(0)
	for i := range rounds {
		b, err := d.AllocAsync(1<<10, s)
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(s))
		most = max(most, sd.npending.Load())
		if i%reapBatch == reapBatch-1 {
			syncStream(t, d, s) // at most reapBatch frees unexecuted at once
		}
	}
	// A reap leaves at most the reapBatch frees since the last synchronize,
	// and the next one comes at twice that: far below one per free (which
	// is what the loop left before FreeAsync reaped).
	assert.LessOrEqual(t, most, int64(2*reapBatch), "pending frees after %d FreeAsyncs", rounds)
	syncStream(t, d, s)
	after := d.MemoryStats()
	assert.Equal(t, before.Held, after.Held, "every free executed and counted")
	assert.Equal(t, before.Tracked, after.Tracked)
	assert.Zero(t, sd.npending.Load(), "a reading reaps every reached event")
}
