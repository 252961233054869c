//go:build cuda

package prom

import (
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
// dcgm-exporter's UUID label has.
func TestCollectorCUDAInfo(t *testing.T) {
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
