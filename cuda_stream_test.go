//go:build cuda

package memtrack

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/memtrack/memtrack/internal/held"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inContext runs f, a sequence of calls of internal/cudatest, in d's
// primary context on a locked thread, and restores the thread's context.
func inContext(t testing.TB, d Device, f func()) {
	t.Helper()
	_, ctx, err := cudaDeviceOf(d.Ordinal(), "test")
	require.NoError(t, err)
	require.NoError(t, cudatest.Load())
	require.Equal(t, cudadrv.Success, cudatest.InContext(uintptr(ctx), f))
}

// newStream creates a stream on d, destroyed when the test ends.
func newStream(t testing.TB, d Device) Stream {
	t.Helper()
	_, ctx, err := cudaDeviceOf(d.Ordinal(), "test")
	require.NoError(t, err)
	require.NoError(t, cudatest.Load())
	return Stream(cudatest.NewStream(t, uintptr(ctx)))
}

// syncStream waits until s (on d) has executed everything enqueued.
func syncStream(t testing.TB, d Device, s Stream) {
	t.Helper()
	inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(uintptr(s))) })
}

func poolStats(t testing.TB, d Device) PoolStats {
	t.Helper()
	p, err := d.Pool().Stats()
	require.NoError(t, err)
	return p
}

func TestCUDAAllocFreeAsync(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	require.NoError(t, d.History().Enable(64))
	t.Cleanup(d.History().Disable)
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

		h, err := d.History().Snapshot()
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(h.Events), 2)
		last := h.Events[len(h.Events)-2:]
		assert.Equal(t, []HistoryAction{HistoryAlloc, HistoryFree}, []HistoryAction{last[0].Action, last[1].Action})
		assert.Equal(t, []uintptr{uintptr(stream), uintptr(stream)}, []uintptr{last[0].Stream, last[1].Stream}, "the history names the stream")
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
		{"past the device", total + 1, 0, 1, oom(int(cudadrv.OutOfMemory), "CUDA_ERROR_OUT_OF_MEMORY")},
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
		_, err = CPU().Pool().Stats()
		assert.ErrorIs(t, err, ErrNotSupported)
		assert.ErrorIs(t, CPU().Pool().Trim(0), ErrNotSupported)
		assert.Equal(t, before, CPU().MemoryStats())
	})
	t.Run("negative pool figures", func(t *testing.T) {
		assert.ErrorIs(t, d.Pool().Trim(-1), ErrInvalidSize)
		assert.ErrorIs(t, d.Pool().SetReleaseThreshold(-1), ErrInvalidSize)
	})
}

