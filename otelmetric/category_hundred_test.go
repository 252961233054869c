package otelmetric

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestInstrumentsHundredCategories collects a device with 100 categories
// while goroutines allocate and free in them: every collection has each
// category's points, 9 a category without a limit and 7 for the
// uncategorised row, and once they stop, each category's tracked bytes
// are its own.
func TestInstrumentsHundredCategories(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_OTEL_CHILD") {
		return
	}
	const n = 100
	cpu := memtrack.CPU()
	cats := rendertest.Categories(t, cpu, n)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { assert.NoError(t, mp.Shutdown(context.Background())) })
	reg, err := Register(mp)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Unregister()) })

	stop := rendertest.Churn(t, cats, 4, 0)
	defer stop()
	for range 5 {
		var points int
		for name, ps := range read1(t, reader) {
			if strings.HasPrefix(name, "memtrack.category_") {
				points += len(ps)
			}
		}
		assert.Equal(t, 9*n+7, points)
	}
	stop()
	got := map[string]float64{}
	for _, p := range read1(t, reader)["memtrack.category_tracked"] {
		name, ok := p.attrs.Value(CategoryKey)
		require.True(t, ok)
		got[name.AsString()] = p.value
	}
	require.Len(t, got, n+1)
	for i := range n {
		assert.Equal(t, float64(int64(i+1)<<10), got[fmt.Sprintf("layer%03d", i)])
	}
	assert.Equal(t, 0.0, got[memtrack.Uncategorised])
}
