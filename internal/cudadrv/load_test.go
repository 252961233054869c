//go:build cuda

package cudadrv_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Loading the driver, on the fake driver configured as an older one
// (FAKECUDA_VERSION), one without some calls (FAKECUDA_HIDE), the link
// stub, or none: the driver reads its configuration once, and the package
// loads it once, so each case runs in a process of its own (childtest.InChild).

// requireFakeDriver skips a test of the fake's switches where the driver
// loaded is not the fake (a GPU's, which ignores them).
func requireFakeDriver(t *testing.T) {
	t.Helper()
	if _, err := cudadrv.Load(); err != nil {
		t.Skip(err)
	}
	if n, r := cudadrv.Init(); r != cudadrv.Success || n == 0 {
		t.Skipf("cuInit: %d, %d device(s)", r, n)
	}
	name, _, r := cudadrv.DeviceInfo(0)
	require.Equal(t, cudadrv.Success, r)
	if !strings.HasPrefix(name, "memtrack fakecuda") {
		t.Skip("needs the fake driver of testdata/fakecuda (scripts/test-cuda.sh)")
	}
}

// allocFree checks that the driver's memory calls work: Alloc and Free,
// and AllocAsync and FreeAsync where the driver has them (async).
func allocFree(t *testing.T, async bool) {
	t.Helper()
	ctx, r := cudadrv.Retain(0)
	require.Equal(t, cudadrv.Success, r)
	p, c := cudadrv.Alloc(ctx, 1<<20)
	require.Equal(t, cudadrv.Call{}, c)
	require.Equal(t, cudadrv.Call{}, cudadrv.Free(ctx, p))
	a := cudadrv.AllocAsync(ctx, 1<<20, 0)
	if !async {
		assert.Equal(t, cudadrv.NotSupported, a.Op, "without cuMemAllocAsync")
		assert.Equal(t, cudadrv.NotSupported, cudadrv.FreeAsync(ctx, 0, 0, cudadrv.Event{}).Op, "without cuMemFreeAsync")
		_, r := cudadrv.MemPool(0)
		assert.Equal(t, cudadrv.NotSupported, r, "without cuDeviceGetMemPool")
		return
	}
	require.Equal(t, cudadrv.Call{}, a.Call)
	f := cudadrv.FreeAsync(ctx, a.Ptr, 0, cudadrv.Event{})
	require.Equal(t, cudadrv.Call{}, f.Call)
	if !f.Event.IsZero() {
		cudadrv.EventDestroy(f.Event)
	}
}

// Each driver version is loaded the way that version allows: by
// cuGetProcAddress_v2 from CUDA 12.0, by cuGetProcAddress from 11.3, by
// dlsym of the versioned names before; a call newer than the driver is
// missing, and turns off what needs it; one that memtrack cannot do
// without makes the driver unusable.
func TestLoadVersions(t *testing.T) {
	for _, tc := range []struct {
		version  int
		resolver string
		pools    string // what MemPools's error says, or "" for none
		uuids    string // what UUIDs's error says, or "" for none
		load     string // what Load's error says, or "" for none
	}{
		{12080, "cuGetProcAddress_v2", "", "", ""},
		{12000, "cuGetProcAddress_v2", "", "", ""},
		{11080, "cuGetProcAddress", "", "", ""},
		{11030, "cuGetProcAddress", "", "has no cuDeviceGetUuid of CUDA 11.4 (it needs a driver of CUDA 11.4 or later)", ""},
		{11020, "dlsym", "", "cuDeviceGetUuid", ""},
		{11010, "dlsym", "the CUDA driver (CUDA 11.1 at ", "cuDeviceGetUuid", ""},
		{10000, "dlsym", "", "", "lacks calls that memtrack needs: cuThreadExchangeStreamCaptureMode of CUDA 10.1 (it needs a driver of CUDA 10.1 or later)"},
	} {
		t.Run(fmt.Sprint(tc.version), func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", fmt.Sprintf("FAKECUDA_VERSION=%d", tc.version)) {
				return
			}
			d, err := cudadrv.Load()
			if tc.load != "" {
				if err == nil {
					requireFakeDriver(t) // a GPU's driver ignores FAKECUDA_VERSION
				}
				var le *cudadrv.LoadError
				require.ErrorAs(t, err, &le)
				assert.Contains(t, err.Error(), tc.load)
				require.NotEmpty(t, le.Missing)
				assert.Equal(t, "cuThreadExchangeStreamCaptureMode", le.Missing[0].Call)
				return
			}
			requireFakeDriver(t)
			require.NoError(t, err)
			assert.Equal(t, tc.version, d.Version)
			assert.Equal(t, tc.resolver, d.Resolver)
			assert.Contains(t, d.Path, "libcuda.so.1")
			if tc.pools == "" {
				assert.NoError(t, cudadrv.MemPools())
			} else {
				var m *cudadrv.MissingError
				require.ErrorAs(t, cudadrv.MemPools(), &m)
				assert.Equal(t, "cuMemAllocAsync", m.Call)
				assert.Equal(t, 11020, m.Version)
				assert.Contains(t, m.Error(), tc.pools)
				assert.Contains(t, m.Error(), "has no cuMemAllocAsync of CUDA 11.2 (it needs a driver of CUDA 11.2 or later)")
			}
			if tc.uuids == "" {
				assert.NoError(t, cudadrv.UUIDs())
			} else {
				assert.ErrorContains(t, cudadrv.UUIDs(), tc.uuids)
				name, uuid, r := cudadrv.DeviceInfo(0)
				assert.Equal(t, cudadrv.Success, r)
				assert.Equal(t, "memtrack fakecuda 0", name, "the name without the UUID")
				assert.Zero(t, uuid)
			}
			allocFree(t, tc.pools == "")
		})
	}
}

