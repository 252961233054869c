//go:build cuda

package memtrack

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run against whatever libcuda.so.1 the process loads: the fake
// driver of testdata/fakecuda in CI (scripts/test-cuda.sh), or the NVIDIA
// driver on a GPU machine (scripts/gpu-check.sh). Checks that only the fake
// can make exact (what the driver reports, injected faults) are skipped on
// a real GPU.

// The fake driver's configuration for this process, unless the environment
// sets another. A real driver ignores these variables.
var fakeDefaults = map[string]string{
	"FAKECUDA_DEVICES":       "2",
	"FAKECUDA_CAPACITY":      strconv.Itoa(4<<30) + "," + strconv.Itoa(2<<30),
	"FAKECUDA_CONTEXT_BYTES": strconv.Itoa(fakeContextBytes),
}

const fakeContextBytes = 48 << 20

// fakeBytes reads a size of the fake driver's configuration, as the fake
// reads it (the first number of the variable), or def where it is unset.
func fakeBytes(name string, def int64) int64 {
	v, _, _ := strings.Cut(os.Getenv(name), ",")
	if n, err := strconv.ParseInt(v, 0, 64); err == nil && n > 0 {
		return n
	}
	return def
}

// fakeAllocTakes is what the fake's cuMemAlloc of size bytes takes of the
// device: the size rounded up to the allocation granularity
// (FAKECUDA_GRANULARITY, 2 MiB by default), as an H200's cuMemGetInfo
// showed (1 MiB took 2 MiB; testdata/fakecuda/RULES.md).
func fakeAllocTakes(size int64) int64 {
	g := fakeBytes("FAKECUDA_GRANULARITY", 2<<20)
	return (size + g - 1) / g * g
}

// fakePoolReserves is what the fake's pool reserves for used bytes: used
// rounded up to its step (FAKECUDA_POOL_STEP, 32 MiB by default, as an
// H200's default pool reserved: 1 B to 32 MiB took 32 MiB, 33 MiB 64).
func fakePoolReserves(used int64) int64 {
	step := fakeBytes("FAKECUDA_POOL_STEP", 32<<20)
	return (used + step - 1) / step * step
}

