//go:build cuda

package nvml_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mumax/3/cuda/cu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/nvml"
)

// These tests run against the libnvidia-ml.so.1 the process loads: the fake
// of testdata/fakenvml under scripts/test-cuda.sh, or a GPU's. They check
// the rules of doc.go.

const fakeContextBytes = 3 << 20

func TestMain(m *testing.M) {
	for k, v := range map[string]string{"FAKECUDA_DEVICES": "2", "FAKECUDA_CONTEXT_BYTES": fmt.Sprint(fakeContextBytes)} {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}

// open initialises the CUDA driver and NVML, or skips the test.
func open(t *testing.T) (*nvml.Lib, bool) {
	t.Helper()
	var name string
	if r := recovered(func() { cu.Init(0); name = cu.DeviceGet(0).Name() }); r != nil {
		t.Skipf("needs a CUDA device: %v", r)
	}
	if _, err := cudadrv.Load(); err != nil {
		t.Skipf("needs the CUDA driver: %v", err)
	}
	l, err := nvml.Open()
	if err != nil {
		t.Skipf("needs NVML: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, strings.HasPrefix(name, "memtrack fakecuda")
}

func recovered(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
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
func TestProcessListedFromItsContext(t *testing.T) {
	if os.Getenv("MEMTRACK_NVML_CHILD") != t.Name() {
		// In a process of its own, whose device has no context yet
		// whatever ran before (other tests, -count).
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "MEMTRACK_NVML_CHILD="+t.Name(), "GORACE=atexit_sleep_ms=0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
			t.Skipf("%s", out)
		}
		assert.Contains(t, string(out), "--- PASS: "+t.Name(), "%s", out)
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
	if n := cu.DeviceGetCount(); n > 1 {
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
	assert.Contains(t, err.Error(), "Not Found")
}

// Without the library, Open says that NVML is unavailable and why, in the
// loader's words; the process runs on.
func TestOpenWithoutLibrary(t *testing.T) {
	if os.Getenv("MEMTRACK_NVML_ABSENT") == "1" {
		l, err := nvml.Open()
		if err == nil {
			l.Close()
			t.Skip("NVML loads without the fake's folder: the machine has one of its own")
		}
		require.ErrorIs(t, err, nvml.ErrUnavailable)
		assert.Contains(t, err.Error(), "libnvidia-ml.so.1: cannot open shared object file")
		return
	}
	dir := os.Getenv("FAKENVML_DIR")
	if dir == "" {
		t.Skip("set FAKENVML_DIR to the folder of the fake NVML (scripts/test-cuda.sh does)")
	}
	var path []string
	for _, p := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if p != dir {
			path = append(path, p)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenWithoutLibrary$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "MEMTRACK_NVML_ABSENT=1", "LD_LIBRARY_PATH="+strings.Join(path, ":"), "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "SKIP") {
		t.Skipf("the machine has an NVML of its own: %s", out)
	}
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--- PASS: TestOpenWithoutLibrary")
}
