//go:build rocm

package hipdrv_test

import (
	"os"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
	"github.com/stretchr/testify/require"
)

// The tests run on the fake runtime of testdata/fakehip, which
// scripts/test-rocm.sh builds into .cache/fakehip (ROCm 6.4's calls,
// libamdhip64.so.6) and .cache/fakehip-5.2 (ROCm 5.2's, libamdhip64.so.5),
// the first on LD_LIBRARY_PATH. The runtime reads its configuration once,
// and the package loads it once, so a test of a switch runs in a process
// of its own (childtest.InChild).

const childEnv = "MEMTRACK_HIPDRV_CHILD"

// fakeDirs returns the directories of the two builds of the fake runtime,
// or skips where the script did not say.
func fakeDirs(t *testing.T) (current, rocm52 string) {
	t.Helper()
	current, rocm52 = os.Getenv("MEMTRACK_FAKEHIP_DIR"), os.Getenv("MEMTRACK_FAKEHIP52_DIR")
	if current == "" || rocm52 == "" {
		t.Skip("needs the fake runtime's builds (MEMTRACK_FAKEHIP_DIR, MEMTRACK_FAKEHIP52_DIR: scripts/test-rocm.sh)")
	}
	return current, rocm52
}

// inChild runs t in a process of its own with the environment extra, the
// fake runtime of dir alone on the library path.
func inChild(t *testing.T, dir string, extra ...string) bool {
	t.Helper()
	return childtest.InChild(t, childEnv, append([]string{"LD_LIBRARY_PATH=" + dir}, extra...)...)
}

// requireFake loads the runtime, which must be the fake, initialises it
// and requires n devices at least; it skips on another runtime (a GPU's,
// which ignores the fake's switches).
func requireFake(t *testing.T, n int) {
	t.Helper()
	rt, err := hipdrv.Load()
	require.NoError(t, err)
	require.NoError(t, hiptest.Load())
	if _, fake := hiptest.RuntimeCalls("hipInit"); !fake {
		t.Skipf("needs the fake runtime of testdata/fakehip, not %v", rt)
	}
	in := hipdrv.Init()
	require.Equal(t, hipdrv.Success, in.Init, "hipInit")
	require.Equal(t, hipdrv.Success, in.Count, "hipGetDeviceCount")
	require.GreaterOrEqual(t, in.Devices, n)
}

// calls returns how many calls of the runtime's entry point name the
// process made so far; the fake counts them.
func calls(t *testing.T, name string) uint64 {
	t.Helper()
	n, ok := hiptest.RuntimeCalls(name)
	require.True(t, ok, "the fake runtime counts its calls")
	return n
}
