//go:build cuda

package cu_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/cu"
	mcu "github.com/mumax/3/cuda/cu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run against the libcuda.so.1 the process loads: the fake
// driver of testdata/fakecuda under scripts/test-cuda.sh, or a GPU's.

func TestMain(m *testing.M) {
	// The fake reads its environment on the first call, which comes later.
	for k, v := range map[string]string{"FAKECUDA_DEVICES": "2", "FAKECUDA_CAPACITY": strconv.Itoa(1 << 30)} {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}

// inContext runs f on a locked thread with device ordinal's primary context
// current, as a program that uses cu does.
func inContext(t testing.TB, ordinal int, f func()) {
	t.Helper()
	if _, err := memtrack.CUDA(ordinal); err != nil {
		t.Skipf("needs CUDA device %d: %v", ordinal, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := cu.CtxGetCurrent()
	cu.CtxSetCurrent(cu.DevicePrimaryCtxRetain(cu.DeviceGet(ordinal)))
	defer cu.CtxSetCurrent(prev)
	f()
}

func onFake(t testing.TB) bool {
	t.Helper()
	if _, err := memtrack.CUDA(0); err != nil {
		return false
	}
	return strings.HasPrefix(cu.DeviceGet(0).Name(), "memtrack fakecuda")
}

// recovered returns what f panicked with, or nil.
func recovered(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

func cuda(t testing.TB, ordinal int) memtrack.Device {
	t.Helper()
	d, err := memtrack.CUDA(ordinal)
	require.NoError(t, err)
	return d
}

// cudaDevices returns the first n CUDA devices, or skips the test where the
// machine has fewer (a one-GPU machine runs these tests too).
func cudaDevices(t testing.TB, n int) []memtrack.Device {
	t.Helper()
	var ds []memtrack.Device
	for i := range n {
		d, err := memtrack.CUDA(i)
		if err != nil {
			t.Skipf("needs %d CUDA devices: %v", n, err)
		}
		ds = append(ds, d)
	}
	return ds
}

// driverUsed returns the device's memory in use as the driver reports it.
func driverUsed(t testing.TB) int64 {
	t.Helper()
	free, total := cu.MemGetInfo()
	return total - free
}

func stats(d memtrack.Device) memtrack.Stats { return d.MemoryStats() }

// MemAlloc counts on the device of the current context; MemFree and the
// method form uncount. The other device, where the machine has one, sees
// nothing; a one-GPU machine runs the first case alone.
func TestMemAllocCountsOnCurrentDevice(t *testing.T) {
	for _, ordinal := range []int{0, 1} {
		t.Run(strconv.Itoa(ordinal), func(t *testing.T) {
			ds := cudaDevices(t, ordinal+1)
			inContext(t, ordinal, func() {
				d := ds[ordinal]
				other, hasOther := memtrack.CUDA(1 - ordinal)
				before, otherBefore := stats(d), stats(other)
				p := cu.MemAlloc(1000)
				q := cu.MemAlloc(24)
				s := stats(d)
				assert.Equal(t, before.Tracked+1024, s.Tracked)
				assert.Equal(t, before.Buffers+2, s.Buffers)
				if hasOther == nil {
					assert.Equal(t, otherBefore, stats(other))
				}
				h := memtrack.KindCUDA.TrackedAt(uintptr(p))
				require.NotNil(t, h)
				assert.Equal(t, d, h.Device())
				assert.Equal(t, int64(1000), h.Size())
				assert.Equal(t, uintptr(p), h.DevicePtr())
				assert.Equal(t, int64(1000), p.Bytes(), "the mirror forwards to cu")

				cu.MemFree(p)
				q.Free()
				s = stats(d)
				assert.Equal(t, before.Tracked, s.Tracked)
				assert.Equal(t, before.Frees+2, s.Frees)
				assert.Nil(t, memtrack.KindCUDA.TrackedAt(uintptr(p)))
			})
		})
	}
}

// The memory limit refuses MemAlloc as a full device does, and the memory
// goes back to the driver.
func TestMemAllocLimit(t *testing.T) {
	inContext(t, 0, func() {
		d := cuda(t, 0)
		require.NoError(t, d.SetMemoryLimit(d.MemoryAllocated()+4096))
		t.Cleanup(func() { require.NoError(t, d.SetMemoryLimit(0)) })
		p := cu.MemAlloc(4000)
		before, used := stats(d), driverUsed(t)

		r := recovered(func() { cu.MemAlloc(200) })
		assert.True(t, r == cu.ERROR_OUT_OF_MEMORY, "panics as cu does on a full device, got %v", r)
		assert.True(t, r == mcu.ERROR_OUT_OF_MEMORY, "with cu's own value")
		s := stats(d)
		assert.Equal(t, before.FailedAllocs+1, s.FailedAllocs)
		before.FailedAllocs = s.FailedAllocs
		assert.Equal(t, before, s, "nothing but FailedAllocs moves")
		if onFake(t) {
			assert.Equal(t, used, driverUsed(t), "the refused memory is freed")
		}
		cu.MemFree(p)
	})
}

// Bad input: each has its answer, and no figure moves.
func TestMemAllocFreeBadInput(t *testing.T) {
	d := cuda(t, 0)
	var freed cu.DevicePtr
	var untracked mcu.DevicePtr
	inContext(t, 0, func() {
		untracked = mcu.MemAlloc(2048) // by cu, before tracking
		// Freed last: nothing allocates after it, so the driver, which may
		// hand a freed address out again at once, cannot have reused it
		// when "MemFree twice" frees it again.
		freed = cu.MemAlloc(512)
		cu.MemFree(freed)
	})
	before := stats(d)
	{

		for _, tc := range []struct {
			name  string
			f     func()
			cu    func() // what mumax's cu does with the same input; nil: the same as f
			check func(t *testing.T, r any)
		}{
			{name: "MemAlloc(0)", f: func() { cu.MemAlloc(0) }, cu: func() { mcu.MemAlloc(0) }},
			{name: "MemAlloc(-1)", f: func() { cu.MemAlloc(-1) }, cu: func() { mcu.MemAlloc(-1) }},
			{name: "MemFree(0)", f: func() { cu.MemFree(0) }, cu: func() { mcu.MemFree(0) }},
			{name: "MemFree of an address never allocated", f: func() { cu.MemFree(0x1234) }, check: func(t *testing.T, r any) {
				e, ok := r.(*cu.Error)
				require.True(t, ok, "panics with *cu.Error, got %T %v", r, r)
				assert.Equal(t, cu.ERROR_INVALID_VALUE, e.Result)
				assert.Contains(t, e.Error(), "0x1234")
				assert.False(t, e.Tracked)
			}},
			{name: "MemFree twice", f: func() { cu.MemFree(freed) }, check: func(t *testing.T, r any) {
				e, ok := r.(*cu.Error)
				require.True(t, ok, "panics with *cu.Error, got %T %v", r, r)
				assert.Contains(t, e.Error(), fmt.Sprintf("%#x", uintptr(freed)))
				assert.Contains(t, e.Error(), "freed already")
			}},
			{name: "MemFree of memory cu allocated before tracking", f: func() { cu.MemFree(cu.DevicePtr(untracked)) }, check: func(t *testing.T, r any) {
				assert.Nil(t, r, "the driver frees it")
				assert.Panics(t, func() { mcu.MemFree(untracked) }, "it is freed: cu refuses it now")
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				// Each subtest runs on a goroutine, and so a thread, of its own.
				inContext(t, 0, func() {
					r := recovered(tc.f)
					if tc.cu != nil {
						assert.Equal(t, recovered(tc.cu), r, "the drop-in panics as cu does")
					}
					if tc.check != nil {
						tc.check(t, r)
					}
				})
				assert.Equal(t, before, stats(d), "no figure moves")
			})
		}
	}
}

// Memory freed behind the drop-in's back stays counted until the driver
// hands its address out again.
func TestMemAllocAfterUncountedFree(t *testing.T) {
	if !onFake(t) {
		t.Skip("relies on the fake driver handing back a freed address")
	}
	inContext(t, 0, func() {
		d := cuda(t, 0)
		before := stats(d)
		p := cu.MemAlloc(512)
		mcu.MemFree(mcu.DevicePtr(p)) // mumax's own free: not counted
		assert.Equal(t, before.Tracked+512, stats(d).Tracked)
		q := cu.MemAlloc(512)
		require.Equal(t, p, q, "precondition: the driver hands the address just freed out again, as an H200 did and the fake does")
		s := stats(d)
		assert.Equal(t, before.Tracked+512, s.Tracked, "the stale count is dropped")
		assert.Equal(t, before.Buffers+1, s.Buffers)
		cu.MemFree(q)
		assert.Equal(t, before.Tracked, stats(d).Tracked)
	})
}

// Goroutines on both devices allocate and free at once; the figures end
// exact.
func TestMemAllocConcurrent(t *testing.T) {
	ds := cudaDevices(t, 2)
	before := []memtrack.Stats{stats(ds[0]), stats(ds[1])}
	n := 300
	if testing.Short() {
		n = 50
	}
	const workers = 4
	var start, done sync.WaitGroup
	start.Add(1)
	for w := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			inContext(t, w%2, func() {
				start.Wait()
				var live []cu.DevicePtr
				for i := range n {
					live = append(live, cu.MemAlloc(int64(256*(i%4+1))))
					if i%3 == 2 {
						for _, p := range live {
							p.Free()
						}
						live = live[:0]
					}
				}
				for _, p := range live {
					cu.MemFree(p)
				}
			})
		}()
	}
	start.Done()
	done.Wait()
	var bytes int64
	for i := range n {
		bytes += int64(256 * (i%4 + 1))
	}
	for i, d := range ds {
		s := stats(d)
		assert.Equal(t, before[i].Tracked, s.Tracked)
		assert.Equal(t, before[i].Allocs+int64(workers/2*n), s.Allocs)
		assert.Equal(t, before[i].AllocBytes+int64(workers/2)*bytes, s.AllocBytes)
	}
}

// TestFreeFault: the fake fails a cuMemFree of tracked memory, which stays
// counted (a child process, since the fault is counted per process).
func TestFreeFault(t *testing.T) {
	if os.Getenv("MEMTRACK_CU_CHILD") == "1" {
		inContext(t, 0, func() {
			d := cuda(t, 0)
			p := cu.MemAlloc(4096)
			before := stats(d)
			r := recovered(func() { cu.MemFree(p) }) // the fake's first cuMemFree fails
			e, ok := r.(*cu.Error)
			require.True(t, ok, "panics with *cu.Error, got %T %v", r, r)
			assert.True(t, e.Tracked)
			assert.Contains(t, e.Error(), fmt.Sprintf("%#x", uintptr(p)))
			assert.Contains(t, e.Error(), "stays allocated and counted")
			assert.Equal(t, before, stats(d))
			assert.NotNil(t, memtrack.KindCUDA.TrackedAt(uintptr(p)))
			cu.MemFree(p) // the second succeeds
			assert.Equal(t, before.Tracked-4096, stats(d).Tracked)
		})
		return
	}
	if !onFake(t) {
		t.Skip("needs the fake driver's fault injection")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreeFault$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "MEMTRACK_CU_CHILD=1", "FAKECUDA_FAIL_FREE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestFreeFault")
}

// mirror.go is what mirror_gen.go writes from the cu in go.mod.
func TestMirrorUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go run")
	}
	want, err := os.ReadFile("mirror.go")
	require.NoError(t, err)
	got, err := exec.Command("go", "run", "mirror_gen.go", "-o", "-").Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go run mirror_gen.go: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "run go generate ./cu")
}

