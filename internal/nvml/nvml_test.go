//go:build cuda

package nvml_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/nvml"
)

// These tests run against the libnvidia-ml.so.1 the process loads: the fake
// of testdata/fakenvml under scripts/test-cuda.sh, or a GPU's. They check
// the rules of doc.go. The fake reads its switches once per process, so a
// test of a switch runs in a process of its own (childtest.InChild).

const fakeContextBytes = 3 << 20

func TestMain(m *testing.M) {
	for k, v := range map[string]string{"FAKECUDA_DEVICES": "2", "FAKECUDA_CONTEXT_BYTES": fmt.Sprint(fakeContextBytes)} {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}

// open loads and initialises the CUDA driver, then NVML, or skips the
// test; it reports whether the driver is the fake.
func open(t *testing.T) (*nvml.Lib, bool) {
	t.Helper()
	if _, err := cudadrv.Load(); err != nil {
		t.Skipf("needs a CUDA device: %v", err)
	}
	if n, r := cudadrv.Init(); r != cudadrv.Success || n == 0 {
		t.Skipf("needs a CUDA device: cuInit: %d, %d device(s)", r, n)
	}
	name, _, r := cudadrv.DeviceInfo(0)
	require.Equal(t, cudadrv.Success, r)
	l, err := nvml.Open()
	if err != nil {
		t.Skipf("needs NVML: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, strings.HasPrefix(name, "memtrack fakecuda")
}

// requireFake skips a test of the fake's switches on a real NVML.
func requireFake(t *testing.T, fake bool) {
	t.Helper()
	if !fake {
		t.Skip("needs the fake NVML of testdata/fakenvml and the fake driver")
	}
}

// requireFakeBeforeOpen skips, before NVML is opened, a test whose process
// sets the fake NVML's switches to make the open fail (FAKENVML_FAIL,
// FAKENVML_HIDE): a real NVML has none, and opens. The fake NVML comes
// with the fake driver (scripts/test-cuda.sh), whose devices say so by
// name.
func requireFakeBeforeOpen(t *testing.T) {
	t.Helper()
	if _, err := cudadrv.Load(); err != nil {
		t.Skip(err)
	}
	if n, r := cudadrv.Init(); r != cudadrv.Success || n == 0 {
		t.Skipf("needs a CUDA device: cuInit: %d, %d device(s)", r, n)
	}
	name, _, r := cudadrv.DeviceInfo(0)
	require.Equal(t, cudadrv.Success, r)
	if !strings.HasPrefix(name, "memtrack fakecuda") {
		t.Skip("needs the fake NVML of testdata/fakenvml and the fake driver: a real NVML has no switches to fail or hide its calls")
	}
}

// uuidOf returns CUDA device ordinal's UUID as NVML writes it.
func uuidOf(t *testing.T, ordinal int) string {
	_, u, r := cudadrv.DeviceInfo(ordinal)
	require.Equal(t, cudadrv.Success, r)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func find(ps []nvml.Process, pid int) (nvml.Process, bool) {
	for _, p := range ps {
		if p.PID == pid {
			return p, true
		}
	}
	return nvml.Process{}, false
}

// A process is listed from its first context on, with all its memory:
// the context's and what it allocates. The list is read afresh each time.
// In a process of its own, whose device has no context yet whatever ran
// before (other tests, -count).
func TestProcessListedFromItsContext(t *testing.T) {
	if !childtest.InChild(t, "MEMTRACK_NVML_CHILD") {
		return
	}
	l, fake := open(t)
	uuid := uuidOf(t, 0)
	ps, err := l.Processes(uuid)
	require.NoError(t, err)
	_, listed := find(ps, os.Getpid())
	require.False(t, listed, "no context yet: not listed (not 0 bytes)")

	ctx, r := cudadrv.Retain(0)
	require.Equal(t, cudadrv.Success, r)
	ps, err = l.Processes(uuid)
	require.NoError(t, err)
	self, listed := find(ps, os.Getpid())
	require.True(t, listed, "listed once it has a context: %+v", ps)
	require.True(t, self.UsedKnown)
	if fake {
		assert.Equal(t, uint64(fakeContextBytes), self.Used, "a context and nothing else")
		assert.Equal(t, os.Args[0], self.Name, "the executable, as NVML names it")
	}

	const n = 64 << 20
	p, c := cudadrv.Alloc(ctx, n)
	require.Equal(t, cudadrv.Call{}, c)
	ps, err = l.Processes(uuid)
	require.NoError(t, err)
	after, _ := find(ps, os.Getpid())
	assert.GreaterOrEqual(t, after.Used, self.Used+n, "usedGpuMemory is all the memory the process uses")
	require.Equal(t, cudadrv.Call{}, cudadrv.Free(ctx, p))
}

// Devices are NVML's by UUID: a device where the process has no context
// does not list it, and an unknown UUID is NVML_ERROR_NOT_FOUND.
func TestDevicesByUUID(t *testing.T) {
	l, _ := open(t)
	if n, _ := cudadrv.Init(); n > 1 {
		if _, r := cudadrv.Retain(0); r != cudadrv.Success {
			t.Fatalf("retain: %d", r)
		}
		ps, err := l.Processes(uuidOf(t, 1))
		require.NoError(t, err)
		_, listed := find(ps, os.Getpid())
		assert.False(t, listed, "a context on device 0 is not one on device 1")
	}
	_, err := l.Processes("GPU-00000000-0000-0000-0000-000000000000")
	var e *nvml.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "nvmlDeviceGetHandleByUUID", e.Op)
	assert.Equal(t, nvml.Return(6), e.Code, "NVML_ERROR_NOT_FOUND")
	assert.Contains(t, err.Error(), "Not Found")
}

// The handle of a UUID is looked up once; the list is read at every call
// (its length, then the list: two calls); one nvmlShutdown undoes the one
// nvmlInit_v2, however often Close is called, and a closed Lib answers
// NVML_ERROR_UNINITIALIZED. The fake NVML writes every call it gets to
// FAKENVML_TRACE.
func TestCallsMade(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace")
	if !childtest.InChild(t, "MEMTRACK_NVML_CHILD", "FAKENVML_TRACE="+trace, "MEMTRACK_NVML_TRACE="+trace) {
		return
	}
	l, fake := open(t)
	requireFake(t, fake)
	uuid := uuidOf(t, 0)
	_, r := cudadrv.Retain(0)
	require.Equal(t, cudadrv.Success, r)
	for range 2 {
		ps, err := l.Processes(uuid)
		require.NoError(t, err)
		self, listed := find(ps, os.Getpid())
		require.True(t, listed)
		assert.Equal(t, nvml.Process{PID: os.Getpid(), Name: os.Args[0], Used: fakeContextBytes, UsedKnown: true}, self)
	}
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
	_, err := l.Processes(uuid)
	var e *nvml.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, nvml.Return(1), e.Code, "NVML_ERROR_UNINITIALIZED")
	assert.Contains(t, err.Error(), "Uninitialized")

	b, err := os.ReadFile(os.Getenv("MEMTRACK_NVML_TRACE"))
	require.NoError(t, err)
	calls := map[string]int{}
	for _, c := range strings.Fields(string(b)) {
		calls[c]++
	}
	assert.Equal(t, map[string]int{
		"nvmlInitWithFlags":                       1,
		"nvmlDeviceGetHandleByUUID":               1,
		"nvmlDeviceGetComputeRunningProcesses_v3": 4,
		"nvmlSystemGetProcessName":                2,
		"nvmlShutdown":                            1,
	}, calls)
}

// usedGpuMemory of NVML_VALUE_NOT_AVAILABLE (Windows WDDM) is not a number
// of bytes: the process is listed, its figure unknown, and the error says so.
func TestValueNotAvailable(t *testing.T) {
	if !childtest.InChild(t, "MEMTRACK_NVML_CHILD", "FAKENVML_USED=na") {
		return
	}
	l, fake := open(t)
	requireFake(t, fake)
	_, r := cudadrv.Retain(0)
	require.Equal(t, cudadrv.Success, r)
	ps, err := l.Processes(uuidOf(t, 0))
	require.ErrorIs(t, err, nvml.ErrValueNotAvailable)
	self, listed := find(ps, os.Getpid())
	require.True(t, listed, "%+v", ps)
	assert.False(t, self.UsedKnown)
	assert.Equal(t, os.Args[0], self.Name)
}

// The errors of the list, each in a process whose fake NVML fails it once.
func TestListErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		code nvml.Return
		text string
	}{
		{"no permission, as a full-GPU handle in MIG mode", 4, "Insufficient Permissions"},
		{"not supported", 3, "Not Supported"},
		{"GPU lost", 15, "GPU is lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_NVML_CHILD", fmt.Sprintf("FAKENVML_FAIL=nvmlDeviceGetComputeRunningProcesses_v3:1:%d", tc.code)) {
				return
			}
			l, fake := open(t)
			requireFake(t, fake)
			uuid := uuidOf(t, 0)
			ps, err := l.Processes(uuid)
			assert.Nil(t, ps)
			var e *nvml.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, "nvmlDeviceGetComputeRunningProcesses_v3", e.Op)
			assert.Equal(t, tc.code, e.Code)
			assert.Contains(t, err.Error(), tc.text)
			_, err = l.Processes(uuid)
			assert.NoError(t, err, "the next reading asks again")
		})
	}
}