func TestMain(m *testing.M) {
	// The driver reads its environment on the first call, which comes later.
	for k, v := range fakeDefaults {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}

// onFake reports whether the process runs on the fake driver.
func onFake() bool {
	d, err := CUDA(0)
	if err != nil {
		return false
	}
	info, err := d.Info()
	return err == nil && strings.HasPrefix(info.Name, "memtrack fakecuda")
}

// cudaDevices returns the first n CUDA devices, or skips the test. The
// driver calls of the tests (internal/cudatest) are loaded with them.
func cudaDevices(t *testing.T, n int) []Device {
	t.Helper()
	var ds []Device
	for i := range n {
		d, err := CUDA(i)
		if err != nil {
			t.Skipf("needs %d CUDA devices: %v", n, err)
		}
		ds = append(ds, d)
	}
	require.NoError(t, cudatest.Load())
	return ds
}

func requireFake(t *testing.T) {
	t.Helper()
	if !onFake() {
		t.Skip("needs the fake driver of testdata/fakecuda (scripts/test-cuda.sh)")
	}
}

// used returns what the driver reports in use on d.
func used(t *testing.T, d Device) int64 {
	t.Helper()
	free, total, err := d.MemGetInfo() // one driver call: the fault tests count them
	require.NoError(t, err)
	return total - free
}

func TestCUDADevices(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	assert.Equal(t, KindCUDA, d.Kind())
	assert.Equal(t, "cuda:0", d.String())
	ds := listDevices(t)
	assert.Contains(t, ds, d)

	n := 0
	for _, d := range ds {
		if d.Kind() == KindCUDA {
			assert.Equal(t, n, d.Ordinal())
			n++
		}
	}
	if onFake() {
		// The count the fake was configured with: TestMain's default
		// unless the environment set another.
		want, err := strconv.Atoi(os.Getenv("FAKECUDA_DEVICES"))
		require.NoError(t, err, "FAKECUDA_DEVICES")
		assert.Equal(t, want, n, "FAKECUDA_DEVICES")
	}
	p, err := ParseDevice("cuda:" + strconv.Itoa(n-1))
	require.NoError(t, err)
	assert.Equal(t, n-1, p.Ordinal())
}

func TestCUDAInvalidOrdinal(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	n := len(listDevices(t)) - 1 // all but the CPU, with no Metal in a cuda build
	before := d.MemoryStats()
	for _, ord := range []int{-1, n, n + 1, 1 << 20} {
		_, err := CUDA(ord)
		assert.ErrorIs(t, err, ErrInvalidOrdinal, "CUDA(%d)", ord)
		_, err = ParseDevice(fmt.Sprintf("cuda:%d", ord))
		assert.Error(t, err, "ParseDevice cuda:%d", ord)

		// A Device value made up inside the package, past the checks of CUDA.
		bad := Device{kind: KindCUDA, ordinal: ord}
		b, err := bad.Alloc(1 << 10)
		assert.ErrorIs(t, err, ErrInvalidOrdinal)
		assert.Nil(t, b)
		_, _, err = bad.MemGetInfo()
		assert.ErrorIs(t, err, ErrInvalidOrdinal)
	}
	assert.Equal(t, before, d.MemoryStats(), "no counter of a real device moved")
}

func TestCUDAExactCountingTwoDevices(t *testing.T) {
	ds := cudaDevices(t, 2)
	sizes := []int64{1, 1000, 1 << 10, 1<<20 + 3, 64 << 20}
	before := [2]Stats{ds[0].MemoryStats(), ds[1].MemoryStats()}

	var bufs [2][]*Buffer
	var sum [2]int64
	for i, size := range sizes {
		for di, d := range ds {
			size := size * int64(di+1) // different figures on each device
			b, err := d.Alloc(size)
			require.NoError(t, err)
			bufs[di] = append(bufs[di], b)
			sum[di] += size
			assert.Equal(t, before[di].Tracked+sum[di], d.MemoryAllocated(), "after %d allocations", i+1)
			assert.Nil(t, b.Bytes(), "device memory has no host view")
			assert.NotZero(t, b.DevicePtr())
			assert.Equal(t, d, b.Device())
		}
	}
	for di, d := range ds {
		s := d.MemoryStats()
		assert.Equal(t, before[di].Tracked+sum[di], s.Tracked)
		assert.Equal(t, before[di].Allocs+int64(len(sizes)), s.Allocs)
		assert.Equal(t, before[di].Buffers+int64(len(sizes)), s.Buffers)
		assert.GreaterOrEqual(t, s.PeakTracked, s.Tracked)
	}
	for di, d := range ds {
		for _, b := range bufs[di] {
			ptr := b.DevicePtr()
			require.NoError(t, b.Free())
			assert.Zero(t, b.DevicePtr(), "DevicePtr of a freed buffer (was %#x)", ptr)
		}
		s := d.MemoryStats()
		assert.Equal(t, before[di].Tracked, s.Tracked)
		assert.Equal(t, before[di].Frees+int64(len(sizes)), s.Frees)
		assert.Equal(t, before[di].FreedBytes+sum[di], s.FreedBytes)
		assert.Equal(t, before[di].FailedAllocs, s.FailedAllocs)
	}
}

func TestCUDAConcurrentAllocFree(t *testing.T) {
	ds := cudaDevices(t, 1)
	if d1, err := CUDA(1); err == nil {
		ds = append(ds, d1)
	}
	const size = 3 << 10
	const workers = 8
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	var base [2]int64
	var usedBase [2]int64
	for i, d := range ds {
		d.ResetPeakMemoryStats()
		base[i] = d.MemoryAllocated()
		usedBase[i] = used(t, d)
	}
	allocsBefore := ds[0].MemoryStats().Allocs

	// Every worker holds one buffer on each device at the same moment: the
	// peak must be exactly workers*size above the baseline.
	var held, release sync.WaitGroup
	held.Add(workers)
	release.Add(1)
	errs := make(chan error, workers)
	var done sync.WaitGroup
	for range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			var bufs []*Buffer
			for _, d := range ds {
				b, err := d.Alloc(size)
				if err != nil {
					errs <- err
					held.Done()
					return
				}
				bufs = append(bufs, b)
			}
			held.Done()
			release.Wait()
			for r := range rounds {
				d := ds[r%len(ds)]
				b, err := d.Alloc(size + int64(r))
				if err == nil {
					err = b.Free()
				}
				if err != nil {
					errs <- err
					return
				}
			}
			for _, b := range bufs {
				if err := b.Free(); err != nil {
					errs <- err
				}
			}
		}()
	}
	held.Wait()
	for i, d := range ds {
		assert.Equal(t, base[i]+workers*size, d.MemoryAllocated(), "%v while all hold", d)
		assert.Equal(t, base[i]+workers*size, d.MaxMemoryAllocated(), "%v peak while all hold", d)
	}
	release.Done()
	done.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	for i, d := range ds {
		assert.Equal(t, base[i], d.MemoryAllocated(), "%v after all freed", d)
		assert.GreaterOrEqual(t, d.MaxMemoryAllocated(), base[i]+workers*size, "%v peak", d)
		if onFake() {
			assert.Equal(t, usedBase[i], used(t, d), "%v: the driver got all memory back", d)
		}
	}
	perDevice0 := int64(workers) * int64(1+(rounds+len(ds)-1)/len(ds))
	assert.Equal(t, allocsBefore+perDevice0, ds[0].MemoryStats().Allocs)
}

