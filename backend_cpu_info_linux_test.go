//go:build linux

package memtrack

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCPUInfoLinux checks CPU().Info against the first "model name" line of
// /proc/cpuinfo, found here by plain string search.
func TestCPUInfoLinux(t *testing.T) {
	data, err := os.ReadFile("/proc/cpuinfo")
	require.NoError(t, err)
	want := ""
	if _, rest, ok := strings.Cut(string(data), "model name"); ok {
		line, _, _ := strings.Cut(rest, "\n")
		_, want, _ = strings.Cut(line, ":")
		want = strings.TrimSpace(want)
	}
	if want == "" {
		t.Skip("this kernel's /proc/cpuinfo has no model name line")
	}
	info, err := CPU().Info()
	require.NoError(t, err)
	assert.Equal(t, DeviceInfo{Device: CPU(), Name: want}, info)
}
