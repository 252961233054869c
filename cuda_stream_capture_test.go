//go:build cuda

package memtrack

import (
	"runtime"
	"testing"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// capturing runs f on a locked thread while stream s of d captures a graph
// begun in mode on that thread, and returns the number of nodes the graph
// captured and the result of ending the capture.
func capturing(t *testing.T, d Device, s Stream, mode cudatest.CaptureMode, f func()) (nodes int, r cudadrv.Result) {
	t.Helper()
	inContext(t, d, func() {
		require.Equal(t, cudadrv.Success, cudatest.BeginCapture(uintptr(s), mode))
		f()
		nodes, r = cudatest.EndCapture(uintptr(s))
	})
	return nodes, r
}

// TestCUDACaptureAllocDoesNotInvalidate: Device.Alloc and Free, from the
// capturing thread or from another, neither fail nor invalidate a capture
// begun in global mode (the driver forbids cuMemAlloc and cuMemFree then,
// and invalidates the capture, unless the calling thread's mode is relaxed).
func TestCUDACaptureAllocDoesNotInvalidate(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	allocFree := func() {
		b, err := d.Alloc(4096)
		if assert.NoError(t, err) {
			assert.NoError(t, b.Free())
		}
	}
	t.Run("same thread", func(t *testing.T) {
		_, r := capturing(t, d, s, cudatest.CaptureGlobal, allocFree)
		assert.Equal(t, cudadrv.Success, r)
	})
	t.Run("another thread", func(t *testing.T) {
		_, r := capturing(t, d, s, cudatest.CaptureGlobal, func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread() // surely another thread than the capture's
				defer runtime.UnlockOSThread()
				allocFree()
			}()
			<-done
		})
		assert.Equal(t, cudadrv.Success, r)
	})
}

// TestCUDAReadingsDuringCapture: no reading memtrack offers, and no driver
// call it makes on its own account for one, fails or invalidates a
// program's capture begun in global mode, whether made from another
// goroutine or from the capturing thread itself: the program's capture
// ends with its graph. The driver prohibits some of those calls then
// (cuMemPoolGetAttribute, cuMemPoolSetAttribute, cuMemPoolTrimTo,
// cuEventQuery; testdata/fakecuda/RULES.md, "Calls unsafe during a
// capture", which an H200 answered), so memtrack makes them in relaxed
// mode. A free in stream order stays pending, its stream held back, so
// that every reading that learns which frees have executed queries its
// event; it is still held once they have run. Then the stream is let go,
// and the readings whose driver calls wait for the device's streams
// (Alloc and Free: cuMemFree of a cuMemAlloc pointer "may perform implicit
// synchronization", and an H200's waited for the held stream) run.
func TestCUDAReadingsDuringCapture(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skipf("no memory pools: %v", err)
	}
	held := newStream(t, d)
	inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(held))) })
	t.Cleanup(cudatest.ReleaseStreams) // before the stream is destroyed
	b, err := d.AllocAsync(1<<20, held)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(held))
	heldBefore := d.MemoryStats().Held
	readings := cudaReadings(t, d, newStream(t, d))
	during := func(synchronizing bool) {
		for _, where := range cudatest.Threads {
			for _, rd := range readings {
				if rd.synchronizes() != synchronizing {
					continue
				}
				t.Run(where.String()+"/"+rd.name, func(t *testing.T) {
					var err error
					nodes, ended := cudatest.DuringCapture(t, d.Ordinal(), where, func() { err = rd.read() })
					assert.NoError(t, err)
					assert.Equal(t, cudadrv.Success, ended, "the program's capture ends with its graph (901: invalidated)")
					assert.Equal(t, 1, nodes, "its one node")
				})
			}
		}
	}
	during(false)
	assert.Equal(t, heldBefore, d.MemoryStats().Held, "the free still pending is still held")

	cudatest.ReleaseStreams()
	syncStream(t, d, held)
	during(true)
}

// reading is one of memtrack's readings of a device, or a call that makes
// one on its own account (a reset, a trim, Alloc and Free).
type reading struct {
	name string
	read func() error
}

// synchronizes reports whether r makes a driver call that may wait for
// every stream of the device (cuMemFree of a cuMemAlloc pointer), which
// never returns while a stream is held back.
func (r reading) synchronizes() bool { return r.name == "Alloc and Free" }