func TestCUDADriverOutOfMemory(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	require.Positive(t, total)
	require.LessOrEqual(t, free, total)

	// More than the device has: the driver refuses it.
	assertDriverOOM(t, d, total+1<<30)

	// The device still works.
	b, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, b.Free())
}

// assertDriverOOM asks d for size bytes, which the driver must refuse, and
// checks the error and that only FailedAllocs moved.
func assertDriverOOM(t *testing.T, d Device, size int64) {
	t.Helper()
	before := d.MemoryStats()
	b, err := d.Alloc(size)
	assert.Nil(t, b)
	assert.ErrorIs(t, err, ErrOutOfMemory)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int(cudadrv.OutOfMemory), oom.Code)
	assert.Equal(t, d, oom.Device)
	assert.Equal(t, size, oom.Requested)
	assert.Equal(t, before.Tracked, oom.Tracked)
	assert.Zero(t, oom.Limit, "the driver refused it, not a limit")
	assert.Contains(t, err.Error(), "CUDA_ERROR_OUT_OF_MEMORY")
	want := before
	want.FailedAllocs++
	assert.Equal(t, want, d.MemoryStats(), "only FailedAllocs moved")
}

func TestCUDADoubleFree(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	b, err := d.Alloc(4 << 10)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	before := d.MemoryStats()
	usedBefore := used(t, d)
	err = b.Free()
	assert.ErrorIs(t, err, ErrDoubleFree)
	assert.Equal(t, before, d.MemoryStats())
	assert.Equal(t, usedBefore, used(t, d))
	assert.True(t, b.Freed())
}

func TestCUDAMemGetInfoPerDevice(t *testing.T) {
	ds := cudaDevices(t, 2)
	requireFake(t) // on a real GPU, other processes change these figures
	free0, total0, err := ds[0].MemGetInfo()
	require.NoError(t, err)
	free1, total1, err := ds[1].MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, int64(4<<30), total0, "FAKECUDA_CAPACITY of device 0")
	assert.Equal(t, int64(2<<30), total1, "FAKECUDA_CAPACITY of device 1")

	const size = 96 << 20
	b, err := ds[1].Alloc(size)
	require.NoError(t, err)
	f0, _, err := ds[0].MemGetInfo()
	require.NoError(t, err)
	f1, _, err := ds[1].MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, free0, f0, "device 0 is untouched")
	assert.Equal(t, free1-size, f1, "device 1 lost exactly the buffer")
	require.NoError(t, b.Free())
	f1, _, err = ds[1].MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, free1, f1)
}

func TestCUDAUsageTrackedVersusDriver(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	const size = 256 << 20
	u0, err := d.Usage()
	require.NoError(t, err)
	b, err := d.Alloc(size)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Free()) }()
	u1, err := d.Usage()
	require.NoError(t, err)

	assert.Equal(t, u0.Tracked+size, u1.Tracked)
	assert.Equal(t, u1.Total-u1.Free, u1.Used)
	assert.Equal(t, u1.Used-u1.Tracked, u1.Untracked)
	if onFake() {
		// The fake's only untracked memory is its context.
		assert.Equal(t, u0.Used+size, u1.Used)
		assert.Equal(t, int64(fakeContextBytes), u1.Untracked)
	} else {
		assert.GreaterOrEqual(t, u1.Used-u0.Used, int64(size)*9/10)
	}
}