// TestCUDAPoolTrimAndThreshold: with a release threshold the pool keeps its
// reserve across a synchronization; Pool().Trim returns it; with the threshold
// back at 0 a synchronization returns it.
func TestCUDAPoolTrimAndThreshold(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	const size, n = 3 << 20, 10
	require.NoError(t, d.Pool().SetReleaseThreshold(1<<30))
	defer func() { require.NoError(t, d.Pool().SetReleaseThreshold(0)) }()
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
		assert.Equal(t, fakePoolReserves(size*n), kept.PoolReserved, "30 MiB in whole steps")
		assert.Zero(t, kept.PoolUsed)
	}
	require.NoError(t, d.Pool().Trim(0))
	trimmed := poolStats(t, d)
	assert.Less(t, trimmed.PoolReserved, kept.PoolReserved)
	if onFake() {
		assert.Zero(t, trimmed.PoolReserved)
	}

	require.NoError(t, d.Pool().SetReleaseThreshold(0))
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
// and free on another. Every
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
					// The free's stream waits for the allocation's, as
					// the stream-ordered allocator requires.
					from, to := ss[(w+r)%len(ss)], ss[(w+r+1)%len(ss)]
					if err := streamWait(ds[i], to, from); err != nil {
						errs <- err
						return
					}
					if err := b.FreeAsync(to); err != nil {
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
		{"TestCUDAStreamChildLag", []string{"FAKECUDA_STREAM_GATE=" + gate}},
		{"TestCUDAStreamChildMeasureLag", []string{"FAKECUDA_STREAM_GATE=" + gate}},
		{"TestCUDAStreamChildRounding", []string{"FAKECUDA_POOL_ROUND=4096"}},
		{"TestCUDAStreamChildAllocFault", []string{"FAKECUDA_FAIL_ALLOC_ASYNC=2"}},
		{"TestCUDAStreamChildFreeFault", []string{"FAKECUDA_FAIL_FREE_ASYNC=1"}},
		{"TestCUDAStreamChildNoPools", []string{"FAKECUDA_NO_POOLS=1"}},
		{"TestCUDAStreamChildPoolFreeEnqueued", []string{"FAKECUDA_STREAM_GATE=" + gate, "FAKECUDA_POOL_FREE=enqueued"}},
		{"TestCUDAStreamChildLag", []string{"FAKECUDA_STREAM_GATE=" + gate, "FAKECUDA_POOL_FREE=enqueued"}},
		{"TestCUDAStreamChildPoisoned", []string{"FAKECUDA_STREAM_GATE=" + gate, "FAKECUDA_FAIL=cuMemAlloc:1:700"}},
		{"TestCUDAStreamChildForeignContext", []string{"FAKECUDA_STREAM_GATE=" + gate}},
		// The device lost before any stream-ordered call, and after one.
		{"TestCUDAStreamChildLostCounts", []string{"FAKECUDA_FAIL=cuMemAlloc:1:700", "MEMTRACK_ASYNC_FIRST=0"}},
		{"TestCUDAStreamChildLostCounts", []string{"FAKECUDA_FAIL=cuMemAlloc:1:700", "MEMTRACK_ASYNC_FIRST=1"}},
	}
	for _, c := range cases {
		t.Run(c.child+"/"+strings.Join(c.env[len(c.env)-1:], ","), func(t *testing.T) {
			os.Remove(gate)
			cmd := exec.Command(os.Args[0], "-test.run=^"+c.child+"$", "-test.v", "-test.count=1", "-test.timeout=30s")
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
// in the pool, but for what a later allocation on the free's stream takes
// over (the pool hands it that block at once); once the stream has run,
// the figures meet, and the device-side peak is the pool's USED_MEM_HIGH.
func TestCUDAStreamChildLag(t *testing.T) {
	d := streamChild(t)
	enqueued := os.Getenv("FAKECUDA_POOL_FREE") == "enqueued"
	s1, s2 := newStream(t, d), newStream(t, d)
	d.ResetPeakMemoryStats()
	scope, err := d.OpenPeakScope() // its peaks are those of the device here
	require.NoError(t, err)

	a, err := d.AllocAsync(4<<20, s1)
	require.NoError(t, err)
	b, err := d.AllocAsync(2<<20, s1)
	require.NoError(t, err)
	require.NoError(t, streamWait(d, s2, s1)) // the free is ordered after the allocation
	require.NoError(t, a.FreeAsync(s2))       // on another stream than its allocation
	c, err := d.AllocAsync(1<<20, s2)         // takes over 1 MiB of a's, freed on s2 before it
	require.NoError(t, err)

	st, pool := d.MemoryStats(), poolStats(t, d)
	assert.Equal(t, int64(3<<20), st.Tracked, "b and c")
	assert.Equal(t, int64(6<<20), st.Held, "b, c, and the 3 MiB of a freed on the host only that c did not take over")
	assert.Equal(t, int64(6<<20), st.PeakTracked)
	assert.Equal(t, int64(6<<20), st.PeakHeld)
	u, err := d.Pool().Usage()
	require.NoError(t, err)
	assert.Equal(t, int64(3<<20), u.InFlight)
	assert.Zero(t, u.Rounding)
	if enqueued {
		// The pool counted a out when its free was enqueued, and c fits
		// in what it reserved for a and b.
		assert.Equal(t, int64(3<<20), pool.PoolUsed)
		assert.Equal(t, fakePoolReserves(6<<20)-int64(3<<20), u.Cached, "6 MiB reserved for a and b, in whole steps")
	} else {
		assert.Equal(t, int64(6<<20), pool.PoolUsed, "c took its bytes from a's block")
		assert.Equal(t, fakePoolReserves(6<<20)-int64(6<<20), u.Cached, "6 MiB in whole steps")
	}

	require.NoError(t, b.FreeAsync(s1))
	require.NoError(t, streamWait(d, s1, s2))
	require.NoError(t, c.FreeAsync(s1))
	assert.Zero(t, d.MemoryAllocated())
	assert.Equal(t, int64(6<<20), d.MemoryStats().Held, "nothing has run yet")

	require.NoError(t, os.WriteFile(os.Getenv("MEMTRACK_GATE"), nil, 0o600))
	syncStream(t, d, s1)
	syncStream(t, d, s2)
	st, pool = d.MemoryStats(), poolStats(t, d)
	assert.Zero(t, st.Tracked)
	assert.Zero(t, st.Held, "the device-side figure meets the tracked one")
	assert.Equal(t, int64(6<<20), st.PeakHeld)
	if enqueued {
		assert.Equal(t, int64(6<<20), pool.PeakPoolUsed, "a and b; c came after a's bytes left")
	} else {
		assert.Equal(t, pool.PeakPoolUsed, st.PeakHeld, "nothing is rounded: the device-side peak is the pool's")
	}
	assert.Equal(t, fakePoolReserves(6<<20), pool.PeakPoolReserved)
	assert.Zero(t, pool.PoolUsed)
	assert.Zero(t, pool.PoolReserved, "released at the synchronization (threshold 0)")
	d.ResetPeakMemoryStats() // moves no scope
	assert.Equal(t, int64(6<<20), scope.PeakTracked())
	assert.Equal(t, int64(6<<20), scope.PeakHeld(), "the scope's device-side peak counts a's bytes that c did not take over")
	require.NoError(t, scope.Close())
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
	u, err := d.Pool().Usage()
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
	assert.Equal(t, int(cudadrv.OutOfMemory), oom.Code)
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
	_, err = d.Pool().Stats()
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.ErrorIs(t, d.Pool().Trim(0), ErrNotSupported)
	assert.ErrorIs(t, d.Pool().SetReleaseThreshold(0), ErrNotSupported)
	assert.Equal(t, before, d.MemoryStats())
	assert.NotContains(t, d.MemorySummary(), "memory pool:")

	// Device.Alloc is unaffected.
	buf, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, buf.Free())
}

// busyStream is the setup of the GPU check's stream-ordered steps: it skips
// unless MEMTRACK_RECONCILE=1, and returns device 0, a new stream, the size
// of a buffer held until the test ends, and keepBusy, which enqueues
// memsets of that buffer on the stream: about 10 ms of work on a current
// GPU (no kernel to compile), little on the fake.
func busyStream(t *testing.T) (d Device, s Stream, blockerSize int64, keepBusy func()) {
	t.Helper()
	if os.Getenv("MEMTRACK_RECONCILE") != "1" {
		t.Skip("set MEMTRACK_RECONCILE=1 (scripts/gpu-check.sh does)")
	}
	d = cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skip(err)
	}
	s = newStream(t, d)
	blockerSize, repeat := int64(1<<30), 32
	if onFake() {
		blockerSize, repeat = 1<<20, 4
	}
	blocker, err := d.Alloc(blockerSize)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, blocker.Free()) })
	return d, s, blockerSize, func() {
		inContext(t, d, func() {
			for range repeat {
				require.Equal(t, cudadrv.Success, cudatest.MemsetD8Async(blocker.DevicePtr(), 1, blockerSize, uintptr(s)))
			}
		})
	}
}

