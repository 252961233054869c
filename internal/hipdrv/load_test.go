//go:build rocm

package hipdrv_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The library names, in order: the newest major first, then the bare
// name; without any, each name's reason in the dynamic loader's words.
func TestLoadNames(t *testing.T) {
	current, rocm52 := fakeDirs(t)
	for _, tc := range []struct {
		name  string
		links map[string]string // name in the directory: the build it is
		want  string            // the name loaded, or "" for none
	}{
		{"both majors", map[string]string{"libamdhip64.so.6": current, "libamdhip64.so.5": rocm52}, "libamdhip64.so.6"},
		{"ROCm 5 only", map[string]string{"libamdhip64.so.5": rocm52}, "libamdhip64.so.5"},
		{"bare name only", map[string]string{"libamdhip64.so": current}, "libamdhip64.so"},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for link, build := range tc.links {
				target, err := filepath.Glob(filepath.Join(build, "libamdhip64.so.*"))
				require.NoError(t, err)
				require.Len(t, target, 1)
				require.NoError(t, os.Symlink(target[0], filepath.Join(dir, link)))
			}
			if !childLoad(t, dir) {
				return
			}
			rt, err := hipdrv.Load()
			if tc.want == "" {
				var le *hipdrv.LoadError
				require.ErrorAs(t, err, &le)
				require.Len(t, le.Tried, len(hipdrv.Libraries))
				for i, a := range le.Tried {
					assert.Equal(t, hipdrv.Libraries[i], a.Name)
					assert.Contains(t, a.Reason, a.Name+": cannot open shared object file")
				}
				assert.Contains(t, err.Error(), "the HIP runtime did not load")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, rt.Library)
			assert.Equal(t, tc.want, filepath.Base(rt.Path))
		})
	}
}

// childLoad runs the test in a child whose library path is dir alone.
func childLoad(t *testing.T, dir string) bool {
	t.Helper()
	return childtest.InChild(t, childEnv, "LD_LIBRARY_PATH="+dir)
}

// Each runtime is resolved the way its release allows: by
// hipGetProcAddress from ROCm 6.2, by dlsym before; a call the runtime
// lacks is missing, at the release the table gives, and turns off what
// needs it.
func TestLoadVersions(t *testing.T) {
	current, rocm52 := fakeDirs(t)
	for _, tc := range []struct {
		name     string
		dir      string
		env      []string
		version  int
		api      int
		resolver string
		note     string
		missing  map[string]string // call: what its error says
	}{
		{"ROCm 6.4", current, nil, 60443483, 604, "hipGetProcAddress", "", nil},
		{"ROCm 6.2", current, []string{"FAKEHIP_VERSION=60241134"}, 60241134, 602, "hipGetProcAddress", "", nil},
		{"ROCm 6.1 exporting hipGetProcAddress", current, []string{"FAKEHIP_VERSION=60140091"}, 60140091, 601, "dlsym",
			"the runtime exports hipGetProcAddress but reports HIP 6.1, before ROCm 6.2", nil},
		{"ROCm 5.2", rocm52, nil, 50221153, 502, "dlsym", "", map[string]string{
			"hipDeviceGetGraphMemAttribute": "has no hipDeviceGetGraphMemAttribute of ROCm 5.3 (dlsym: ",
			"hipStreamGetDevice":            "has no hipStreamGetDevice of ROCm 5.6 (dlsym: ",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, tc.dir, tc.env...) {
				return
			}
			requireFake(t, 1)
			rt, err := hipdrv.Load()
			require.NoError(t, err)
			assert.Equal(t, tc.version, rt.Version)
			assert.Equal(t, tc.api, rt.API())
			assert.Equal(t, tc.resolver, rt.Resolver)
			assert.Equal(t, tc.note, rt.ResolverNote)
			assert.Contains(t, rt.String(), fmt.Sprintf("HIP %d.%d.%d at ", tc.version/10000000, tc.version/100000%100, tc.version%100000))
			checks := map[string]func() error{
				"hipDeviceGetGraphMemAttribute": hipdrv.GraphMem,
				"hipStreamGetDevice":            hipdrv.StreamDevices,
			}
			for call, check := range checks {
				want, ok := tc.missing[call]
				if !ok {
					assert.NoError(t, check(), call)
					continue
				}
				var m *hipdrv.MissingError
				require.ErrorAs(t, check(), &m, call)
				assert.Equal(t, call, m.Call)
				assert.False(t, m.Essential)
				assert.Contains(t, m.Error(), want)
				assert.Contains(t, m.Error(), "undefined symbol: "+call)
			}
			assert.NoError(t, hipdrv.MemPools())
			assert.NoError(t, hipdrv.UUIDs())
			assert.NoError(t, hipdrv.Captures())
			for _, c := range hipdrv.Calls() {
				_, absent := tc.missing[c.Name]
				if c.Name == "hipDeviceSetGraphMemAttribute" || c.Name == "hipDeviceGraphMemTrim" {
					_, absent = tc.missing["hipDeviceGetGraphMemAttribute"]
				}
				assert.Equal(t, !absent, c.Found, c.Name)
			}
		})
	}
}