// A driver without a call (FAKECUDA_HIDE): an optional one turns off what
// needs it, saying what cuGetProcAddress answered; an essential one makes
// the driver unusable, naming it.
func TestLoadHidden(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		call string
		why  string
		load bool // Load fails
	}{
		{"optional", []string{"FAKECUDA_HIDE=cuMemAllocAsync"}, "cuMemAllocAsync", "cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND", false},
		{"optional, CUDA 11.8", []string{"FAKECUDA_HIDE=cuMemPoolTrimTo", "FAKECUDA_VERSION=11080"}, "cuMemPoolTrimTo", "cuGetProcAddress answered CUDA_ERROR_NOT_FOUND (500)", false},
		{"essential", []string{"FAKECUDA_HIDE=cuMemAlloc,cuEventQuery"}, "cuMemAlloc", "cuMemAlloc of CUDA 3.2 (cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", tc.env...) {
				return
			}
			_, err := cudadrv.Load()
			if tc.load {
				if err == nil {
					requireFakeDriver(t) // a GPU's driver ignores FAKECUDA_HIDE
				}
				var le *cudadrv.LoadError
				require.ErrorAs(t, err, &le)
				require.Len(t, le.Missing, 2)
				assert.Equal(t, tc.call, le.Missing[0].Call)
				assert.Equal(t, "cuEventQuery", le.Missing[1].Call)
				assert.Contains(t, err.Error(), tc.why)
				_, err2 := cudadrv.Load()
				assert.Equal(t, err, err2, "the first Load's answer, at every call")
				return
			}
			requireFakeDriver(t)
			require.NoError(t, err)
			var m *cudadrv.MissingError
			require.ErrorAs(t, cudadrv.MemPools(), &m)
			assert.Equal(t, tc.call, m.Call)
			assert.Contains(t, m.Error(), tc.why)
			// The call hidden answers CUDA_ERROR_NOT_SUPPORTED; the others work.
			ctx, r := cudadrv.Retain(0)
			require.Equal(t, cudadrv.Success, r)
			pool, r := cudadrv.MemPool(0)
			require.Equal(t, cudadrv.Success, r)
			a := cudadrv.AllocAsync(ctx, 1<<20, 0)
			if tc.call == "cuMemAllocAsync" {
				assert.Equal(t, cudadrv.NotSupported, a.Op)
				assert.Equal(t, cudadrv.Success, cudadrv.PoolTrimTo(pool, 0))
				return
			}
			require.Equal(t, cudadrv.Call{}, a.Call)
			f := cudadrv.FreeAsync(ctx, a.Ptr, 0, cudadrv.Event{})
			require.Equal(t, cudadrv.Call{}, f.Call)
			cudadrv.EventDestroy(f.Event)
			assert.Equal(t, cudadrv.NotSupported, cudadrv.PoolTrimTo(pool, 0))
		})
	}
}