// TestCUDAStreamReconcile prints, per size, the figures of a stream-ordered
// allocation freed behind a delay: a memset of a large buffer enqueued
// first on the same stream (no kernel to compile). Two buffers are
// allocated and freed one after the other on the stream; the host sees one
// at a time, the device may hold both. It prints memtrack's tracked peak,
// its device-side peak and the pool's USED_MEM_HIGH and RESERVED_MEM_HIGH.
// scripts/gpu-check.sh runs it on a GPU with MEMTRACK_RECONCILE=1.
func TestCUDAStreamReconcile(t *testing.T) {
	d, s, blockerSize, keepBusy := busyStream(t)

	var out strings.Builder
	fmt.Fprintf(&out, "%10s %12s %14s %12s %12s %14s %14s\n", "size", "tracked pk", "device-side pk", "pool used hi", "pool rsv hi", "held at free", "tracked at free")
	for _, size := range []int64{1 << 10, 1 << 20, 64 << 20, 256 << 20} {
		syncStream(t, d, s)
		require.NoError(t, d.Pool().Trim(0))
		d.ResetPeakMemoryStats()
		keepBusy()
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
		fmt.Fprintf(&out, "%10s %12d %14d %12d %12d %14d %14d\n", bytesize.Format(size), st.PeakTracked-blockerSize, st.PeakHeld-blockerSize,
			pool.PeakPoolUsed, pool.PeakPoolReserved, atFree.Held-blockerSize, atFree.Tracked-blockerSize)
	}
	t.Log("\n" + out.String())
}

// TestCUDAStreamReuseOnStream: a buffer freed and a second of the same
// size allocated on the same stream, behind a stream held back, as
// scripts/gpu-check.sh's stream-ordered table does behind memsets: the
// pool hands the second the first's block (on an H200 the pool's
// USED_MEM_HIGH was one buffer's size for two), and the device-side
// figures agree with the pool's: the device-side peak rises by one
// buffer, Held counts one while the second free waits, and nothing once
// the stream has run and been synchronized. Budgets built on the peak set
// aside one buffer, not two.
func TestCUDAStreamReuseOnStream(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	const size = 64 << 20
	syncStream(t, d, s)
	d.MemoryStats()
	d.ResetPeakMemoryStats()
	before, poolBefore := d.MemoryStats(), poolStats(t, d)
	defer cudatest.ReleaseStreams() // where the test stops before it does
	inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(s))) })
	for range 2 {
		b, err := d.AllocAsync(size, s)
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(s))
	}
	atFree, poolAtFree := d.MemoryStats(), poolStats(t, d)
	assert.Equal(t, before.Tracked, atFree.Tracked)
	assert.Equal(t, before.Held+size, atFree.Held, "the second free waits; the first's block is the second buffer's")
	assert.Equal(t, before.PeakHeld+size, atFree.PeakHeld, "one buffer's block at a time")
	if onFake() {
		held := int64(size) // the second free waits, its block counted once
		if os.Getenv("FAKECUDA_POOL_FREE") == "enqueued" {
			held = 0 // the pool uncounted each free as it was enqueued
		}
		assert.Equal(t, poolBefore.PoolUsed+held, poolAtFree.PoolUsed, "the pool counts the block once")
	}
	cudatest.ReleaseStreams()
	syncStream(t, d, s)
	st, pool := d.MemoryStats(), poolStats(t, d)
	assert.Equal(t, before.Held, st.Held)
	assert.Equal(t, before.PeakHeld+size, st.PeakHeld)
	assert.Equal(t, poolBefore.PoolUsed+size, pool.PeakPoolUsed, "the pool's high-water mark: one buffer")
	assert.Equal(t, pool.PeakPoolUsed-poolBefore.PoolUsed, st.PeakHeld-before.Held, "the device-side peak is the pool's")
}