// A library lists processes through the newest call it has: _v3, _v2
// (the 470 driver's newest), or the unversioned one, each filling its own
// layout; an error of the list names the call used. A library with none of
// them is unavailable, naming the three. FAKENVML_HIDE takes calls away.
func TestProcessCalls(t *testing.T) {
	const v1, v2, v3 = "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3"
	for _, tc := range []struct {
		name string
		hide string
		call string // the call used, or "" for none
	}{
		{"all three", "", v3},
		{"no _v3, as the 470 driver", v3, v2},
		{"unversioned only", v3 + "," + v2, v1},
		{"no _v2", v2, v3},
		{"_v2 only", v3 + "," + v1, v2},
		{"none", v3 + "," + v2 + "," + v1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "trace")
			if !childtest.InChild(t, "MEMTRACK_NVML_CHILD", "FAKENVML_HIDE="+tc.hide,
				"FAKENVML_FAIL="+tc.call+":3:15", "FAKENVML_TRACE="+trace, "MEMTRACK_NVML_TRACE="+trace) {
				return
			}
			if tc.call == "" {
				requireFakeBeforeOpen(t)
				l, err := nvml.Open()
				if l != nil {
					l.Close()
				}
				require.ErrorIs(t, err, nvml.ErrUnavailable)
				assert.True(t, strings.HasSuffix(err.Error(), ": it has none of the calls that list processes: "+v3+", "+v2+", "+v1), err.Error())
				_, err2 := nvml.Open()
				assert.Equal(t, err, err2, "and so at every Open")
				return
			}
			l, fake := open(t)
			requireFake(t, fake)
			uuid := uuidOf(t, 0)
			_, r := cudadrv.Retain(0)
			require.Equal(t, cudadrv.Success, r)
			ps, err := l.Processes(uuid) // the length, then the list: the call's first two
			require.NoError(t, err)
			self, listed := find(ps, os.Getpid())
			require.True(t, listed, "%+v", ps)
			assert.Equal(t, nvml.Process{PID: os.Getpid(), Name: os.Args[0], Used: fakeContextBytes, UsedKnown: true}, self)
			_, err = l.Processes(uuid) // its third fails: NVML_ERROR_GPU_IS_LOST
			var e *nvml.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tc.call, e.Op)
			assert.Equal(t, nvml.Return(15), e.Code)
			assert.EqualError(t, err, tc.call+": GPU is lost (nvmlReturn_t 15)")

			b, err := os.ReadFile(os.Getenv("MEMTRACK_NVML_TRACE"))
			require.NoError(t, err)
			for _, c := range strings.Fields(string(b)) {
				if strings.HasPrefix(c, v1) {
					assert.Equal(t, tc.call, c, "no other process call is made")
				}
			}
		})
	}
}

