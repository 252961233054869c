package prom

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/rendertest"
)

// fixedUsage is a device's Usage with the driver's per-process figures.
func fixedUsage(d memtrack.Device) (memtrack.Usage, error) {
	return memtrack.Usage{Device: d, Tracked: 2048, Total: 4000, Free: 1000, Used: 3000, Untracked: 952,
		PerProcess: true, ProcessUsed: 2500, ProcessUntracked: 452, OtherProcessesUsed: 500,
		OtherProcesses: []memtrack.ProcessMemory{{PID: 7, Name: "other", Used: 500}}}, nil
}

func TestCollectorProcesses(t *testing.T) {
	rendertest.SetCPU(t, 0)
	usage := fixedUsage
	c := of(NewCollector(), func(r *reading) { r.usage, r.usageErr = usage(r.dev) }, memtrack.CPU())
	names := []string{"memtrack_process_used_bytes", "memtrack_process_untracked_bytes", "memtrack_other_processes_used_bytes"}
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP memtrack_other_processes_used_bytes The other processes' device memory as the driver accounts it (NVML, on CUDA GPUs); absent where the driver gives no per-process figures.
# TYPE memtrack_other_processes_used_bytes gauge
memtrack_other_processes_used_bytes{backend="cpu",ordinal="0"} 500
# HELP memtrack_process_untracked_bytes memtrack_process_used_bytes - memtrack_tracked_bytes: this process's context, libraries and memory allocated without memtrack; absent where the driver gives no per-process figures.
# TYPE memtrack_process_untracked_bytes gauge
memtrack_process_untracked_bytes{backend="cpu",ordinal="0"} 452
# HELP memtrack_process_used_bytes This process's device memory as the driver accounts it (NVML, on CUDA GPUs), its context included; absent where the driver gives no per-process figures.
# TYPE memtrack_process_used_bytes gauge
memtrack_process_used_bytes{backend="cpu",ordinal="0"} 2500
`), names...))

	// Without the figures (NVML unavailable, the CPU), the metrics are absent.
	usage = func(d memtrack.Device) (memtrack.Usage, error) {
		return memtrack.Usage{Device: d, PerProcessErr: memtrack.ErrPerProcessUnavailable}, nil
	}
	assert.Zero(t, testutil.CollectAndCount(c, names...))
	usage = func(d memtrack.Device) (memtrack.Usage, error) { return memtrack.Usage{}, errors.New("no device") }
	assert.Zero(t, testutil.CollectAndCount(c, names...))
	usage = memtrack.Device.Usage // the CPU has no per-process figures
	assert.Zero(t, testutil.CollectAndCount(c, names...))
}