// cudaReadings returns every reading memtrack offers of d, with what they
// need made first (a baseline, a measurement and its follower, a
// category); Graphs.Capture reads other, a stream of d.
func cudaReadings(t *testing.T, d Device, other Stream) []reading {
	t.Helper()
	base, err := d.Baseline()
	require.NoError(t, err)
	m, err := d.Measure(func() error { return nil })
	require.NoError(t, err)
	follower, err := m.Follow(base, 0.5, 1<<20)
	require.NoError(t, err)
	cat, err := d.Category("read during a capture")
	require.NoError(t, err)
	noErr := func(f func()) func() error { return func() error { f(); return nil } }

	return []reading{
		{"MemoryStats", noErr(func() { d.MemoryStats() })},
		{"MemorySummary", noErr(func() { _ = d.MemorySummary() })},
		{"MemoryAllocated", noErr(func() { d.MemoryAllocated(); d.MaxMemoryAllocated() })},
		{"ResetPeakMemoryStats", noErr(d.ResetPeakMemoryStats)},
		{"ResetAccumulatedMemoryStats", noErr(d.ResetAccumulatedMemoryStats)},
		{"CategoryStats", noErr(func() { d.CategoryStats(); cat.Stats() })},
		{"Expvar", noErr(func() { _ = Expvar().String() })},
		{"Usage", func() error { _, err := d.Usage(); return err }},
		{"Baseline", func() error { _, err := d.Baseline(); return err }},
		{"MemGetInfo", func() error { _, _, err := d.MemGetInfo(); return err }},
		{"Info", func() error { _, err := d.Info(); return err }},
		{"Measure", func() error { _, err := d.Measure(func() error { return nil }); return err }},
		{"PeakScope", func() error {
			s, err := d.OpenPeakScope()
			if err != nil {
				return err
			}
			s.PeakHeld()
			return s.Close()
		}},
		{"Pool.Stats", func() error { _, err := d.Pool().Stats(); return err }},
		{"Pool.Usage", func() error { _, err := d.Pool().Usage(); return err }},
		{"Pool.Trim", func() error { return d.Pool().Trim(0) }},
		{"Pool.SetReleaseThreshold", func() error { return d.Pool().SetReleaseThreshold(0) }},
		{"Graphs.Stats", func() error { _, err := d.Graphs().Stats(); return err }},
		{"Graphs.Captures", func() error { _, err := d.Graphs().Captures(); return err }},
		{"Graphs.Capture of another stream", func() error { _, err := d.Graphs().Capture(other); return err }},
		{"Graphs.Trim", func() error { return d.Graphs().Trim() }},
		{"Graphs.Chunk", func() error { _, _, err := d.Graphs().Chunk(); return err }},
		{"Follower.Read", func() error { _, err := follower.Read(); return err }},
		{"ReturnCheck", func() error {
			c, err := d.StartReturnCheck()
			if err != nil {
				return err
			}
			_, err = c.End()
			return err
		}},
		{"Devices", func() error { _, err := Devices(); return err }},
		{"Alloc and Free", func() error {
			b, err := d.Alloc(4096)
			if err != nil {
				return err
			}
			return b.Free()
		}},
	}
}

