package rendertest

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/require"
)

// CUDA0 returns cuda:0 and its identity, as the driver the process loads
// reports them, and skips the test where there is no CUDA device. It
// requires the UUID in the form nvidia-smi and dcgm-exporter write it.
func CUDA0(t *testing.T) (memtrack.Device, memtrack.DeviceInfo) {
	t.Helper()
	d, err := memtrack.CUDA(0)
	if err != nil {
		t.Skipf("needs a CUDA device: %v", err)
	}
	info, err := d.Info()
	require.NoError(t, err)
	require.Regexp(t, `^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, info.UUID)
	return d, info
}