// TestCUDAContextRestored checks that a call leaves the calling thread's
// current context as it found it.
func TestCUDAContextRestored(t *testing.T) {
	ds := cudaDevices(t, 2)
	b := openTable(KindCUDA).b.(*cudaBackend)
	_, c, err := b.device(1, "context")
	require.NoError(t, err)
	ctx1 := uintptr(c)

	require.Equal(t, cudadrv.Success, cudatest.InContext(ctx1, func() {
		buf, err := ds[0].Alloc(1 << 20)
		require.NoError(t, err)
		_, _, err = ds[0].MemGetInfo()
		require.NoError(t, err)
		require.NoError(t, buf.Free())
		assert.Equal(t, ctx1, currentContext(t))
	}))
}

// TestCUDAReconcile prints, for allocations of several sizes, the tracked
// bytes beside the change in what the driver reports used, and the memory in
// use with nothing tracked (the context, and on a real GPU other libraries
// and processes). scripts/gpu-check.sh runs it on a GPU; it asks for up to
// 1 GiB, so it runs only with MEMTRACK_RECONCILE=1.
func TestCUDAReconcile(t *testing.T) {
	if os.Getenv("MEMTRACK_RECONCILE") != "1" {
		t.Skip("set MEMTRACK_RECONCILE=1 (scripts/gpu-check.sh does)")
	}
	d := cudaDevices(t, 1)[0]
	base, err := d.Usage()
	require.NoError(t, err)
	var out strings.Builder
	fmt.Fprintf(&out, "device %v: total %s, used with nothing tracked %s (tracked %s; untracked: context, libraries, other processes)\n",
		d, bytesize.Format(base.Total), bytesize.Format(base.Used-base.Tracked), bytesize.Format(base.Tracked))
	fmt.Fprintf(&out, "%10s %12s %15s %18s %14s\n", "size", "tracked Δ", "driver used Δ", "driver - tracked", "after free Δ")
	for _, size := range []int64{1 << 10, 1 << 20, 64 << 20, 1 << 30} {
		before, err := d.Usage()
		require.NoError(t, err)
		b, err := d.Alloc(size)
		require.NoError(t, err, "allocating %s", bytesize.Format(size))
		during, err := d.Usage()
		require.NoError(t, err)
		require.NoError(t, b.Free())
		after, err := d.Usage()
		require.NoError(t, err)

		tracked := during.Tracked - before.Tracked
		driver := during.Used - before.Used
		assert.Equal(t, size, tracked, "tracked change for %s", bytesize.Format(size))
		assert.Equal(t, before.Tracked, after.Tracked)
		if onFake() {
			assert.Equal(t, fakeAllocTakes(size), driver, "the size in whole pages, as an H200's")
			assert.Equal(t, before.Used, after.Used)
		}
		fmt.Fprintf(&out, "%10s %12d %15d %18d %14d\n", bytesize.Format(size), tracked, driver, driver-tracked, after.Used-before.Used)
	}
	t.Log("\n" + out.String())
}