// An NVML that does not initialise is unavailable, with the *Error of
// nvmlInit_v2 (whose fake enters as nvmlInitWithFlags).
func TestInitFails(t *testing.T) {
	for _, code := range []nvml.Return{9, 4, 999} { // DRIVER_NOT_LOADED, NO_PERMISSION, UNKNOWN
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_NVML_CHILD", fmt.Sprintf("FAKENVML_FAIL=nvmlInitWithFlags:1:%d", code)) {
				return
			}
			requireFakeBeforeOpen(t)
			l, err := nvml.Open()
			assert.Nil(t, l)
			require.ErrorIs(t, err, nvml.ErrUnavailable)
			var e *nvml.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, "nvmlInit_v2", e.Op)
			assert.Equal(t, code, e.Code)
			assert.NotErrorIs(t, err, nvml.ErrValueNotAvailable)
			l, err = nvml.Open()
			require.NoError(t, err, "the next Open initialises")
			require.NoError(t, l.Close())
		})
	}
}

// Without the library, Open says that NVML is unavailable and why, in the
// loader's words; the process runs on.
func TestOpenWithoutLibrary(t *testing.T) {
	dir := os.Getenv("FAKENVML_DIR")
	if dir == "" && os.Getenv("MEMTRACK_NVML_CHILD") == "" {
		t.Skip("set FAKENVML_DIR to the folder of the fake NVML (scripts/test-cuda.sh does)")
	}
	var path []string
	for _, p := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if p != dir {
			path = append(path, p)
		}
	}
	if !childtest.InChild(t, "MEMTRACK_NVML_CHILD", "LD_LIBRARY_PATH="+strings.Join(path, ":")) {
		return
	}
	l, err := nvml.Open()
	if err == nil {
		l.Close()
		t.Skip("NVML loads without the fake's folder: the machine has one of its own")
	}
	require.ErrorIs(t, err, nvml.ErrUnavailable)
	assert.Contains(t, err.Error(), "libnvidia-ml.so.1: cannot open shared object file")
	_, err = nvml.Open()
	require.ErrorIs(t, err, nvml.ErrUnavailable, "and so at every Open")
}