// TestCUDAExactAfterSynchronize: Held and PeakHeld are exact when read
// after the program synchronized its streams. Frees on two streams, some
// behind holds, readings while the streams are busy (which find frees not
// yet executed and leave them pending), more frees after them; then the
// holds are released and,
// before any reading, the streams synchronized: the next reading gives
// Held = Tracked and leaves nothing pending. Then a free on one stream,
// that stream synchronized and not read, and an allocation on another that
// raises the device-side peak: it reads first, so that the peak leaves the
// free out.
func TestCUDAExactAfterSynchronize(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	a, b := newStream(t, d), newStream(t, d)
	quietSide(t, d)
	base := d.MemoryStats()
	const size = 1 << 20
	var live []*Buffer
	alloc := func(s Stream) *Buffer {
		buf, err := d.AllocAsync(size, s)
		require.NoError(t, err)
		return buf
	}
	defer cudatest.ReleaseStreams() // where the test stops before it does
	for round := range 3 {
		for _, s := range []Stream{a, b} {
			if round == 1 {
				inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(s))) })
			}
			live = append(live, alloc(s))
			for range 4 {
				buf := alloc(DefaultStream)
				require.NoError(t, buf.FreeAsync(s)) // ordered after the legacy stream's allocation
			}
		}
		st := d.MemoryStats() // busy streams: frees left pending
		assert.GreaterOrEqual(t, st.Held, st.Tracked)
	}
	cudatest.ReleaseStreams()
	syncStream(t, d, a)
	syncStream(t, d, b)
	st := d.MemoryStats()
	assert.Equal(t, base.Tracked+int64(len(live))*size, st.Tracked)
	assert.Equal(t, st.Tracked-base.Tracked, st.Held-base.Held, "exact after the synchronization")
	assert.Zero(t, sideOf(d.Ordinal()).Pending(), "nothing pending")

	// The peak: a free run and not read, then an allocation that raises it.
	for _, buf := range live {
		require.NoError(t, buf.FreeAsync(a)) // a's after the synchronization above, b's ordered by it too
	}
	syncStream(t, d, a)
	d.ResetPeakMemoryStats() // reads: the frees above leave
	big := alloc(DefaultStream)
	freed := alloc(b)
	require.NoError(t, freed.FreeAsync(b))
	syncStream(t, d, b) // run, not read
	bigger, err := d.AllocAsync(4*size, a)
	require.NoError(t, err)
	st = d.MemoryStats()
	assert.Equal(t, base.Held+5*size, st.Held)
	assert.Equal(t, base.Held+5*size, st.PeakHeld, "the allocation that raised the peak read first: the free run on b left out")
	require.NoError(t, big.Free())
	require.NoError(t, bigger.Free())
}

// TestCUDAPendingEventsBounded: with events, a program that frees in stream
// order and never reads its figures must not pile up a pending free (and an
// event) per FreeAsync. An allocation that stays within the device-side
// peak no longer reaps the pending events (count), so FreeAsync reaps them
// itself once held.PendingBound wait; the figures stay exact when read.
// Where the driver counts its calls, the reaps are seen, and the events
// created bounded; internal/held's TestPendingBound checks the bound on the
// frees pending.
func TestCUDAPendingEventsBounded(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	require.NotNil(t, sideOf(d.Ordinal()))
	// A peak well above what the loop holds, so that no allocation of the
	// loop raises it (and reaps on the way).
	big, err := d.Alloc(64 << 20)
	require.NoError(t, err)
	require.NoError(t, big.Free())
	// A stream far behind at an earlier FreeAsync raised the bound; a
	// reading that reaps every free must bring it down again.
	defer cudatest.ReleaseStreams() // where the test stops before it does
	inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(s))) })
	for range 5 * held.PendingBound {
		b, err := d.AllocAsync(1<<10, s)
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(s))
	}
	cudatest.ReleaseStreams()
	syncStream(t, d, s)
	before := d.MemoryStats()
	calls, counted := countCalls(t, "cuEventQuery", "cuEventCreate")
	const rounds = 20 * held.PendingBound
	for i := range rounds {
		b, err := d.AllocAsync(1<<10, s)
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(s))
		if i%held.PendingBound == held.PendingBound-1 {
			syncStream(t, d, s) // at most PendingBound frees unexecuted at once
		}
	}
	if counted {
		// A reap leaves at most the PendingBound frees since the last
		// synchronize, and the next one comes at twice that: the events
		// alive, the spares of the reaped frees reused, stay far below one
		// per free (which is what the loop left before FreeAsync reaped).
		made := calls()
		assert.NotZero(t, made["cuEventQuery"], "FreeAsync learned of executed frees itself, with no reading")
		assert.LessOrEqual(t, made["cuEventCreate"], uint64(2*held.PendingBound), "events created for %d FreeAsyncs", rounds)
	}
	syncStream(t, d, s)
	after := d.MemoryStats()
	assert.Equal(t, before.Held, after.Held, "every free executed and counted")
	assert.Equal(t, before.Tracked, after.Tracked)
	if q, counted := readingQueries(t, d); counted {
		assert.Zero(t, q, "a reading reaps every reached event")
	}
}

// TestCUDAKeepPoolReserved: with the benchmarks' setting, a synchronization
// leaves what the pool reserved; the old threshold is put back after.
func TestCUDAKeepPoolReserved(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	old := poolStats(t, d).ReleaseThreshold
	t.Run("kept", func(t *testing.T) {
		keepPoolReserved(t, d)
		b, err := d.AllocAsync(4<<20, s)
		require.NoError(t, err)
		require.NoError(t, b.FreeAsync(s))
		syncStream(t, d, s)
		p := poolStats(t, d)
		assert.Equal(t, int64(math.MaxInt64), p.ReleaseThreshold)
		assert.GreaterOrEqual(t, p.PoolReserved, int64(4<<20), "the synchronization returned nothing")
	})
	assert.Equal(t, old, poolStats(t, d).ReleaseThreshold, "put back")
	require.NoError(t, d.Pool().Trim(0))
}

