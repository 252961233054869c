//go:build cuda

package prom

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCollectorCUDAInfo scrapes memtrack_device_info of cuda:0 from the
// driver the process loads (the fake of testdata/fakecuda under
// scripts/test-cuda.sh): its uuid label is the GPU's UUID, in the form
// dcgm-exporter's UUID label has. It runs in a process of its own, since
// using cuda:0 adds it to the used devices that other tests list.
func TestCollectorCUDAInfo(t *testing.T) {
	if os.Getenv("MEMTRACK_PROM_CHILD") != t.Name() {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
		gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
		cmd.Env = append(os.Environ(), "MEMTRACK_PROM_CHILD="+t.Name(), "GORACE="+gorace)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child output:\n%s", out)
		if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
			t.Skipf("child skipped:\n%s", out)
		}
		assert.Contains(t, string(out), "--- PASS: "+t.Name(), "child output:\n%s", out)
		return
	}
	d, err := memtrack.CUDA(0)
	if err != nil {
		t.Skipf("needs a CUDA device: %v", err)
	}
	info, err := d.Info()
	require.NoError(t, err)
	require.Regexp(t, `^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, info.UUID)

	c := NewCollector()
	c.devices = func() []memtrack.Device { return []memtrack.Device{d} }
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	want := expect(`backend="cuda",name="`+esc.Replace(info.Name)+`",ordinal="0",uuid="`+info.UUID+`"`, infoText)
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "memtrack_device_info"))
}
