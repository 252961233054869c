//go:build cuda

package otelmetric

import (
	"context"
	"testing"

	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestRegisterDuringCapture collects cuda:0's instruments while the program
// captures a CUDA graph in global mode: the collection succeeds and the
// program's capture ends with its graph (rendertest.DuringCapture). It
// runs in a process of its own, since using cuda:0 adds it to the used
// devices that the other tests read.
func TestRegisterDuringCapture(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_OTEL_CHILD") {
		return
	}
	d, _ := rendertest.CUDA0(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { assert.NoError(t, mp.Shutdown(context.Background())) })
	reg, err := Register(mp)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Unregister()) })
	rendertest.DuringCapture(t, d, []rendertest.Rendering{{Name: "collect", Render: func() error {
		var rm metricdata.ResourceMetrics
		return reader.Collect(context.Background(), &rm)
	}}})
}