//go:noinline
func allocWeights(bytes int64) cu.DevicePtr { return cu.MemAlloc(bytes) }

//go:noinline
func allocScratch(bytes int64) cu.DevicePtr { return cu.MemAlloc(bytes) }

// TestMemAllocSites: an allocation through cu is attributed to the code
// that called MemAlloc, not to the drop-in: two callers are two sites,
// each with its caller as the innermost frame.
func TestMemAllocSites(t *testing.T) {
	d := cuda(t, 0)
	require.NoError(t, d.Sites().SetRate(1))
	defer d.Sites().SetRate(0)
	require.NoError(t, d.Sites().Enable(8))
	defer d.Sites().Disable()
	inContext(t, 0, func() {
		a := allocWeights(3 << 20)
		defer a.Free()
		b := allocScratch(1 << 20)
		defer b.Free()
		snap, err := d.Sites().Snapshot()
		require.NoError(t, err)
		var inner []string
		for _, s := range snap.Sites {
			f, _ := runtime.CallersFrames(s.Stack).Next()
			inner = append(inner, f.Function)
		}
		assert.Equal(t, []string{"github.com/memtrack/memtrack/cu_test.allocWeights", "github.com/memtrack/memtrack/cu_test.allocScratch"}, inner,
			"the innermost frame of each site, the largest first")
	})
}

// A stream of mumax's binding converts to a memtrack.Stream, as memtrack's
// own calls of the driver (loaded at run time) and mumax's (linked) reach
// the same driver: a stream-ordered buffer on it is counted, and leaves the
// device-side figure once the stream has run its free.
func TestStreamFromMumax(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skip(err)
	}
	inContext(t, 0, func() {
		s := mcu.StreamCreate()
		defer s.Destroy()
		before := d.MemoryStats()
		b, err := d.AllocAsync(1<<20, memtrack.Stream(s))
		require.NoError(t, err)
		assert.Equal(t, before.Tracked+1<<20, d.MemoryStats().Tracked)
		require.NoError(t, b.FreeAsync(memtrack.Stream(s)))
		s.Synchronize()
		after := d.MemoryStats()
		assert.Equal(t, before.Tracked, after.Tracked)
		assert.Equal(t, before.Held, after.Held, "the stream ran the free")
	})
}