// On a driver older than CUDA 11.4, or one without a graph memory call,
// graph memory is off and says why (GraphMem), what needs the missing
// calls answers CUDA_ERROR_NOT_SUPPORTED, and a capture makes no
// allocation node; before CUDA 11.3 the capture check falls back to
// cuStreamIsCapturing, which gives no ID.
func TestGraphMemMissing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		call  string // what GraphMem names
		why   string
		nodes bool // a capture makes allocation nodes
		id    bool // the capture check gives the ID
	}{
		{"CUDA 11.3", []string{"FAKECUDA_VERSION=11030"}, "cuDeviceGetGraphMemAttribute",
			"cuDeviceGetGraphMemAttribute of CUDA 11.4 (it needs a driver of CUDA 11.4 or later)", false, true},
		{"CUDA 11.2", []string{"FAKECUDA_VERSION=11020"}, "cuStreamGetCaptureInfo",
			"cuStreamGetCaptureInfo of CUDA 11.3 (it needs a driver of CUDA 11.3 or later)", false, false},
		{"no trim", []string{"FAKECUDA_HIDE=cuDeviceGraphMemTrim"}, "cuDeviceGraphMemTrim",
			"cuDeviceGraphMemTrim of CUDA 11.4 (cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)", true, true},
		{"no upload", []string{"FAKECUDA_HIDE=cuGraphUpload"}, "cuGraphUpload",
			"cuGraphUpload of CUDA 11.1 (cuGetProcAddress_v2: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", tc.env...) {
				return
			}
			requireFakeDriver(t)
			ctx := primary(t, 0)
			var m *cudadrv.MissingError
			require.ErrorAs(t, cudadrv.GraphMem(), &m)
			assert.Equal(t, tc.call, m.Call)
			assert.Contains(t, m.Error(), tc.why)
			switch tc.call {
			case "cuDeviceGraphMemTrim":
				assert.Equal(t, cudadrv.NotSupported, cudadrv.GraphTrim(ctx).Op)
				_, c := cudadrv.GraphGet(ctx)
				assert.Equal(t, cudadrv.Call{}, c, "the figures are there")
			case "cuGraphUpload":
				p, c := cudadrv.GraphChunk(ctx)
				assert.Equal(t, cudadrv.NotSupported, c.Op, "the chunk's probe graph is uploaded")
				assert.False(t, p.Ran)
				_, c = cudadrv.GraphGet(ctx)
				assert.Equal(t, cudadrv.Call{}, c, "the figures are there")
			default:
				_, c := cudadrv.GraphGet(ctx)
				assert.Equal(t, cudadrv.NotSupported, c.Op)
				assert.Equal(t, cudadrv.NotSupported, cudadrv.GraphResetHighs(ctx).Op)
			}
			s := newStream(t, ctx)
			onThread(t, ctx, func() {
				require.Equal(t, cudadrv.Success, cudatest.BeginCapture(s, cudatest.CaptureRelaxed))
				a := cudadrv.AllocAsync(ctx, mib, s)
				assert.True(t, a.Capturing, "AllocAsync sees the capture")
				assert.Equal(t, tc.id, a.CaptureID != 0, "and its ID where the driver has cuStreamGetCaptureInfo_v2")
				c, call := cudadrv.CaptureInfo(ctx, s)
				assert.Equal(t, cudadrv.Call{}, call)
				assert.Equal(t, cudadrv.CaptureOngoing, c.Status)
				assert.Equal(t, a.CaptureID, c.ID)
				p, r := cudatest.AllocAsync(uintptr(ctx), mib, s)
				if tc.nodes {
					assert.Equal(t, cudadrv.Success, r)
					assert.Equal(t, cudadrv.Success, cudatest.FreeAsync(uintptr(ctx), p, s, 0))
				} else {
					assert.Equal(t, cudadrv.NotSupported, r, "no graph memory nodes before CUDA 11.4")
				}
				g, r := cudatest.EndCaptureGraph(s)
				require.Equal(t, cudadrv.Success, r)
				n, r := cudatest.GraphNodes(g)
				require.Equal(t, cudadrv.Success, r)
				assert.Equal(t, map[bool]int{true: 2, false: 0}[tc.nodes], n)
				assert.Equal(t, cudadrv.Success, cudatest.GraphDestroy(g))
			})
		})
	}
}

