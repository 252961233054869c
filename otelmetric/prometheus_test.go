package otelmetric

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/prom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// scrape serves reg over HTTP as a program would (promhttp), GETs it and
// parses the text, so that what is checked is what Prometheus reads.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// exporter returns a registry fed by the OpenTelemetry Prometheus exporter
// over a provider on which the instruments observe what source returns.
func exporter(t *testing.T, source func() []reading) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { assert.NoError(t, mp.Shutdown(context.Background())) })
	r, err := observing(source)(mp)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.Unregister()) })
	return reg
}

// series is one sample as Prometheus reads it, without the exporter's
// otel_scope_* labels.
type series struct {
	typ    dto.MetricType
	labels string // name="value",... sorted
	value  float64
}

func seriesOf(t *testing.T, families map[string]*dto.MetricFamily) map[string][]series {
	t.Helper()
	out := map[string][]series{}
	for name, f := range families {
		if name == "target_info" {
			continue
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				if l.GetName() == "otel_scope_name" {
					assert.Equal(t, ScopeName, l.GetValue(), name)
				}
				if !strings.HasPrefix(l.GetName(), "otel_scope_") {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			slices.Sort(labels)
			v := m.GetGauge().GetValue()
			if f.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			out[name] = append(out[name], series{f.GetType(), strings.Join(labels, ","), v})
		}
	}
	return out
}

// TestPrometheusExporter scrapes the instruments through the OpenTelemetry
// Prometheus exporter: every name, type, label and value as Prometheus
// reads them, written out, and promlint reports nothing.
func TestPrometheusExporter(t *testing.T) {
	families := scrape(t, exporter(t, func() []reading { return []reading{fakeGPU()} }))

	problems, err := promlint.NewWithMetricFamilies(slices.Collect(maps.Values(families))).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)

	const (
		own = "hw_id=" + gpuUUID + ",memtrack_backend=cuda,memtrack_ordinal=1"
		kv  = "hw_id=" + gpuUUID + ",memtrack_backend=cuda,memtrack_category=kv_cache,memtrack_ordinal=1"
		un  = "hw_id=" + gpuUUID + ",memtrack_backend=cuda,memtrack_category=uncategorised,memtrack_ordinal=1"
		wt  = "hw_id=" + gpuUUID + ",memtrack_backend=cuda,memtrack_category=weights,memtrack_ordinal=1"
		hw  = "hw_id=" + gpuUUID + ",hw_model=NVIDIA H100 80GB HBM3,hw_name=cuda:1,hw_type=gpu,hw_vendor=NVIDIA"
		G   = dto.MetricType_GAUGE
		C   = dto.MetricType_COUNTER
	)
	want := map[string][]series{
		"memtrack_tracked_bytes":                {{G, own, 1 << 20}},
		"memtrack_peak_tracked_bytes":           {{G, own, 3 << 20}},
		"memtrack_held_bytes":                   {{G, own, 2 << 20}},
		"memtrack_peak_held_bytes":              {{G, own, 4 << 20}},
		"memtrack_address_space_bytes":          {{G, own, 0}},
		"memtrack_reservations":                 {{G, own, 0}},
		"memtrack_limit_bytes":                  {{G, own, 64 << 20}},
		"memtrack_process_used_bytes":           {{G, own, 600 << 20}},
		"memtrack_process_untracked_bytes":      {{G, own, 599 << 20}},
		"memtrack_other_processes_used_bytes":   {{G, own, 19 << 30}},
		"memtrack_pool_reserved_bytes":          {{G, own, 32 << 20}},
		"memtrack_peak_pool_reserved_bytes":     {{G, own, 48 << 20}},
		"memtrack_pool_used_bytes":              {{G, own, 16 << 20}},
		"memtrack_peak_pool_used_bytes":         {{G, own, 24 << 20}},
		"memtrack_graph_reserved_bytes":         {{G, own, 12 << 20}},
		"memtrack_peak_graph_reserved_bytes":    {{G, own, 14 << 20}},
		"memtrack_graph_used_bytes":             {{G, own, 10 << 20}},
		"memtrack_peak_graph_used_bytes":        {{G, own, 13 << 20}},
		"memtrack_buffers":                      {{G, own, 2}},
		"memtrack_peak_buffers":                 {{G, own, 5}},
		"memtrack_allocs_total":                 {{C, own, 11}},
		"memtrack_alloc_bytes_total":            {{C, own, 7 << 20}},
		"memtrack_failed_allocs_total":          {{C, own, 3}},
		"memtrack_leaks_total":                  {{C, own, 13}},
		"memtrack_leaked_bytes_total":           {{C, own, 5 << 20}},
		"memtrack_frees_total":                  {{C, own, 9}},
		"memtrack_freed_bytes_total":            {{C, own, 6 << 20}},
		"memtrack_category_tracked_bytes":       {{G, kv, 1 << 19}, {G, un, 1 << 18}, {G, wt, 1 << 18}},
		"memtrack_category_peak_tracked_bytes":  {{G, kv, 1 << 21}, {G, wt, 1 << 20}},
		"memtrack_category_buffers":             {{G, kv, 1}, {G, un, 0}, {G, wt, 1}},
		"memtrack_category_peak_buffers":        {{G, kv, 3}, {G, wt, 1}},
		"memtrack_category_alloc_bytes_total":   {{C, kv, 5 << 19}, {C, un, 3 << 18}, {C, wt, 1 << 18}},
		"memtrack_category_freed_bytes_total":   {{C, kv, 4 << 19}, {C, un, 2 << 18}, {C, wt, 0}},
		"memtrack_category_allocs_total":        {{C, kv, 7}, {C, un, 3}, {C, wt, 1}},
		"memtrack_category_frees_total":         {{C, kv, 6}, {C, un, 3}, {C, wt, 0}},
		"memtrack_category_failed_allocs_total": {{C, kv, 2}, {C, un, 1}, {C, wt, 0}},
		"memtrack_category_limit_bytes":         {{G, kv, 32 << 20}},
		"hw_gpu_memory_usage_bytes":             {{G, hw, 20 << 30}},
		"hw_gpu_memory_limit_bytes":             {{G, hw, 80 << 30}},
		"hw_gpu_memory_utilization_ratio":       {{G, hw, 0.25}},
	}
	assert.Equal(t, want, seriesOf(t, families))
	assert.Contains(t, families, "target_info", "the exporter's resource")
}