// TestCUDAAllocAsyncOtherDeviceStream: cuMemAllocAsync allocates from the
// pool of the stream's device, so an AllocAsync on one device with a stream
// of another is bad input: refused, and no figure of either device moves.
func TestCUDAAllocAsyncOtherDeviceStream(t *testing.T) {
	ds := cudaDevices(t, 2)
	s1 := newStream(t, ds[1])
	before := []Stats{ds[0].MemoryStats(), ds[1].MemoryStats()}
	pools := []PoolStats{poolStats(t, ds[0]), poolStats(t, ds[1])}
	b, err := ds[0].AllocAsync(1<<20, s1)
	assert.Nil(t, b)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "cuda:1")
	for i, d := range ds {
		assert.Equal(t, before[i], d.MemoryStats(), "%v: no figure moves", d)
		assert.Equal(t, pools[i].PoolUsed, poolStats(t, d).PoolUsed, "%v: the pool gave nothing", d)
	}

	// Refused before the memory limit counts a failure.
	require.NoError(t, ds[0].SetMemoryLimit(ds[0].MemoryAllocated()+1<<10))
	_, err = ds[0].AllocAsync(1<<20, s1)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	require.NoError(t, ds[0].SetMemoryLimit(0))
	assert.Equal(t, before[0].FailedAllocs, ds[0].MemoryStats().FailedAllocs, "no failure counted")

	// FreeAsync likewise: the buffer stays live and counted.
	s0 := newStream(t, ds[0])
	b, err = ds[0].AllocAsync(1<<20, s0)
	require.NoError(t, err)
	mid := ds[0].MemoryStats()
	err = b.FreeAsync(s1)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.False(t, b.Freed())
	assert.Equal(t, mid, ds[0].MemoryStats())
	require.NoError(t, b.FreeAsync(s0))
	syncStream(t, ds[0], s0)
	assert.Equal(t, before[0].Held, ds[0].MemoryStats().Held)
}

// TestCUDAStreamChildForeignContext: a stream created in a context of its
// own on the device (as mumax's cu.CtxCreate makes one), not the primary
// context memtrack works in. FreeAsync on it learns when the free executes
// as on any other stream: held back by the gate, the free stays in the
// device-side figure (no synchronize in its place, which would wait for
// the gate), and leaves it once the stream has run.
func TestCUDAStreamChildForeignContext(t *testing.T) {
	d := streamChild(t)
	require.NoError(t, cudatest.Load())
	runtime.LockOSThread()
	ctx, r := cudatest.CtxCreate(d.Ordinal()) // pushed on this thread
	require.Equal(t, cudadrv.Success, r)
	s, r := cudatest.StreamCreate()
	require.Equal(t, cudadrv.Success, r)
	defer func() {
		assert.Equal(t, cudadrv.Success, cudatest.StreamDestroy(s))
		assert.Equal(t, cudadrv.Success, cudatest.CtxDestroy(ctx))
		runtime.UnlockOSThread()
	}()

	before := d.MemoryStats()
	b, err := d.AllocAsync(1<<20, Stream(s))
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(Stream(s)))
	st := d.MemoryStats()
	assert.Equal(t, before.Tracked, st.Tracked)
	assert.Equal(t, before.Held+1<<20, st.Held, "the stream has not run the free")

	require.NoError(t, os.WriteFile(os.Getenv("MEMTRACK_GATE"), nil, 0o600))
	require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s))
	assert.Equal(t, before.Held, d.MemoryStats().Held, "the stream ran the free")
}

