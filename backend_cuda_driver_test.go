//go:build cuda

package memtrack

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The driver loaded at run time: a binary built with -tags cuda starts
// without it (and without NVML), even under LD_BIND_NOW=1, and works on
// the CPU (TestCUDAChildInitFailure), and a driver older than a call, or
// without it, turns off what needs the call. The driver is loaded once per
// process and the fake reads its switches once, so TestCUDADriverLoading
// runs each case in a process of its own (runChild).

func TestCUDADriverLoading(t *testing.T) {
	requireFake(t)
	systemDriver := ""
	for _, dir := range []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"} {
		if _, err := os.Stat(dir + "/libcuda.so.1"); err == nil {
			systemDriver = dir + "/libcuda.so.1"
		}
	}
	empty := t.TempDir() // a library path without the fake driver and NVML
	// Without the driver, the errors say so in the loader's words, and
	// where the loader looked.
	noDriver := "MEMTRACK_WANT_TEXT=backend unavailable|libcuda.so.1: cannot open shared object file: No such file or directory|LD_LIBRARY_PATH=\"" + empty + "\""
	for _, c := range []struct {
		child string
		env   []string
	}{
		{"TestCUDAChildInitFailure", []string{"LD_LIBRARY_PATH=" + empty, "MEMTRACK_WANT_CODE=0", noDriver}},
		{"TestCUDAChildInitFailure", []string{"LD_LIBRARY_PATH=" + empty, "MEMTRACK_WANT_CODE=0", noDriver, "LD_BIND_NOW=1"}},
		{"TestCUDAChildOldDriver", []string{"FAKECUDA_VERSION=11020"}},
		{"TestCUDAChildOldDriver", []string{"FAKECUDA_VERSION=11020", "LD_BIND_NOW=1"}},
		{"TestCUDAChildNoStreamOrdered", []string{"FAKECUDA_VERSION=11010", "MEMTRACK_WANT=cuMemAllocAsync of CUDA 11.2 (it needs a driver of CUDA 11.2 or later)"}},
		{"TestCUDAChildNoStreamOrdered", []string{"FAKECUDA_HIDE=cuMemFreeAsync", "MEMTRACK_WANT=cuMemFreeAsync of CUDA 11.2 (cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)"}},
		{"TestCUDAChildDriverUnusable", []string{"FAKECUDA_HIDE=cuMemGetInfo"}},
		{"TestCUDAChildNoGraphMemory", []string{"FAKECUDA_VERSION=11030", "MEMTRACK_WANT=cuDeviceGetGraphMemAttribute of CUDA 11.4"}},
		{"TestCUDAChildNoGraphMemory", []string{"FAKECUDA_HIDE=cuGraphUpload", "MEMTRACK_WANT=cuGraphUpload of CUDA 11.1"}},
		{"TestCUDAChildGraphChunk", []string{"FAKECUDA_GRAPH_CHUNK=4194304"}},
	} {
		t.Run(c.child+"/"+strings.Join(c.env, ","), func(t *testing.T) {
			if slices.Contains(c.env, noDriver) && systemDriver != "" {
				t.Skipf("this machine has %s", systemDriver)
			}
			runChild(t, c.child, c.env)
		})
	}
}

// TestCUDAChildOldDriver: a CUDA 11.2 driver has no cuGetProcAddress (11.3):
// its calls are found by their versioned names (dlsym), and everything
// works but the UUID (cuDeviceGetUuid_v2 is 11.4's): Info has the name
// only, and the per-process figures, which NVML finds by UUID, say why
// they are missing.
func TestCUDAChildOldDriver(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	b, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	s := newStream(t, d)
	a, err := d.AllocAsync(1<<20, s)
	require.NoError(t, err, "cuMemAllocAsync is 11.2's")
	require.NoError(t, a.FreeAsync(s))
	syncStream(t, d, s)
	assert.Zero(t, d.MemoryStats().Held)

	info, err := d.Info()
	require.NoError(t, err)
	assert.Equal(t, "memtrack fakecuda 0", info.Name)
	assert.Empty(t, info.UUID, "no cuDeviceGetUuid_v2 before CUDA 11.4")
	u, err := d.Usage()
	require.NoError(t, err)
	assert.False(t, u.PerProcess)
	require.ErrorIs(t, u.PerProcessErr, ErrPerProcessUnavailable)
	assert.ErrorContains(t, u.PerProcessErr, "cuDeviceGetUuid of CUDA 11.4")
}

// TestCUDAChildNoStreamOrdered: a driver without a call of stream-ordered
// allocation (older than CUDA 11.2, or without the call) refuses AllocAsync
// and the pool's calls with ErrNotSupported, naming the call and the
// driver (MEMTRACK_WANT), and counts nothing; Alloc and Free work.
func TestCUDAChildNoStreamOrdered(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	before := d.MemoryStats()
	_, err := d.AllocAsync(1<<20, DefaultStream)
	require.ErrorIs(t, err, ErrNotSupported)
	msg := err.Error()
	assert.Contains(t, msg, os.Getenv("MEMTRACK_WANT"))
	assert.Contains(t, msg, "the CUDA driver (CUDA ")
	assert.Contains(t, msg, "libcuda.so.1")
	assert.Equal(t, 1, strings.Count(msg, "memtrack: "), "one prefix: %s", msg)
	_, err = d.Pool().Stats()
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.ErrorIs(t, d.Pool().Trim(0), ErrNotSupported)
	assert.Equal(t, before, d.MemoryStats(), "nothing counted")

	b, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	d.ResetPeakMemoryStats() // the pool's highs are not reset: there is no pool to reset
	_, err = d.Usage()
	require.NoError(t, err)
}

// TestCUDAChildDriverUnusable: a driver without a call that every operation
// needs (FAKECUDA_HIDE=cuMemGetInfo) makes the backend unavailable, naming
// the call.
func TestCUDAChildDriverUnusable(t *testing.T) {
	child(t)
	_, err := CUDA(0)
	require.ErrorIs(t, err, ErrBackendUnavailable)
	assert.ErrorContains(t, err, "lacks calls that memtrack needs: cuMemGetInfo of CUDA 3.2 (cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)")
	assert.False(t, errors.Is(err, ErrNotSupported))
	b, err := CPU().Alloc(1 << 10)
	require.NoError(t, err)
	require.NoError(t, b.Free())
}