// TestPrometheusNamesAsCollector checks that OpenTelemetry's Prometheus
// exporter serves memtrack's instruments under package prom's names: every
// metric the collector describes (but the info metric, whose labels are
// attributes here, and the device figures of a GPU, which are hw.gpu ones)
// is served for a CPU and a GPU, and nothing else under memtrack_; a
// counter is a counter in both.
func TestPrometheusNamesAsCollector(t *testing.T) {
	families := scrape(t, exporter(t, func() []reading { return []reading{fakeCPU(), fakeGPU()} }))
	var otel []string
	for name, f := range families {
		if strings.HasPrefix(name, "memtrack_") {
			otel = append(otel, name)
			assert.Equal(t, strings.HasSuffix(name, "_total"), f.GetType() == dto.MetricType_COUNTER, "%s is %v", name, f.GetType())
		}
	}
	ch := make(chan *prometheus.Desc)
	go func() { prom.NewCollector().Describe(ch); close(ch) }()
	var collector []string
	for d := range ch {
		name := strings.SplitN(strings.TrimPrefix(d.String(), `Desc{fqName: "`), `"`, 2)[0]
		require.True(t, strings.HasPrefix(name, "memtrack_"), "read the name of %v", d)
		if name != "memtrack_device_info" {
			collector = append(collector, name)
		}
	}
	slices.Sort(otel)
	slices.Sort(collector)
	assert.Equal(t, collector, otel)
}

// TestDocsTable checks the table of docs/integrations.md against the
// instruments and the exporter: each instrument has one row, with its kind
// and unit, and the Prometheus name in the row is the one the exporter
// serves.
func TestDocsTable(t *testing.T) {
	src, err := os.ReadFile("../docs/integrations.md")
	require.NoError(t, err)
	families := scrape(t, exporter(t, func() []reading { return []reading{fakeCPU(), fakeGPU()} }))
	rows := map[string][]string{}
	for _, line := range strings.Split(string(src), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 7 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[2]), "`")
		if strings.HasPrefix(name, "memtrack.") || strings.HasPrefix(name, "hw.") {
			assert.NotContains(t, rows, name, "two rows for %s", name)
			rows[name] = cells
		}
	}
	for _, in := range instruments {
		cells, ok := rows[in.name]
		if !assert.True(t, ok, "docs/integrations.md has no row for %s", in.name) {
			continue
		}
		assert.Equal(t, in.kind.String(), strings.TrimSpace(cells[3]), in.name)
		assert.Equal(t, "`"+in.unit+"`", strings.TrimSpace(cells[4]), in.name)
		promName := strings.Trim(strings.TrimSpace(cells[5]), "`")
		assert.Contains(t, families, promName, "%s: the exporter serves no %s", in.name, promName)
		delete(rows, in.name)
	}
	assert.Empty(t, rows, "rows for instruments that do not exist")
}