// TestCUDAStreamChildPoisoned: a free is enqueued behind the closed gate,
// then a sticky error (CUDA_ERROR_ILLEGAL_ADDRESS, as after a kernel fault)
// leaves the context unusable. Nothing will ever run on the device again,
// and the query of the free's event fails: the free still leaves the
// device-side figure at the next reading.
func TestCUDAStreamChildPoisoned(t *testing.T) {
	d := streamChild(t)
	var cs uintptr
	inContext(t, d, func() { // not destroyed: the context will be lost
		var r cudadrv.Result
		cs, r = cudatest.StreamCreate()
		require.Equal(t, cudadrv.Success, r)
	})
	s := Stream(cs)
	before := d.MemoryStats()
	b, err := d.AllocAsync(1<<20, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	assert.Equal(t, before.Held+1<<20, d.MemoryStats().Held, "the stream has not run the free")

	_, err = d.Alloc(1 << 10) // the fake's first cuMemAlloc meets the sticky error
	require.ErrorIs(t, err, ErrDeviceLost)
	require.NoError(t, os.WriteFile(os.Getenv("MEMTRACK_GATE"), nil, 0o600))
	st := d.MemoryStats()
	assert.Equal(t, before.Tracked, st.Tracked)
	assert.Equal(t, before.Held, st.Held, "the lost device holds nothing of the free")
}

// TestCUDAStreamChildLostCounts: after a sticky error
// (CUDA_ERROR_ILLEGAL_ADDRESS at the first cuMemAlloc) every allocation
// fails, and AllocAsync counts and records its failure as Alloc does: one
// FailedAllocs on the device, one in the category it was made in, a failed
// event in the history; over the memory limit, the limit refuses it as it
// refuses Alloc. MEMTRACK_ASYNC_FIRST=1 makes a stream-ordered allocation
// before the loss, so that the device's pools were asked about already.
func TestCUDAStreamChildLostCounts(t *testing.T) {
	d := streamChild(t)
	if os.Getenv("MEMTRACK_ASYNC_FIRST") == "1" {
		b, err := d.AllocAsync(1<<10, DefaultStream)
		require.NoError(t, err)
		require.NoError(t, b.Free())
	}
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	require.NoError(t, d.History().Enable(64))
	_, err = d.Alloc(1 << 10) // the fake's first cuMemAlloc meets the sticky error
	require.ErrorIs(t, err, ErrDeviceLost)

	for _, c := range []struct {
		name  string
		alloc func() (*Buffer, error)
		cat   bool
		limit bool
		want  error
	}{
		{"Device.Alloc", func() (*Buffer, error) { return d.Alloc(4096) }, false, false, ErrDeviceLost},
		{"Device.AllocAsync", func() (*Buffer, error) { return d.AllocAsync(4096, DefaultStream) }, false, false, ErrDeviceLost},
		{"Category.Alloc", func() (*Buffer, error) { return kv.Alloc(4096) }, true, false, ErrDeviceLost},
		{"Category.AllocAsync", func() (*Buffer, error) { return kv.AllocAsync(4096, DefaultStream) }, true, false, ErrDeviceLost},
		{"Device.Alloc over the limit", func() (*Buffer, error) { return d.Alloc(4096) }, false, true, ErrLimitExceeded},
		{"Device.AllocAsync over the limit", func() (*Buffer, error) { return d.AllocAsync(4096, DefaultStream) }, false, true, ErrLimitExceeded},
		{"Category.AllocAsync over the limit", func() (*Buffer, error) { return kv.AllocAsync(4096, DefaultStream) }, true, true, ErrLimitExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.limit {
				require.NoError(t, d.SetMemoryLimit(d.MemoryAllocated()+1))
				defer d.SetMemoryLimit(0)
			}
			before, catBefore := d.MemoryStats(), kv.Stats()
			b, err := c.alloc()
			assert.Nil(t, b)
			require.ErrorIs(t, err, c.want)
			want, catWant := before, catBefore
			want.FailedAllocs++
			if c.cat {
				catWant.FailedAllocs++
			}
			assert.Equal(t, want, d.MemoryStats(), "one failure on the device, nothing else")
			assert.Equal(t, catWant, kv.Stats(), "one failure in the category it was made in")
			h, err := d.History().Snapshot()
			require.NoError(t, err)
			require.NotEmpty(t, h.Events)
			last := h.Events[len(h.Events)-1]
			assert.True(t, last.Action.Refused(), "the failure is in the history: %v", last.Action)
			assert.Equal(t, int64(4096), last.Size)
			if c.cat {
				assert.Equal(t, CategoryKVCache, last.Category)
			}
		})
	}
}

// TestCUDAPoolIsCurrent: with a pool of the application's own set current
// (cuDeviceSetMemPool), AllocAsync allocates from it, and PoolStats reads
// it, not the default pool.
func TestCUDAPoolIsCurrent(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skip(err)
	}
	s := newStream(t, d)
	pool, r := cudatest.CreatePool(d.Ordinal())
	require.Equal(t, cudadrv.Success, r)
	def, r := cudatest.DefaultPool(d.Ordinal())
	require.Equal(t, cudadrv.Success, r)
	require.Equal(t, cudadrv.Success, cudatest.SetMemPool(d.Ordinal(), pool))
	t.Cleanup(func() {
		assert.Equal(t, cudadrv.Success, cudatest.SetMemPool(d.Ordinal(), def))
		assert.Equal(t, cudadrv.Success, cudatest.DestroyPool(pool))
	})
	before := poolStats(t, d)
	b, err := d.AllocAsync(3<<20, s)
	require.NoError(t, err)
	p := poolStats(t, d)
	assert.GreaterOrEqual(t, p.PoolUsed-before.PoolUsed, int64(3<<20), "the allocation is in the pool PoolStats reads")
	require.NoError(t, b.FreeAsync(s))
	syncStream(t, d, s)
}

// TestCUDAPoolUsageWithAlloc: buffers of Device.Alloc are not in the pool;
// Rounding compares the pool with the stream-ordered buffers only, and is
// never negative.
func TestCUDAPoolUsageWithAlloc(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skip(err)
	}
	s := newStream(t, d)
	a, err := d.Alloc(3 << 20)
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Free()) }()
	b, err := d.AllocAsync(1<<20, s)
	require.NoError(t, err)
	syncStream(t, d, s)
	u, err := d.Pool().Usage()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, u.Rounding, int64(0))
	if onFake() {
		assert.Zero(t, u.Rounding, "the fake rounds nothing")
	}
	require.NoError(t, b.Free())
	u, err = d.Pool().Usage()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, u.Rounding, int64(0), "after Free of the stream-ordered buffer")
	require.NoError(t, d.Pool().Trim(0)) // what the free left reserved
}

