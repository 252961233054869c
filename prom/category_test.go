package prom

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedCategories is a device's category rows with every figure set, one
// category with a limit.
func fixedCategories(d memtrack.Device) []memtrack.CategoryStats {
	return []memtrack.CategoryStats{
		{Device: d, Category: "kv_cache", Tracked: 10, PeakTracked: 20, Buffers: 1, PeakBuffers: 2, AllocBytes: 30, FreedBytes: 20, Allocs: 3, Frees: 2, FailedAllocs: 1, Limit: 100},
		{Device: d, Category: memtrack.Uncategorised, Tracked: 5, Buffers: 1, AllocBytes: 5, Allocs: 1},
	}
}

var categoryNames = []string{
	"memtrack_category_tracked_bytes", "memtrack_category_peak_tracked_bytes", "memtrack_category_buffers",
	"memtrack_category_peak_buffers", "memtrack_category_alloc_bytes_total", "memtrack_category_freed_bytes_total",
	"memtrack_category_allocs_total", "memtrack_category_frees_total", "memtrack_category_failed_allocs_total",
	"memtrack_category_limit_bytes",
}

const categoryText = `
# HELP memtrack_category_tracked_bytes Bytes memtrack tracks in the category on the device (category uncategorised: outside every category).
# TYPE memtrack_category_tracked_bytes gauge
memtrack_category_tracked_bytes{backend="cpu",category="kv_cache",ordinal="0"} 10
memtrack_category_tracked_bytes{backend="cpu",category="uncategorised",ordinal="0"} 5
# HELP memtrack_category_peak_tracked_bytes High-water mark of memtrack_category_tracked_bytes since the last peak reset; absent for uncategorised.
# TYPE memtrack_category_peak_tracked_bytes gauge
memtrack_category_peak_tracked_bytes{backend="cpu",category="kv_cache",ordinal="0"} 20
# HELP memtrack_category_buffers Live buffers and tracked handles in the category on the device.
# TYPE memtrack_category_buffers gauge
memtrack_category_buffers{backend="cpu",category="kv_cache",ordinal="0"} 1
memtrack_category_buffers{backend="cpu",category="uncategorised",ordinal="0"} 1
# HELP memtrack_category_failed_allocs_total Requests in the category refused by a memory limit or failed in the backend since the last reset of the cumulative figures.
# TYPE memtrack_category_failed_allocs_total counter
memtrack_category_failed_allocs_total{backend="cpu",category="kv_cache",ordinal="0"} 1
memtrack_category_failed_allocs_total{backend="cpu",category="uncategorised",ordinal="0"} 0
# HELP memtrack_category_limit_bytes Memory limit on memtrack_category_tracked_bytes; absent where none is set.
# TYPE memtrack_category_limit_bytes gauge
memtrack_category_limit_bytes{backend="cpu",category="kv_cache",ordinal="0"} 100
`

// TestCategoryMetrics renders a device's category rows: each carries the
// label category, the row "uncategorised" has no peak, and the limit is
// sent only where one is set.
func TestCategoryMetrics(t *testing.T) {
	c := of(NewCollector(), func(r *reading) { r.cats = fixedCategories(r.dev) }, memtrack.CPU())
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(categoryText),
		"memtrack_category_tracked_bytes", "memtrack_category_peak_tracked_bytes", "memtrack_category_buffers",
		"memtrack_category_failed_allocs_total", "memtrack_category_limit_bytes"))
	assert.Equal(t, 10+7, testutil.CollectAndCount(c, categoryNames...), "the category's 10 figures; the uncategorised row's 7, without peaks or limit")
}

// TestCategoryMetricsHundred scrapes a device with 100 categories while
// goroutines allocate and free in them: every scrape has each category's
// series, 9 a category without a limit and 7 for the uncategorised row,
// and once they stop, each category's tracked bytes are its own.
func TestCategoryMetricsHundred(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_PROM_CHILD") {
		return
	}
	const n = 100
	cpu := memtrack.CPU()
	cats := rendertest.Categories(t, cpu, n)
	c := of(NewCollector(), nil, cpu)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	stop := rendertest.Churn(t, cats, 4, 0)
	defer stop()
	for range 20 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var series int
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), "memtrack_category_") {
				series += len(mf.GetMetric())
			}
		}
		assert.Equal(t, 9*n+7, series)
	}
	stop()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "memtrack_category_tracked_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "category" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	require.Len(t, got, n+1)
	for i := range n {
		assert.Equal(t, float64(int64(i+1)<<10), got[fmt.Sprintf("layer%03d", i)])
	}
	assert.Equal(t, 0.0, got[memtrack.Uncategorised])
}