// Fault injection and init failure need a process of their own: the fake
// driver reads its configuration once, and the driver is initialised once
// per process. TestCUDAFaults runs the test binary again for each case with
// the fake's environment set, running one TestCUDAChild* test in it.
func TestCUDAFaults(t *testing.T) {
	requireFake(t)
	// The real link stub as the driver, where scripts/test-cuda.sh gives a
	// folder holding it as libcuda.so.1: every call fails with
	// CUDA_ERROR_STUB_LIBRARY (34).
	stub := os.Getenv("MEMTRACK_CUDA_STUB_DIR")
	cases := []struct {
		child string
		env   []string
	}{
		{"TestCUDAChildAllocFault", []string{"FAKECUDA_FAIL_ALLOC=2"}},
		{"TestCUDAChildFreeFault", []string{"FAKECUDA_FAIL_FREE=1"}},
		{"TestCUDAChildInitFailure", []string{"FAKECUDA_DEVICES=0", "MEMTRACK_WANT_CODE=100"}},                   // CUDA_ERROR_NO_DEVICE
		{"TestCUDAChildInitFailure", []string{"FAKECUDA_ERROR=999", "MEMTRACK_WANT_CODE=999"}},                   // CUDA_ERROR_UNKNOWN
		{"TestCUDAChildInitFailure", []string{"FAKECUDA_DEVICES=1", "FAKECUDA_ERROR=3", "MEMTRACK_WANT_CODE=3"}}, // NOT_INITIALIZED
		{"TestCUDAChildInitFailure", []string{"LD_LIBRARY_PATH=" + stub, "MEMTRACK_WANT_CODE=34"}},
		// The restore of the thread's context fails after the
		// operation succeeded. Each call of memtrack on the test's thread
		// makes two cuCtxSetCurrent (switch, restore): the child's
		// MemGetInfo, Alloc, MemGetInfo, Free; so the 4th is the alloc's
		// restore, the 8th the free's.
		{"TestCUDAChildRestoreFailure", []string{"FAKECUDA_FAIL=cuCtxSetCurrent:4:201", "MEMTRACK_FAIL_AT=alloc"}},
		{"TestCUDAChildRestoreFailure", []string{"FAKECUDA_FAIL=cuCtxSetCurrent:8:201", "MEMTRACK_FAIL_AT=free"}},
		// The first retain of the primary context fails.
		{"TestCUDAChildRetainRetried", []string{"FAKECUDA_FAIL=cuDevicePrimaryCtxRetain:1:46"}}, // DEVICE_UNAVAILABLE
		{"TestCUDAChildRetainRetried", []string{"FAKECUDA_FAIL=cuDevicePrimaryCtxRetain:1:2"}},  // OUT_OF_MEMORY
		// The second cuMemAlloc meets a sticky error.
		{"TestCUDAChildDeviceLost", []string{"FAKECUDA_FAIL=cuMemAlloc:2:700"}}, // ILLEGAL_ADDRESS
		{"TestCUDAChildDeviceLost", []string{"FAKECUDA_FAIL=cuMemAlloc:2:719"}}, // LAUNCH_FAILED
		{"TestCUDAChildDeviceLost", []string{"FAKECUDA_FAIL=cuMemAlloc:2:911"}}, // EXTERNAL_DEVICE
	}
	for _, c := range cases {
		t.Run(c.child+"/"+strings.Join(c.env, ","), func(t *testing.T) {
			if slices.Contains(c.env, "LD_LIBRARY_PATH=") {
				t.Skip("set MEMTRACK_CUDA_STUB_DIR to a folder with the link stub as libcuda.so.1")
			}
			runChild(t, c.child, c.env)
		})
	}
}

// runChild runs the test binary again for the test named child, with env
// added to the environment, and checks that it passed.
func runChild(t *testing.T, child string, env []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.v", "-test.count=1")
	// The race detector's 1 s pause at exit is of no use here.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), "MEMTRACK_CUDA_CHILD="+child, "GORACE="+gorace)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child output:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: "+child, "child output:\n%s", out)
}

// child skips the test unless TestCUDAFaults started this process for it.
func child(t *testing.T) {
	if os.Getenv("MEMTRACK_CUDA_CHILD") != t.Name() {
		t.Skip("run by TestCUDAFaults in a process of its own")
	}
}

// TestCUDAChildAllocFault: the fake fails the second cuMemAlloc with
// CUDA_ERROR_OUT_OF_MEMORY.
func TestCUDAChildAllocFault(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	first, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	usedBefore := used(t, d)
	assertDriverOOM(t, d, 2<<20)
	assert.Equal(t, usedBefore, used(t, d))

	// The third allocation succeeds again.
	b, err := d.Alloc(2 << 20)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	require.NoError(t, first.Free())
	assert.Zero(t, d.MemoryAllocated())
}

// TestCUDAChildFreeFault: the fake fails the first cuMemFree.
func TestCUDAChildFreeFault(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	b, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	ptr := b.DevicePtr()
	before := d.MemoryStats()
	usedBefore := used(t, d)

	err = b.Free()
	require.Error(t, err)
	var be *BackendError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "free", be.Op)
	assert.Equal(t, 1, be.Code) // CUDA_ERROR_INVALID_VALUE
	assert.Equal(t, "CUDA_ERROR_INVALID_VALUE", be.Name)
	assert.Equal(t, d, be.Device)
	assert.Equal(t, before, d.MemoryStats(), "a failed free uncounts nothing")
	assert.Equal(t, usedBefore, used(t, d))
	assert.False(t, b.Freed())
	assert.Equal(t, ptr, b.DevicePtr(), "the buffer stays live")

	// Free may be called again, and then succeeds.
	require.NoError(t, b.Free())
	s := d.MemoryStats()
	assert.Zero(t, s.Tracked)
	assert.Equal(t, before.Frees+1, s.Frees)
	assert.Equal(t, usedBefore-fakeAllocTakes(1<<20), used(t, d))
}

