//go:build cuda

package cudadrv_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/mumax/3/cuda/cu"
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

// primary initialises the driver and retains device ordinal's primary
// context, or skips the test.
func primary(t *testing.T, ordinal int) cudadrv.Context {
	t.Helper()
	var n int
	if r := recovered(func() { cu.Init(0); n = cu.DeviceGetCount() }); r != nil {
		t.Skipf("needs CUDA device %d: %v", ordinal, r)
	}
	if n <= ordinal {
		t.Skipf("needs CUDA device %d: the driver reports %d device(s)", ordinal, n)
	}
	ctx, r := cudadrv.Retain(ordinal)
	require.Equal(t, cudadrv.Success, r)
	return ctx
}

func recovered(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// onThread runs f on a locked thread whose current context is ctx (none for
// the zero Context), and puts the thread's context back.
func onThread(t *testing.T, ctx cudadrv.Context, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := cu.CtxGetCurrent()
	cu.CtxSetCurrent(cu.Context(ctx.Uintptr()))
	defer cu.CtxSetCurrent(prev)
	f()
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
	onThread(t, cudadrv.Context{}, func() {
		p, c := cudadrv.Alloc(ctx, 4096)
		require.Equal(t, cudadrv.Call{}, c)
		assert.Zero(t, uintptr(cu.CtxGetCurrent()), "no context current after Alloc")
		assert.Equal(t, cudadrv.Call{}, cudadrv.Free(ctx, p))
		free, total, c := cudadrv.MemInfo(ctx)
		assert.Equal(t, cudadrv.Call{}, c)
		assert.Positive(t, total)
		assert.LessOrEqual(t, free, total)
		assert.Zero(t, uintptr(cu.CtxGetCurrent()))
	})
}

// A free on another stream than the allocation's, ordered after it with
// StreamWait, as the stream-ordered allocator requires; the event path
// learns that it ran.
func TestCrossStreamFreeByEvent(t *testing.T) {
	ctx := primary(t, 0)
	var s1, s2 cu.Stream
	onThread(t, ctx, func() { s1, s2 = cu.StreamCreate(), cu.StreamCreate() })
	defer onThread(t, ctx, func() { s1.Destroy(); s2.Destroy() })
	a := cudadrv.AllocAsync(ctx, 1<<20, uintptr(s1))
	require.Equal(t, cudadrv.Call{}, a.Call)
	require.Equal(t, cudadrv.Call{}, cudadrv.StreamWait(ctx, uintptr(s2), uintptr(s1)))
	f := cudadrv.FreeAsync(ctx, a.Ptr, uintptr(s2), cudadrv.ByEvent, cudadrv.Event{})
	require.Equal(t, cudadrv.Call{}, f.Call)
	require.False(t, f.Event.IsZero())
	onThread(t, ctx, func() { s2.Synchronize() })
	out := make([]cudadrv.Result, 1)
	cudadrv.EventsReached(ctx, []cudadrv.Event{f.Event}, out)
	assert.Equal(t, cudadrv.Success, out[0])
	cudadrv.EventDestroy(f.Event)
}

// A stream of another device: AllocAsync runs nothing and names its device.
func TestAllocAsyncOtherDevice(t *testing.T) {
	ctx0, ctx1 := primary(t, 0), primary(t, 1)
	var s1 cu.Stream
	onThread(t, ctx1, func() { s1 = cu.StreamCreate() })
	defer onThread(t, ctx1, func() { s1.Destroy() })
	a := cudadrv.AllocAsync(ctx0, 1<<20, uintptr(s1))
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
	var s cu.Stream
	onThread(t, ctx, func() { s = cu.StreamCreate() })
	defer onThread(t, ctx, func() { s.Destroy() })
	other := func(f func()) { // on another thread than the capture's
		done := make(chan struct{})
		go func() {
			defer close(done)
			onThread(t, ctx, f)
		}()
		<-done
	}

	onThread(t, ctx, func() {
		require.Equal(t, cudadrv.Success, cudadrv.BeginCapture(uintptr(s), cudadrv.CaptureGlobal))
		other(func() {
			p, c := cudadrv.Alloc(ctx, 4096)
			assert.Equal(t, cudadrv.Call{}, c, "relaxed: allowed")
			assert.Equal(t, cudadrv.Call{}, cudadrv.Free(ctx, p))
		})
		a := cudadrv.AllocAsync(ctx, 4096, uintptr(s))
		assert.True(t, a.Capturing)
		assert.Zero(t, a.Ptr)
		nodes, r := cudadrv.EndCapture(uintptr(s))
		assert.Equal(t, cudadrv.Success, r, "the capture is valid")
		assert.Zero(t, nodes)

		require.Equal(t, cudadrv.Success, cudadrv.BeginCapture(uintptr(s), cudadrv.CaptureGlobal))
		other(func() {
			r := recovered(func() { cu.MemAlloc(4096) }) // the default, global mode
			assert.Equal(t, cu.Result(900), r, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
		})
		_, r = cudadrv.EndCapture(uintptr(s))
		assert.Equal(t, cudadrv.Result(901), r, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
	})
}

// The current pool is the default one until another is set.
func TestCurrentPool(t *testing.T) {
	primary(t, 0)
	if ok, r := cudadrv.PoolsSupported(0); r != cudadrv.Success || !ok {
		t.Skip("no memory pools")
	}
	def, r := cudadrv.DefaultPool(0)
	require.Equal(t, cudadrv.Success, r)
	own, r := cudadrv.CreatePool(0)
	require.Equal(t, cudadrv.Success, r)
	require.Equal(t, cudadrv.Success, cudadrv.SetMemPool(0, own))
	cur, r := cudadrv.MemPool(0)
	require.Equal(t, cudadrv.Success, r)
	assert.Equal(t, own, cur.Handle())
	_, r = cudadrv.PoolGet(cur)
	assert.Equal(t, cudadrv.Success, r)
	require.Equal(t, cudadrv.Success, cudadrv.SetMemPool(0, def))
	cur, _ = cudadrv.MemPool(0)
	assert.Equal(t, def, cur.Handle())
	require.Equal(t, cudadrv.Success, cudadrv.DestroyPool(own))
}

// The legacy default stream waits for the work enqueued before on a
// blocking stream: an event recorded on it after a blocking stream's held
// host function is not reached while the host function is held (polled for
// 200 ms, in which an independent stream's event is reached at once), and is
// once it returns.
func TestLegacyStreamOrder(t *testing.T) {
	ctx := primary(t, 0)
	var blocking cu.Stream
	onThread(t, ctx, func() { blocking = cu.StreamCreate() })
	defer onThread(t, ctx, func() { blocking.Destroy() })

	require.Equal(t, cudadrv.Call{}, cudadrv.HoldStream(ctx, uintptr(blocking)))
	e, c := cudadrv.RecordQuery(ctx, 0) // on the legacy stream
	require.Equal(t, cudadrv.Success, c.Enter)
	out := make([]cudadrv.Result, 1)
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		cudadrv.EventsReached(ctx, []cudadrv.Event{e}, out)
		if out[0] != cudadrv.NotReady {
			break
		}
		runtime.Gosched()
	}
	cudadrv.ReleaseStreams()
	assert.Equal(t, cudadrv.NotReady, out[0], "the legacy stream waited for the blocking stream's work")
	onThread(t, ctx, func() { cu.StreamSynchronize(0) })
	cudadrv.EventsReached(ctx, []cudadrv.Event{e}, out)
	assert.Equal(t, cudadrv.Success, out[0])
	cudadrv.EventDestroy(e)
}
