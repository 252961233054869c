//go:build rocm

package hipdrv_test

import (
	"errors"
	"os"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AMD's own runtime (Debian's libamdhip64, which scripts/rocm-dev.sh
// unpacks; MEMTRACK_ROCM_REAL_LIBS is its library path): it loads, each
// call of the table is found where the runtime's release is at or after
// the one the table gives, and missing, in the dynamic loader's words,
// where it is before; and on a machine without an AMD GPU, hipInit and
// hipGetDeviceCount say so in the runtime's own words, which the test
// prints.
func TestRealRuntime(t *testing.T) {
	libs := os.Getenv("MEMTRACK_ROCM_REAL_LIBS")
	if libs == "" {
		t.Skip("needs AMD's libraries (MEMTRACK_ROCM_REAL_LIBS: scripts/rocm-dev.sh)")
	}
	if !childtest.InChild(t, childEnv, "LD_LIBRARY_PATH="+libs) {
		return
	}
	rt, err := hipdrv.Load()
	require.NoError(t, err)
	_, fake := hiptest.RuntimeCalls("hipInit")
	require.False(t, fake, "AMD's runtime, not the fake")
	t.Logf("loaded %v as %s, calls found by %s %s", rt, rt.Library, rt.Resolver, rt.ResolverNote)
	api := rt.API()
	require.NotZero(t, api, "hipRuntimeGetVersion answered")
	missing := map[string]bool{}
	for _, c := range hipdrv.Calls() {
		assert.Equal(t, c.Version <= api, c.Found, "%s of ROCm %d.%d in a runtime of %d.%d", c.Name, c.Version/100, c.Version%100, api/100, api%100)
		if !c.Found {
			missing[c.Name] = true
			t.Logf("missing, as the table says: %s of ROCm %d.%d", c.Name, c.Version/100, c.Version%100)
		}
	}
	for _, check := range []struct {
		feature string
		err     error
		call    string
	}{
		{"pools", hipdrv.MemPools(), "hipMallocAsync"},
		{"UUIDs", hipdrv.UUIDs(), "hipDeviceGetUuid"},
		{"capture IDs", hipdrv.Captures(), "hipStreamGetCaptureInfo"},
		{"graph memory", hipdrv.GraphMem(), "hipDeviceGetGraphMemAttribute"},
		{"stream devices", hipdrv.StreamDevices(), "hipStreamGetDevice"},
	} {
		if !missing[check.call] {
			assert.NoError(t, check.err, check.feature)
			continue
		}
		var m *hipdrv.MissingError
		require.True(t, errors.As(check.err, &m), "%s: %v", check.feature, check.err)
		assert.Contains(t, m.Why, "undefined symbol: "+check.call)
		t.Logf("%s off: %v", check.feature, m)
	}
	in := hipdrv.Init()
	for _, step := range []struct {
		call string
		r    hipdrv.Result
	}{{"hipInit", in.Init}, {"hipGetDeviceCount", in.Count}} {
		name, text := hipdrv.ErrorName(step.r)
		t.Logf("%s answered %d: %s: %s", step.call, int(step.r), name, text)
	}
	if _, err := os.Stat("/dev/kfd"); err == nil {
		t.Logf("this machine has /dev/kfd: %d device(s)", in.Devices)
		return
	}
	assert.Equal(t, hipdrv.Initialized{Init: hipdrv.InvalidDevice, Count: hipdrv.NoDevice}, in, "AMD's runtime on a machine without an AMD GPU")
	_, _, c := hipdrv.MemInfo(0)
	assert.Equal(t, hipdrv.Call{Enter: hipdrv.InvalidDevice}, c)
}
