//go:build cuda

package cudadrv_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run against the libcuda.so.1 the process loads: the fake
// driver of testdata/fakecuda under scripts/test-cuda.sh, or a GPU's.

func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv("FAKECUDA_DEVICES"); !ok {
		os.Setenv("FAKECUDA_DEVICES", "2")
	}
	os.Exit(m.Run())
}

// primary loads and initialises the driver and retains device ordinal's
// primary context, or skips the test.
func primary(t *testing.T, ordinal int) cudadrv.Context {
	t.Helper()
	if _, err := cudadrv.Load(); err != nil {
		t.Skipf("needs CUDA device %d: %v", ordinal, err)
	}
	require.NoError(t, cudatest.Load())
	n, r := cudadrv.Init()
	if r != cudadrv.Success || n <= ordinal {
		t.Skipf("needs CUDA device %d: cuInit %d, %d device(s)", ordinal, r, n)
	}
	ctx, r := cudadrv.Retain(ordinal)
	require.Equal(t, cudadrv.Success, r)
	return ctx
}

// onThread runs f on a locked thread whose current context is ctx (none for
// the zero Context), and puts the thread's context back.
func onThread(t *testing.T, ctx cudadrv.Context, f func()) {
	t.Helper()
	require.Equal(t, cudadrv.Success, cudatest.InContext(uintptr(ctx), f))
}

// current returns the calling thread's current context.
func current(t *testing.T) uintptr {
	t.Helper()
	c, r := cudatest.ThreadContext()
	require.Equal(t, cudadrv.Success, r)
	return c
}

// newStream creates a stream in ctx, destroyed when the test ends.
func newStream(t *testing.T, ctx cudadrv.Context) uintptr {
	t.Helper()
	return cudatest.NewStream(t, uintptr(ctx))
}

func TestSticky(t *testing.T) {
	for code, want := range map[cudadrv.Result]bool{
		cudadrv.Success: false, cudadrv.OutOfMemory: false, cudadrv.NotReady: false,
		226: true, 700: true, 719: true, 721: true, 810: true, 911: true, 999: false,
	} {
		assert.Equal(t, want, cudadrv.Sticky(code), "CUresult %d", code)
	}
}

// Each operation switches to its context and back: a thread with no
// current context has none after it.
func TestContextRestored(t *testing.T) {
	ctx := primary(t, 0)
	onThread(t, 0, func() {
		p, c := cudadrv.Alloc(ctx, 4096)
		require.Equal(t, cudadrv.Call{}, c)
		assert.Zero(t, current(t), "no context current after Alloc")
		assert.Equal(t, cudadrv.Call{}, cudadrv.Free(ctx, p))
		free, total, c := cudadrv.MemInfo(ctx)
		assert.Equal(t, cudadrv.Call{}, c)
		assert.Positive(t, total)
		assert.LessOrEqual(t, free, total)
		assert.Zero(t, current(t))
	})
}

// A free on another stream than the allocation's, ordered after it with a
// stream wait, as the stream-ordered allocator requires; the event path
// learns that it ran.
func TestCrossStreamFreeByEvent(t *testing.T) {
	ctx := primary(t, 0)
	s1, s2 := newStream(t, ctx), newStream(t, ctx)
	a := cudadrv.AllocAsync(ctx, 1<<20, s1)
	require.Equal(t, cudadrv.Call{}, a.Call)
	onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamWait(s2, s1)) })
	f := cudadrv.FreeAsync(ctx, a.Ptr, s2, cudadrv.Event{})
	require.Equal(t, cudadrv.Call{}, f.Call)
	require.False(t, f.Event.IsZero())
	onThread(t, ctx, func() { require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(s2)) })
	var q cudadrv.StreamEvents
	q.Add([]cudadrv.Event{f.Event})
	require.Equal(t, cudadrv.Success, q.Query(ctx))
	n, r := q.Reached(0)
	assert.Equal(t, 1, n)
	assert.Equal(t, cudadrv.Success, r)
	cudadrv.EventDestroy(f.Event)
}

// A stream of another device: AllocAsync runs nothing and names its device.
func TestAllocAsyncOtherDevice(t *testing.T) {
	ctx0, ctx1 := primary(t, 0), primary(t, 1)
	s1 := newStream(t, ctx1)
	a := cudadrv.AllocAsync(ctx0, 1<<20, s1)
	assert.True(t, a.OtherDevice)
	assert.Equal(t, 1, a.StreamDevice)
	assert.Zero(t, a.Ptr)
	assert.Equal(t, cudadrv.Success, a.Enter)
}