// TestCUDAStreamChildPoolFreeEnqueued: under the reading where the pool
// counts a free's bytes out as soon as it is enqueued
// (FAKECUDA_POOL_FREE=enqueued), with the free held back by the gate,
// PoolUsed falls below Held: InFlight names the difference, Rounding stays
// at 0.
func TestCUDAStreamChildPoolFreeEnqueued(t *testing.T) {
	d := streamChild(t)
	s := newStream(t, d)
	b, err := d.AllocAsync(1<<20, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	u, err := d.Pool().Usage()
	require.NoError(t, err)
	assert.Zero(t, u.PoolUsed, "the pool counted the free at once")
	assert.Equal(t, int64(1<<20), u.InFlight)
	assert.Zero(t, u.Rounding)
	require.NoError(t, os.WriteFile(os.Getenv("MEMTRACK_GATE"), nil, 0o600))
	syncStream(t, d, s)
	u, err = d.Pool().Usage()
	require.NoError(t, err)
	assert.Zero(t, u.InFlight)
	assert.Zero(t, u.Rounding)
}

// TestCUDAPoolFreeReading says which reading of the pool's used figure the
// driver follows, where its reference is silent: whether a free's bytes
// leave USED_MEM_CURRENT when the stream executes it, or as soon as
// cuMemFreeAsync returns (the fake offers both, FAKECUDA_POOL_FREE). It
// frees a buffer behind memsets that keep the stream busy and reads the pool
// while the stream is still busy; scripts/gpu-check.sh prints its answer.
func TestCUDAPoolFreeReading(t *testing.T) {
	d, s, _, keepBusy := busyStream(t)
	const size = 4 << 20
	syncStream(t, d, s)
	base := poolStats(t, d).PoolUsed
	keepBusy()
	b, err := d.AllocAsync(size, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	used := poolStats(t, d).PoolUsed
	var busy bool
	inContext(t, d, func() { busy = cudatest.StreamQuery(uintptr(s)) == cudadrv.NotReady })
	syncStream(t, d, s)
	switch {
	case !busy:
		t.Log("pool reading: undecided (the stream ran the free before the reading)")
	case used-base >= size:
		t.Log("pool reading: executed (a free leaves USED_MEM_CURRENT when its stream executes it)")
	default:
		t.Log("pool reading: enqueued (a free leaves USED_MEM_CURRENT when cuMemFreeAsync returns)")
	}
	assert.Equal(t, base, poolStats(t, d).PoolUsed, "after the synchronization the free is out")
}

// TestCUDAAllocReuseReading says whether cuMemAlloc hands a freed address
// out again at once to an allocation of another size, which the reference
// does not say: an H200 did, and the fake does;
// scripts/gpu-check.sh prints the answer of the GPU's driver.
func TestCUDAAllocReuseReading(t *testing.T) {
	if os.Getenv("MEMTRACK_RECONCILE") != "1" {
		t.Skip("set MEMTRACK_RECONCILE=1 (scripts/gpu-check.sh does)")
	}
	d := cudaDevices(t, 1)[0]
	a, err := d.Alloc(512)
	require.NoError(t, err)
	p := a.DevicePtr()
	require.NoError(t, a.Free())
	b, err := d.Alloc(2048)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Free()) }()
	if b.DevicePtr() == p {
		t.Log("alloc reading: reuse (cuMemAlloc handed the freed address to the next allocation)")
	} else {
		t.Log("alloc reading: fresh (cuMemAlloc gave another address than the one just freed)")
	}
	if onFake() {
		assert.Equal(t, p, b.DevicePtr(), "the fake hands the freed address out again, as an H200 did")
	}
}

// TestCUDATrimAfterEventRetirement: the driver may keep reserved what a
// stream freed until the host has observed the free complete, "eg. by a
// synchronize" (cuMemPoolTrimTo); whether an event query that finds an event
// after the free reached counts, the reference does not say (the fake offers
// both, FAKECUDA_TRIM_OBSERVED). Once the device-side figure no longer
// counts the buffer (FreeAsync learns it by an event query), Pool().Trim keeps
// the memory where only a synchronize counts; after a synchronize it
// returns all of it.
func TestCUDATrimAfterEventRetirement(t *testing.T) {
	requireFake(t)
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	keepPoolReserved(t, d) // so that only Pool().Trim returns memory
	before := d.MemoryStats()
	b, err := d.AllocAsync(4<<20, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	for d.MemoryStats().Held != before.Held { // the event query sees the free run
		runtime.Gosched()
	}
	u, err := d.Pool().Usage()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, u.Cached, int64(4<<20))
	require.NoError(t, d.Pool().Trim(0))
	if os.Getenv("FAKECUDA_TRIM_OBSERVED") == "query" {
		assert.Zero(t, poolStats(t, d).PoolReserved, "the query observed the free: trimmed")
	} else {
		assert.GreaterOrEqual(t, poolStats(t, d).PoolReserved, int64(4<<20), "not yet observed by the host: kept")
	}
	syncStream(t, d, s)
	require.NoError(t, d.Pool().Trim(0))
	assert.Zero(t, poolStats(t, d).PoolReserved, "after the synchronize, trimmed")
}

