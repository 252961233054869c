//go:build cuda

package otelmetric

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
)

// TestInstrumentsCUDA reads cuda:0 through Register from the driver the
// process loads (the fake of testdata/fakecuda under scripts/test-cuda.sh):
// the hw.gpu.memory figures are the driver's, with the GPU's UUID as hw.id
// and its name as hw.model, and memtrack's own figures carry the same
// hw.id. It runs in a process of its own, since using cuda:0 adds it to
// the used devices that the other tests and the example read; there it is
// the only used device, so that every point collected is cuda:0's.
func TestInstrumentsCUDA(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_OTEL_CHILD") {
		return
	}
	d, info := rendertest.CUDA0(t)
	buf, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	defer buf.Free()

	require.Equal(t, []memtrack.Device{d}, memtrack.UsedDevices(), "the child uses cuda:0 alone")

	got := collect(t, registered())
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	s := d.MemoryStats()
	require.Equal(t, int64(1<<20), s.Tracked)

	own := attribute.NewSet(attribute.String("memtrack.backend", "cuda"), attribute.Int("memtrack.ordinal", 0),
		attribute.String("hw.id", info.UUID))
	hw := attribute.NewSet(attribute.String("hw.id", info.UUID), attribute.String("hw.type", "gpu"),
		attribute.String("hw.name", "cuda:0"), attribute.String("hw.model", info.Name),
		attribute.String("hw.vendor", "NVIDIA"))
	want := wantOwn(s, own)
	want["hw.gpu.memory.usage"] = point{"By", "UpDownCounter", hw, float64(total - free)}
	want["hw.gpu.memory.limit"] = point{"By", "UpDownCounter", hw, float64(total)}
	want["hw.gpu.memory.utilization"] = point{"1", "Gauge", hw, float64(total-free) / float64(total)}
	if p, err := d.Pool().Stats(); err == nil {
		want["memtrack.pool_reserved"] = point{"By", "UpDownCounter", own, float64(p.PoolReserved)}
		want["memtrack.peak_pool_reserved"] = point{"By", "Gauge", own, float64(p.PeakPoolReserved)}
		want["memtrack.pool_used"] = point{"By", "UpDownCounter", own, float64(p.PoolUsed)}
		want["memtrack.peak_pool_used"] = point{"By", "Gauge", own, float64(p.PeakPoolUsed)}
	}
	if g, err := d.Graphs().Stats(); err == nil {
		want["memtrack.graph_reserved"] = point{"By", "UpDownCounter", own, float64(g.GraphReserved)}
		want["memtrack.peak_graph_reserved"] = point{"By", "Gauge", own, float64(g.PeakGraphReserved)}
		want["memtrack.graph_used"] = point{"By", "UpDownCounter", own, float64(g.GraphUsed)}
		want["memtrack.peak_graph_used"] = point{"By", "Gauge", own, float64(g.PeakGraphUsed)}
	}
	if u, err := d.Usage(); err == nil && u.PerProcess { // NVML's figures, where the machine has them
		want["memtrack.process_used"] = point{"By", "UpDownCounter", own, float64(u.ProcessUsed)}
		want["memtrack.process_untracked"] = point{"By", "UpDownCounter", own, float64(u.ProcessUntracked)}
		want["memtrack.other_processes_used"] = point{"By", "UpDownCounter", own, float64(u.OtherProcessesUsed)}
	}
	assert.Equal(t, merge(want), got)
}