// TestCUDAStreamCallsDuringCapture: AllocAsync and FreeAsync are the
// program's calls, and keep the driver's semantics. Made on a stream that
// does not capture, while a capture begun in global mode is under way, on
// the capturing thread or another, in the default mode or relaxed
// (cuThreadExchangeStreamCaptureMode), each answers as the raw call made
// the same way does, and leaves the capture as the raw call leaves it:
// where the driver refuses the raw call (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
// and invalidates the capture, memtrack's fails with an error matching
// ErrNotSupported that names the code, AllocAsync counting the failed
// allocation and nothing else, and the buffer a refused FreeAsync was to
// free staying live and counted, to be freed once the capture has ended;
// where the raw call succeeds, memtrack's does. On the fake, which follows
// an H200, both are refused in the default mode and succeed relaxed.
func TestCUDAStreamCallsDuringCapture(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skipf("no memory pools: %v", err)
	}
	_, ctx, err := cudaDeviceOf(d.Ordinal(), "test")
	require.NoError(t, err)
	s := newStream(t, d)
	for _, where := range cudatest.Threads {
		for _, relaxed := range []bool{false, true} {
			mode := "default mode"
			if relaxed {
				mode = "relaxed"
			}
			// made runs call in the mode of the case, on the thread
			// DuringCapture gives it.
			made := func(call func()) func() {
				return func() {
					if !relaxed {
						call()
						return
					}
					// assert, not require: this may be another goroutine than the test's
					old, r := cudatest.ExchangeCaptureMode(cudatest.CaptureRelaxed)
					assert.Equal(t, cudadrv.Success, r)
					call()
					_, r = cudatest.ExchangeCaptureMode(old)
					assert.Equal(t, cudadrv.Success, r)
				}
			}
			// asRaw checks memtrack's call (err, and the capture's end)
			// against the raw call's (raw, rawEnded), and on the fake
			// against the H200's answer; it reports whether the call was
			// refused.
			asRaw := func(t *testing.T, raw, rawEnded cudadrv.Result, err error, nodes int, ended cudadrv.Result) bool {
				t.Helper()
				t.Logf("the raw call answered %d, its capture's end %d; memtrack's: %v, its capture's end %d", raw, rawEnded, err, ended)
				if onFake() {
					want, wantEnd := cudadrv.CaptureUnsupported, cudadrv.Result(901) // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
					if relaxed {
						want, wantEnd = cudadrv.Success, cudadrv.Success
					}
					assert.Equal(t, want, raw, "the fake answers the raw call as the H200 did")
					assert.Equal(t, wantEnd, rawEnded)
				}
				assert.Equal(t, rawEnded, ended, "the capture ends as after the raw call")
				if ended == cudadrv.Success {
					assert.Equal(t, 1, nodes, "with its graph")
				}
				if raw == cudadrv.Success {
					assert.NoError(t, err)
					return false
				}
				assert.ErrorIs(t, err, ErrNotSupported)
				assert.ErrorContains(t, err, cudadrv.Name(raw))
				return true
			}
			t.Run(where.String()+"/"+mode+"/AllocAsync", func(t *testing.T) {
				var p uintptr
				var raw cudadrv.Result
				_, rawEnded := cudatest.DuringCapture(t, d.Ordinal(), where, made(func() { p, raw = cudatest.AllocAsync(uintptr(ctx), 4096, uintptr(s)) }))
				if raw == cudadrv.Success {
					require.Equal(t, cudadrv.Success, cudatest.FreeAsync(uintptr(ctx), p, uintptr(s), 0))
				}
				before := d.MemoryStats()
				var b *Buffer
				var err error
				nodes, ended := cudatest.DuringCapture(t, d.Ordinal(), where, made(func() { b, err = d.AllocAsync(4096, s) }))
				after := d.MemoryStats()
				if !asRaw(t, raw, rawEnded, err, nodes, ended) {
					assert.Equal(t, before.Tracked+4096, after.Tracked)
					require.NoError(t, b.FreeAsync(s))
					return
				}
				assert.Nil(t, b)
				assert.Equal(t, before.Tracked, after.Tracked, "nothing counted")
				assert.Equal(t, before.Held, after.Held)
				assert.Equal(t, before.Buffers, after.Buffers)
				assert.Equal(t, before.Allocs, after.Allocs)
				assert.Equal(t, before.FailedAllocs+1, after.FailedAllocs, "a failed allocation, as the driver's every refusal")
			})
			t.Run(where.String()+"/"+mode+"/FreeAsync", func(t *testing.T) {
				p, r := cudatest.AllocAsync(uintptr(ctx), 4096, uintptr(s))
				require.Equal(t, cudadrv.Success, r)
				var raw cudadrv.Result
				_, rawEnded := cudatest.DuringCapture(t, d.Ordinal(), where, made(func() { raw = cudatest.FreeAsync(uintptr(ctx), p, uintptr(s), 0) }))
				if raw != cudadrv.Success {
					require.Equal(t, cudadrv.Success, cudatest.FreeAsync(uintptr(ctx), p, uintptr(s), 0))
				}
				b, err := d.AllocAsync(4096, s)
				require.NoError(t, err)
				before := d.MemoryStats()
				nodes, ended := cudatest.DuringCapture(t, d.Ordinal(), where, made(func() { err = b.FreeAsync(s) }))
				after := d.MemoryStats()
				if !asRaw(t, raw, rawEnded, err, nodes, ended) {
					assert.True(t, b.Freed())
					assert.Equal(t, before.Tracked-4096, after.Tracked)
					return
				}
				assert.False(t, b.Freed(), "the buffer stays live")
				assert.Equal(t, before.Tracked, after.Tracked, "and counted")
				assert.Equal(t, before.Frees, after.Frees)
				require.NoError(t, b.FreeAsync(s), "freed once the capture has ended")
			})
		}
	}
}