// Without the driver's library the process runs on, and Load says which
// library did not load, where the loader looked and what it said.
func TestLoadWithoutLibrary(t *testing.T) {
	for _, dir := range []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"} {
		if _, err := os.Stat(dir + "/libcuda.so.1"); err == nil {
			t.Skipf("this machine has %s/libcuda.so.1", dir)
		}
	}
	empty := t.TempDir()
	if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", "LD_LIBRARY_PATH="+empty) {
		return
	}
	_, err := cudadrv.Load()
	var le *cudadrv.LoadError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "libcuda.so.1", le.Library)
	assert.Contains(t, le.Reason, "libcuda.so.1: cannot open shared object file")
	assert.Contains(t, err.Error(), "LD_LIBRARY_PATH=\""+os.Getenv("LD_LIBRARY_PATH")+"\"")
	_, err2 := cudadrv.Load()
	assert.Equal(t, err, err2)
}

// The toolkit's link stub as libcuda.so.1 (MEMTRACK_CUDA_STUB_DIR, which
// scripts/test-cuda.sh sets): it loads and has every call, but answers
// every call, cuDriverGetVersion too, with CUDA_ERROR_STUB_LIBRARY (34):
// the calls are found by dlsym, and cuInit says what is wrong.
func TestLoadStub(t *testing.T) {
	stub := os.Getenv("MEMTRACK_CUDA_STUB_DIR")
	if stub == "" {
		t.Skip("set MEMTRACK_CUDA_STUB_DIR to a folder with the link stub as libcuda.so.1")
	}
	if !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", "LD_LIBRARY_PATH="+stub) {
		return
	}
	d, err := cudadrv.Load()
	require.NoError(t, err)
	assert.Equal(t, "dlsym", d.Resolver)
	assert.Zero(t, d.Version)
	_, r := cudadrv.Init()
	assert.Equal(t, cudadrv.Result(34), r)
	assert.Equal(t, "CUDA_ERROR_STUB_LIBRARY", cudadrv.Name(r))
}

// Every call of the driver table resolves at the CUDA version memtrack asks
// where the driver is of that version or later, and is missing where it is
// older, as newer than the driver: on whatever driver the process loads,
// with no cuInit (no GPU needed). Each call added to driver.h is checked
// with the others. scripts/test-nvidia-libs.sh runs it on NVIDIA's own
// libraries (535 and 470); here the fake, as it is and at those drivers'
// CUDA versions (FAKECUDA_VERSION). With -v it prints the table.
func TestTableAtDriverVersion(t *testing.T) {
	for _, version := range []int{0, 12020, 11040, 11020} {
		t.Run(fmt.Sprint(version), func(t *testing.T) {
			if version != 0 && !childtest.InChild(t, "MEMTRACK_CUDADRV_CHILD", fmt.Sprintf("FAKECUDA_VERSION=%d", version)) {
				return
			}
			d, err := cudadrv.Load()
			table := cudadrv.Table()
			if d.Path == "" {
				t.Skip(err)
			}
			if d.Version == 0 {
				t.Skipf("the driver at %s does not say its version (the link stub?)", d.Path)
			}
			if version != 0 && d.Version != version {
				t.Skipf("FAKECUDA_VERSION=%d is the fake driver's; the driver at %s is of CUDA %v", version, d.Path, d.Version)
			}
			require.NotEmpty(t, table)
			var out strings.Builder
			fmt.Fprintf(&out, "%v, calls resolved by %s:\n", d, d.Resolver)
			essentialMissing := false
			cuda := func(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
			for _, e := range table {
				asked := cuda(e.Version)
				status := "resolved"
				if e.Missing != nil {
					status = "unavailable: " + e.Missing.Why
					essentialMissing = essentialMissing || e.Essential
				}
				fmt.Fprintf(&out, "  %-36s CUDA %-5s %-9s %s\n", e.Name+e.Suffix, asked, map[bool]string{true: "essential", false: "optional"}[e.Essential], status)
				if e.Version <= d.Version {
					assert.Nil(t, e.Missing, "%s of CUDA %s: a driver of CUDA %s must have it", e.Name, asked, cuda(d.Version))
					continue
				}
				if assert.NotNil(t, e.Missing, "%s of CUDA %s: a driver of CUDA %s is older", e.Name, asked, cuda(d.Version)) {
					assert.Equal(t, "it needs a driver of CUDA "+asked+" or later", e.Missing.Why, e.Name)
					assert.Equal(t, e.Name, e.Missing.Call)
					assert.Equal(t, e.Version, e.Missing.Version)
				}
			}
			if essentialMissing {
				var le *cudadrv.LoadError
				assert.ErrorAs(t, err, &le, "an essential call is missing")
			} else {
				assert.NoError(t, err)
			}
			t.Log("\n" + out.String())
		})
	}
}