// TestCUDATrimReading says whether the driver's cuMemPoolTrimTo releases a
// free that the host learned of by an event query only (the fake's
// FAKECUDA_TRIM_OBSERVED); scripts/gpu-check.sh prints its answer.
func TestCUDATrimReading(t *testing.T) {
	if os.Getenv("MEMTRACK_RECONCILE") != "1" {
		t.Skip("set MEMTRACK_RECONCILE=1 (scripts/gpu-check.sh does)")
	}
	d := cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skip(err)
	}
	s := newStream(t, d)
	keepPoolReserved(t, d)
	syncStream(t, d, s)
	require.NoError(t, d.Pool().Trim(0))
	const size = 64 << 20
	before := d.MemoryStats()
	b, err := d.AllocAsync(size, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	for d.MemoryStats().Held != before.Held { // an event query finds the free run
		runtime.Gosched()
	}
	require.NoError(t, d.Pool().Trim(0))
	if poolStats(t, d).PoolReserved < size {
		t.Log("trim reading: query (Pool().Trim released a free the host learned of by an event query)")
	} else {
		t.Log("trim reading: sync (Pool().Trim kept a free the host learned of by an event query only)")
	}
	syncStream(t, d, s)
	require.NoError(t, d.Pool().Trim(0))
}

// FuzzCUDAStreamFigures runs a sequence of stream-ordered allocations and
// frees on three streams, some of them held back (a host function that
// waits), against a sequential model: at every step Held is at least
// Tracked and Tracked is the model's live bytes, and on the fake (which
// rounds nothing) Held is at least the pool's used bytes read after it, so
// that no free leaves Held before its stream has run it; after the streams
// are synchronized, Held meets Tracked, and on the fake the pool's used
// bytes are the live stream-ordered bytes and Rounding is 0.
//
//	go test -tags cuda -run '^$' -fuzz FuzzCUDAStreamFigures -fuzztime 30s
func FuzzCUDAStreamFigures(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 0, 0, 3, 3, 3, 9, 1, 4, 7, 2, 5, 8, 6})
	f.Add([]byte{0, 0, 2, 5, 0, 0, 2, 2, 1, 11, 1, 8, 2, 2, 4})
	d, err := CUDA(0)
	if err != nil {
		f.Skip(err)
	}
	if _, err := d.Pool().Stats(); err != nil {
		f.Skip(err)
	}
	streams := []Stream{DefaultStream, newStream(f, d), newStream(f, d)}
	syncAll := func(t *testing.T) {
		cudatest.ReleaseStreams()
		for _, s := range streams {
			syncStream(t, d, s)
		}
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		syncAll(t)
		base := d.MemoryStats()
		basePool := poolStats(t, d).PoolUsed
		type live struct {
			b      *Buffer
			stream Stream
		}
		var bufs []live
		var tracked, pooled int64
		defer cudatest.ReleaseStreams() // where the input fails
		for i, op := range ops {
			switch op % 6 {
			case 0, 1: // allocate on one of the streams
				s := streams[int(op/5)%len(streams)]
				size := int64(op%7+1) << 12
				b, err := d.AllocAsync(size, s)
				require.NoError(t, err)
				bufs = append(bufs, live{b, s})
				tracked += size
				pooled += size
			case 2: // free the oldest on its own stream
				if len(bufs) > 0 {
					require.NoError(t, bufs[0].b.FreeAsync(bufs[0].stream))
					tracked -= bufs[0].b.Size()
					pooled -= bufs[0].b.Size()
					bufs = bufs[1:]
				}
			case 3: // free the newest on another stream, ordered after its allocation
				if n := len(bufs); n > 0 {
					l := bufs[n-1]
					to := streams[(int(op/5)+1)%len(streams)]
					require.NoError(t, streamWait(d, to, l.stream))
					require.NoError(t, l.b.FreeAsync(to))
					tracked -= l.b.Size()
					pooled -= l.b.Size()
					bufs = bufs[:n-1]
				}
			case 4: // synchronize everything, then free one with Free
				syncAll(t)
				if n := len(bufs); n > 0 && op%2 == 0 {
					require.NoError(t, bufs[n-1].b.Free())
					tracked -= bufs[n-1].b.Size()
					pooled -= bufs[n-1].b.Size()
					bufs = bufs[:n-1]
				}
			case 5: // hold one of the streams back until the next synchronization
				inContext(t, d, func() {
					require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(streams[int(op/6)%len(streams)])))
				})
			}
			st := d.MemoryStats()
			require.Equal(t, base.Tracked+tracked, st.Tracked, "step %d", i)
			require.GreaterOrEqual(t, st.Held, st.Tracked, "step %d", i)
			if onFake() {
				require.GreaterOrEqual(t, st.Held-base.Held, poolStats(t, d).PoolUsed-basePool, "step %d: a free left Held before its stream ran it", i)
			}
		}
		syncAll(t)
		st := d.MemoryStats()
		assert.Equal(t, st.Tracked, st.Held, "after the synchronization the figures meet")
		u, err := d.Pool().Usage()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, u.Rounding, int64(0))
		if onFake() {
			assert.Equal(t, basePool+pooled, u.PoolUsed)
			assert.Zero(t, u.Rounding)
		}
		for _, l := range bufs {
			require.NoError(t, l.b.FreeAsync(l.stream))
		}
		syncAll(t)
	})
}