// A runtime without a call (FAKEHIP_HIDE, as a build without it): an
// optional one turns off what needs it, saying what hipGetProcAddress
// answered; an essential one makes the runtime unusable, naming it; and
// hipGetProcAddress asked at the release the table gives finds every call,
// even where it refuses a version below a call's first
// (FAKEHIP_PROC_VERSION=check).
func TestLoadHidden(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		name string
		env  []string
		call string // "" for none missing
		why  string
		load bool // Load fails
	}{
		{"optional", []string{"FAKEHIP_HIDE=hipMallocAsync"}, "hipMallocAsync",
			"hipMallocAsync of ROCm 5.2 (hipGetProcAddress answered hipErrorInvalidValue (1): HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)", false},
		{"uuid", []string{"FAKEHIP_HIDE=hipDeviceGetUuid"}, "hipDeviceGetUuid", "HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND", false},
		{"essential", []string{"FAKEHIP_HIDE=hipMalloc,hipEventQuery"}, "hipMalloc",
			"lacks calls that memtrack needs: hipMalloc of ROCm 4.1 (hipGetProcAddress answered hipErrorInvalidValue (1): HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND); hipEventQuery of ROCm 4.1", true},
		{"versions checked", []string{"FAKEHIP_PROC_VERSION=check"}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, current, tc.env...) {
				return
			}
			_, err := hipdrv.Load()
			if tc.load {
				var le *hipdrv.LoadError
				require.ErrorAs(t, err, &le)
				require.Len(t, le.Missing, 2)
				assert.Equal(t, tc.call, le.Missing[0].Call)
				assert.True(t, le.Missing[0].Essential)
				assert.Contains(t, err.Error(), tc.why)
				return
			}
			requireFake(t, 1)
			for _, c := range hipdrv.Calls() {
				assert.Equal(t, c.Name != tc.call, c.Found, c.Name)
			}
			switch tc.call {
			case "hipMallocAsync":
				var m *hipdrv.MissingError
				require.ErrorAs(t, hipdrv.MemPools(), &m)
				assert.Equal(t, 502, m.Version)
				assert.Contains(t, m.Error(), tc.why)
				a := hipdrv.AllocAsync(0, 1<<20, 0)
				assert.Equal(t, hipdrv.NotSupported, a.Op, "without hipMallocAsync")
			case "hipDeviceGetUuid":
				assert.ErrorContains(t, hipdrv.UUIDs(), tc.why)
				info, r := hipdrv.DeviceInfo(0)
				require.Equal(t, hipdrv.Success, r)
				assert.False(t, info.HasUUID)
				assert.Zero(t, info.UUID)
				assert.Equal(t, "0000:c1:00.0", info.PCIBusID, "the PCI bus ID identifies the device")
			}
		})
	}
}

// A machine without an AMD GPU (FAKEHIP_DEVICES=0): hipGetProcAddress
// initialises the runtime, so it fails as hipInit does and the calls are
// found by dlsym, saying why; hipInit and hipGetDeviceCount each answer in
// their own words (hipErrorInvalidDevice and hipErrorNoDevice, as AMD's
// runtime does; FAKEHIP_NOGPU_INIT offers the other readings).
func TestLoadNoGPU(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		reading     string
		init, count hipdrv.Result
		device      hipdrv.Result // what a device call answers
		note        string
	}{
		{"invalid-device", hipdrv.InvalidDevice, hipdrv.NoDevice, hipdrv.InvalidDevice, "hipGetProcAddress answered hipErrorInvalidDevice (101)"},
		{"no-device", hipdrv.NoDevice, hipdrv.NoDevice, hipdrv.NoDevice, "hipGetProcAddress answered hipErrorNoDevice (100)"},
		{"success", hipdrv.Success, hipdrv.NoDevice, hipdrv.InvalidDevice, "hipGetProcAddress answered hipErrorInvalidDevice (101)"},
	} {
		t.Run(tc.reading, func(t *testing.T) {
			if !inChild(t, current, "FAKEHIP_DEVICES=0", "FAKEHIP_NOGPU_INIT="+tc.reading) {
				return
			}
			rt, err := hipdrv.Load()
			require.NoError(t, err, "dlsym needs no device")
			assert.Equal(t, "dlsym", rt.Resolver)
			assert.Equal(t, tc.note, rt.ResolverNote)
			in := hipdrv.Init()
			assert.Equal(t, hipdrv.Initialized{Init: tc.init, Count: tc.count}, in)
			name, _ := hipdrv.ErrorName(in.Count)
			assert.Equal(t, "hipErrorNoDevice", name)
			_, _, c := hipdrv.MemInfo(0)
			assert.Equal(t, hipdrv.Call{Enter: tc.device}, c, "every device call fails, from its first step")
		})
	}
}

// A runtime whose every call fails (FAKEHIP_ERROR): it loads, of unknown
// version (hipRuntimeGetVersion failed), its calls found by dlsym; hipInit
// and hipGetDeviceCount say what fails.
func TestLoadEveryCallFails(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, "FAKEHIP_ERROR=999") {
		return
	}
	rt, err := hipdrv.Load()
	require.NoError(t, err)
	assert.Zero(t, rt.Version)
	assert.Zero(t, rt.API())
	assert.Equal(t, "dlsym", rt.Resolver)
	assert.Contains(t, rt.String(), "HIP of unknown version at ")
	assert.Equal(t, hipdrv.Initialized{Init: 999, Count: 999}, hipdrv.Init())
}