// initFailureNames are the names of the codes TestCUDAChildInitFailure
// meets. The link stub cannot name its own code (34): cuGetErrorName fails
// there too, and the package's own table answers.
var initFailureNames = map[int]string{
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	100: "CUDA_ERROR_NO_DEVICE",
	999: "CUDA_ERROR_UNKNOWN",
}

// TestCUDAChildInitFailure: the driver does not load (MEMTRACK_WANT_CODE=0)
// or cuInit fails with MEMTRACK_WANT_CODE; every CUDA call answers with an
// error, which says what MEMTRACK_WANT_TEXT holds ("|" between parts), and
// Devices lists no CUDA device; the CPU works.
func TestCUDAChildInitFailure(t *testing.T) {
	child(t)
	code, err := strconv.Atoi(os.Getenv("MEMTRACK_WANT_CODE"))
	require.NoError(t, err)

	for _, ord := range []int{0, 1} {
		_, err := CUDA(ord)
		assert.ErrorIs(t, err, ErrBackendUnavailable)
		var be *BackendError
		require.ErrorAs(t, err, &be)
		assert.Equal(t, code, be.Code)
		assert.Equal(t, "init", be.Op)
		assert.Equal(t, Device{kind: KindCUDA, ordinal: ord}, be.Device, "the error names the device asked for")
		assert.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("memtrack: cuda:%d: init failed", ord)), "%v", err)
		assert.Equal(t, initFailureNames[code], be.Name)
		for _, want := range strings.Split(os.Getenv("MEMTRACK_WANT_TEXT"), "|") {
			assert.Contains(t, err.Error(), want)
		}
		assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "one prefix: %v", err)
	}
	_, err = ParseDevice("cuda:1")
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	assert.True(t, strings.HasPrefix(err.Error(), "memtrack: cuda:1: init failed"), "%v", err)
	ds, err := Devices()
	require.Error(t, err, "Devices says why it lists no CUDA device")
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	var be *BackendError
	if assert.ErrorAs(t, err, &be) {
		assert.Equal(t, code, be.Code)
	}
	for _, want := range strings.Split(os.Getenv("MEMTRACK_WANT_TEXT"), "|") {
		assert.Contains(t, err.Error(), want)
	}
	assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), "one prefix: %v", err)
	assert.Equal(t, []Device{CPU()}, ds, "the CPU alone")

	d := Device{kind: KindCUDA}
	b, err := d.Alloc(1 << 10)
	assert.Nil(t, b)
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	_, _, err = d.MemGetInfo()
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	_, err = d.Usage()
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	assert.ErrorIs(t, d.SetMemoryLimit(1), ErrBackendUnavailable)
	assert.Zero(t, d.MemoryAllocated())
	assert.Equal(t, Stats{Device: d}, d.MemoryStats())

	// The CPU is unaffected.
	cpu, err := CPU().Alloc(1 << 10)
	require.NoError(t, err)
	require.NoError(t, cpu.Free())
}

// TestCUDAErrorMessages checks the errors made of a driver result, on a
// driver that names them or not.
func TestCUDAErrorMessages(t *testing.T) {
	d := Device{kind: KindCUDA}
	asReturned := func(err error) error { return fillError(err, d, 0, nil) } // as the device table returns them
	err := asReturned(resultError("alloc", "", cudadrv.OutOfMemory))
	assert.ErrorIs(t, err, ErrOutOfMemory)
	err = asReturned(resultError("free", "", 1))
	var be *BackendError
	require.True(t, errors.As(err, &be))
	assert.Equal(t, "CUDA_ERROR_INVALID_VALUE", be.Name)
	assert.Contains(t, err.Error(), "free failed: CUDA_ERROR_INVALID_VALUE (code 1)")
	err = asReturned(resultError("alloc", "", 12345))
	require.True(t, errors.As(err, &be))
	assert.Equal(t, 12345, be.Code)
	assert.Equal(t, "CUresult 12345", be.Name, "a code no table knows")
}

// ownContext creates a context of the test's own on device d (cuCtxCreate),
// current on the calling thread, which it locks; the cleanup destroys it.
func ownContext(t *testing.T, d Device) uintptr {
	t.Helper()
	runtime.LockOSThread()
	own, r := cudatest.CtxCreate(d.Ordinal())
	require.Equal(t, cudadrv.Success, r)
	t.Cleanup(func() {
		assert.Equal(t, cudadrv.Success, cudatest.CtxDestroy(own))
		runtime.UnlockOSThread()
	})
	return own
}