// During a capture begun in global mode on one thread, cuMemAlloc from
// another thread in the default mode fails and invalidates the capture;
// Alloc, in relaxed mode, does neither; AllocAsync on the capturing stream
// runs nothing.
func TestCapture(t *testing.T) {
	ctx := primary(t, 0)
	s := newStream(t, ctx)
	other := func(f func()) { // on another thread than the capture's
		done := make(chan struct{})
		go func() {
			defer close(done)
			onThread(t, ctx, f)
		}()
		<-done
	}

	onThread(t, ctx, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureGlobal))
		other(func() {
			p, c := cudadrv.Alloc(ctx, 4096)
			assert.Equal(t, cudadrv.Call{}, c, "relaxed: allowed")
			assert.Equal(t, cudadrv.Call{}, cudadrv.Free(ctx, p))
		})
		a := cudadrv.AllocAsync(ctx, 4096, s)
		assert.True(t, a.Capturing)
		assert.Zero(t, a.Ptr)
		nodes, r := cudatest.EndCapture(s)
		assert.Equal(t, cudadrv.Success, r, "the capture is valid")
		assert.Zero(t, nodes)

		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureGlobal))
		other(func() {
			_, r := cudatest.MemAlloc(4096) // the default, global mode
			assert.Equal(t, cudadrv.Result(900), r, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
		})
		_, r = cudatest.EndCapture(s)
		assert.Equal(t, cudadrv.Result(901), r, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
	})
}

// The current pool is the default one until another is set.
func TestCurrentPool(t *testing.T) {
	primary(t, 0)
	if ok, r := cudadrv.PoolsSupported(0); r != cudadrv.Success || !ok {
		t.Skip("no memory pools")
	}
	def, r := cudatest.DefaultPool(0)
	require.Equal(t, cudadrv.Success, r)
	cur, r := cudadrv.MemPool(0)
	require.Equal(t, cudadrv.Success, r)
	assert.Equal(t, def, uintptr(cur), "the default pool, until another is set")
	own, r := cudatest.CreatePool(0)
	require.Equal(t, cudadrv.Success, r)
	require.Equal(t, cudadrv.Success, cudatest.SetMemPool(0, own))
	cur, r = cudadrv.MemPool(0)
	require.Equal(t, cudadrv.Success, r)
	assert.Equal(t, own, uintptr(cur))
	_, r = cudadrv.PoolGet(cur)
	assert.Equal(t, cudadrv.Success, r)
	require.Equal(t, cudadrv.Success, cudatest.SetMemPool(0, def))
	cur, _ = cudadrv.MemPool(0)
	assert.Equal(t, def, uintptr(cur))
	require.Equal(t, cudadrv.Success, cudatest.DestroyPool(own))
}

// The legacy default stream waits for the work enqueued before on a
// blocking stream: an event recorded on it after a blocking stream's held
// host function is not reached while the host function is held (polled for
// 200 ms, in which an independent stream's event is reached at once), and is
// once it returns.
func TestLegacyStreamOrder(t *testing.T) {
	ctx := primary(t, 0)
	blocking := newStream(t, ctx)
	var e uintptr
	onThread(t, ctx, func() {
		require.Equal(t, cudadrv.Success, cudatest.HoldStream(blocking))
		var r cudadrv.Result
		e, r = cudatest.RecordQuery(0) // on the legacy stream
		require.Contains(t, []cudadrv.Result{cudadrv.Success, cudadrv.NotReady}, r)
	})
	r := cudadrv.NotReady
	onThread(t, ctx, func() {
		for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline) && r == cudadrv.NotReady; {
			r = cudatest.EventQuery(e)
			runtime.Gosched()
		}
	})
	cudatest.ReleaseStreams()
	assert.Equal(t, cudadrv.NotReady, r, "the legacy stream waited for the blocking stream's work")
	onThread(t, ctx, func() {
		require.Equal(t, cudadrv.Success, cudatest.StreamSynchronize(0))
		assert.Equal(t, cudadrv.Success, cudatest.EventQuery(e))
		assert.Equal(t, cudadrv.Success, cudatest.EventDestroy(e))
	})
}

// cuStreamSynchronize of a stream that does not capture is "potentially
// unsafe" while a capture begun in global mode is under way: an NVIDIA
// H200 (driver 580.159.04) answered it 900 (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
// from a thread in global mode, on another thread than the capture's, and
// that capture ended 901 (invalidated); in relaxed mode it answered 0 and
// the capture ended with its graph (scripts/h200-probes, the probe of
// graph calls during a capture; testdata/fakecuda/RULES.md). Every
// synchronize memtrack makes on its own account runs in relaxed mode.
func TestSynchronizeDuringCapture(t *testing.T) {
	ctx := primary(t, 0)
	s := newStream(t, ctx)
	for _, where := range cudatest.Threads {
		for _, tc := range []struct {
			relaxed   bool
			sync, end cudadrv.Result
		}{
			{false, 900, 901},
			{true, cudadrv.Success, cudadrv.Success},
		} {
			mode := map[bool]string{false: "default", true: "relaxed"}[tc.relaxed]
			t.Run(where.String()+"/"+mode, func(t *testing.T) {
				var r cudadrv.Result
				nodes, ended := cudatest.DuringCapture(t, 0, where, func() {
					onThread(t, ctx, func() {
						if tc.relaxed {
							old, rm := cudatest.ExchangeCaptureMode(cudatest.CaptureRelaxed)
							require.Equal(t, cudadrv.Success, rm)
							defer cudatest.ExchangeCaptureMode(old)
						}
						r = cudatest.StreamSynchronize(s)
					})
				})
				assert.Equal(t, tc.sync, r, "cuStreamSynchronize of a stream that does not capture")
				assert.Equal(t, tc.end, ended, "cuStreamEndCapture of the program's capture")
				if tc.end == cudadrv.Success {
					assert.Equal(t, 1, nodes, "its one node")
				}
			})
		}
	}
}