// currentContext returns the calling thread's current context.
func currentContext(t *testing.T) uintptr {
	t.Helper()
	cur, r := cudatest.ThreadContext()
	require.Equal(t, cudadrv.Success, r)
	return cur
}

// TestCUDAContextRestoredOwnContext is the one-GPU variant of
// TestCUDAContextRestored: the thread's current context is one the test
// created on the same device, which memtrack does not use (it uses the
// device's primary context) and must leave current after every call.
func TestCUDAContextRestoredOwnContext(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	own := ownContext(t, d)
	require.Equal(t, own, currentContext(t))

	buf, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	assert.Equal(t, own, currentContext(t), "after Alloc")
	_, _, err = d.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, own, currentContext(t), "after MemGetInfo")
	require.NoError(t, buf.Free())
	assert.Equal(t, own, currentContext(t), "after Free")
}

// captureLog makes the default logger of this (child) process write into
// the returned buffer.
func captureLog(t *testing.T) *strings.Builder {
	var out strings.Builder
	var mu sync.Mutex
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(lockedWriter{&mu, &out}, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &out
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestCUDAChildRestoreFailure: the fake fails the cuCtxSetCurrent that puts
// the thread's own context back after a successful cuMemAlloc
// (MEMTRACK_FAIL_AT=alloc) or cuMemFree (=free). The operation's result
// decides: the buffer is returned and counted, or freed and uncounted; the
// failed restore is logged and counted, not returned.
func TestCUDAChildRestoreFailure(t *testing.T) {
	child(t)
	failAt := os.Getenv("MEMTRACK_FAIL_AT")
	d := cudaDevices(t, 1)[0]
	log := captureLog(t)
	own := ownContext(t, d)
	const size = 64 << 20
	usedBefore := used(t, d)
	ownCurrent := func() bool { return currentContext(t) == own }

	b, err := d.Alloc(size)
	require.NoError(t, err, "the allocation succeeded; only the restore failed")
	require.NotNil(t, b)
	assert.Equal(t, int64(size), d.MemoryAllocated())
	assert.Equal(t, usedBefore+size, used(t, d), "the driver holds what is tracked")
	if failAt == "alloc" {
		assert.False(t, ownCurrent(), "the restore failed: the primary context stays current")
	} else {
		assert.True(t, ownCurrent())
	}

	require.NoError(t, b.Free(), "the free succeeded; only the restore failed")
	assert.True(t, b.Freed())
	assert.False(t, ownCurrent(), "a restore failed: the primary context stays current")
	assert.Zero(t, d.MemoryAllocated())
	assert.Equal(t, usedBefore, used(t, d), "the driver got the memory back")
	s := d.MemoryStats()
	assert.Equal(t, int64(1), s.Allocs)
	assert.Equal(t, int64(1), s.Frees)
	assert.Zero(t, s.FailedAllocs)

	b2, err := d.Alloc(size)
	require.NoError(t, err, "the device still works")
	require.NoError(t, b2.Free())

	be := openTable(KindCUDA).b.(*cudaBackend)
	assert.Equal(t, int64(1), be.dev(0).restoreFailures.Load(), "the failed restore is counted")
	assert.Equal(t, 1, strings.Count(log.String(), "level=WARN"), "%s", log)
	assert.Contains(t, log.String(), "op="+failAt)
	assert.Contains(t, log.String(), "CUDA_ERROR_INVALID_CONTEXT")
}

// TestCUDAChildRetainRetried: the fake fails the first retain of the
// primary context (cuDevicePrimaryCtxRetain); the next call retries it.
func TestCUDAChildRetainRetried(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	b, err := d.Alloc(1 << 20)
	require.Error(t, err)
	assert.Nil(t, b)
	var be *BackendError
	var oom *OutOfMemoryError
	require.True(t, errors.As(err, &be) || errors.As(err, &oom), "%v", err)
	assert.Equal(t, int64(1), d.MemoryStats().FailedAllocs)

	b, err = d.Alloc(1 << 20)
	require.NoError(t, err, "the retain is tried again")
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	if onFake() {
		assert.Equal(t, total-fakeContextBytes-fakeAllocTakes(1<<20), free, "one context, retained once")
	}
	require.NoError(t, b.Free())
}

// TestCUDAChildDeviceLost: the fake's second cuMemAlloc meets a sticky
// error; from then on every call on the device says the device is lost, and
// what was tracked stays tracked.
func TestCUDAChildDeviceLost(t *testing.T) {
	child(t)
	want := 700
	for _, code := range []int{719, 911} {
		if strings.HasSuffix(os.Getenv("FAKECUDA_FAIL"), ":"+strconv.Itoa(code)) {
			want = code
		}
	}
	d := cudaDevices(t, 1)[0]
	b1, err := d.Alloc(1 << 20)
	require.NoError(t, err)

	b, err := d.Alloc(2 << 20)
	assert.Nil(t, b)
	assert.ErrorIs(t, err, ErrDeviceLost)
	var be *BackendError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, want, be.Code)
	assert.Equal(t, map[int]string{700: "CUDA_ERROR_ILLEGAL_ADDRESS", 719: "CUDA_ERROR_LAUNCH_FAILED", 911: "CUDA_ERROR_EXTERNAL_DEVICE"}[want], be.Name)
	assert.Equal(t, d, be.Device)

	before := d.MemoryStats()
	_, err2 := d.Alloc(1 << 10)
	assert.ErrorIs(t, err2, ErrDeviceLost, "a later Alloc")
	err3 := b1.Free()
	assert.ErrorIs(t, err3, ErrDeviceLost, "a later Free")
	_, _, err4 := d.MemGetInfo()
	assert.ErrorIs(t, err4, ErrDeviceLost, "a later MemGetInfo")
	for _, e := range []error{err, err2, err3, err4} {
		assert.Equal(t, 1, strings.Count(e.Error(), "memtrack: "), "one prefix: %v", e)
	}
	assert.False(t, b1.Freed(), "the buffer stays live")
	want2 := before
	want2.FailedAllocs++
	assert.Equal(t, want2, d.MemoryStats(), "only FailedAllocs moved")
	assert.Equal(t, int64(1<<20), d.MemoryAllocated())
}

// TestCUDAErrorNames checks that error names come from the driver, which
// knows the codes cu's table lacks.
func TestCUDAErrorNames(t *testing.T) {
	cudaDevices(t, 1)
	for code, name := range map[int]string{
		1:   "CUDA_ERROR_INVALID_VALUE",
		34:  "CUDA_ERROR_STUB_LIBRARY",
		46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
		700: "CUDA_ERROR_ILLEGAL_ADDRESS",
		803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	} {
		err := fillError(resultError("alloc", "", cudadrv.Result(code)), Device{kind: KindCUDA}, 0, nil)
		var be *BackendError
		require.ErrorAs(t, err, &be)
		assert.Equal(t, name, be.Name, "code %d", code)
		assert.Equal(t, code == 700, errors.Is(err, ErrDeviceLost), "code %d: sticky", code)
	}
}

// TestCUDAStickyErrors: the codes that cuda.h documents as leaving the
// process in an inconsistent state, where every later call returns the same
// error, mark the device lost; the others do not.
func TestCUDAStickyErrors(t *testing.T) {
	for _, c := range []struct {
		code   int
		sticky bool
	}{
		{1, false},   // INVALID_VALUE
		{2, false},   // OUT_OF_MEMORY
		{201, false}, // INVALID_CONTEXT
		{226, true},  // CONTAINED (CUDA 12.x headers)
		{600, false}, // NOT_READY
		{700, true},  // ILLEGAL_ADDRESS
		{702, true},  // LAUNCH_TIMEOUT
		{710, true},  // ASSERT
		{714, true},  // HARDWARE_STACK_ERROR
		{715, true},  // ILLEGAL_INSTRUCTION
		{716, true},  // MISALIGNED_ADDRESS
		{717, true},  // INVALID_ADDRESS_SPACE
		{718, true},  // INVALID_PC
		{719, true},  // LAUNCH_FAILED
		{720, false}, // COOPERATIVE_LAUNCH_TOO_LARGE
		{721, true},  // TENSOR_MEMORY_LEAK (CUDA 12.8 headers)
		{810, true},  // MPS_CLIENT_TERMINATED
		{911, true},  // EXTERNAL_DEVICE
		{999, false}, // UNKNOWN
	} {
		assert.Equal(t, c.sticky, cudadrv.Sticky(cudadrv.Result(c.code)), "CUresult %d", c.code)
	}
}
