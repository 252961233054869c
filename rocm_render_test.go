//go:build rocm

package memtrack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/otelmetric"
	"github.com/memtrack/memtrack/pprof"
	"github.com/memtrack/memtrack/prom"
	"github.com/memtrack/memtrack/trace"
	"github.com/memtrack/memtrack/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestROCmRenderings: every rendering of the figures works for an AMD GPU:
// they read the root package's values, whatever the device's kind. One
// buffer of 3 MiB, in a category, with its site and history recorded, is
// in the Prometheus metrics, the OpenTelemetry instruments, the pprof
// profile, the Chrome trace and the page's data, each naming rocm:0.
func TestROCmRenderings(t *testing.T) {
	d, err := memtrack.ROCm(0)
	if err != nil {
		t.Skipf("needs an AMD GPU: %v", err)
	}
	require.NoError(t, d.Sites().SetRate(1)) // every allocation, exactly
	t.Cleanup(func() { assert.NoError(t, d.Sites().SetRate(0)) })
	require.NoError(t, d.Sites().Enable(32))
	t.Cleanup(d.Sites().Disable)
	require.NoError(t, d.History().Enable(1024))
	t.Cleanup(d.History().Disable)
	c, err := d.Category("kv_cache")
	require.NoError(t, err)
	const size = 3 << 20
	tracked := d.MemoryAllocated()
	b, err := c.Alloc(size)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Free()) })

	t.Run("prom", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(prom.NewCollector()))
		mfs, err := reg.Gather()
		require.NoError(t, err)
		found := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["backend"] != "rocm" || labels["ordinal"] != "0" {
					continue
				}
				key := mf.GetName()
				if cat, ok := labels["category"]; ok {
					key += "{" + cat + "}"
				}
				found[key] = m.GetGauge().GetValue()
			}
		}
		assert.Equal(t, float64(tracked+size), found["memtrack_tracked_bytes"])
		assert.Equal(t, float64(size), found["memtrack_category_tracked_bytes{kv_cache}"], "%v", found)
		assert.Contains(t, found, "memtrack_process_used_bytes", "rocm_smi's figure")
	})

	t.Run("otelmetric", func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		reg, err := otelmetric.Register(mp)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, reg.Unregister()) })
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		var got []int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "memtrack.tracked" {
					continue
				}
				g, ok := m.Data.(metricdata.Sum[int64])
				require.True(t, ok, "%T", m.Data)
				for _, p := range g.DataPoints {
					backend, _ := p.Attributes.Value(otelmetric.BackendKey)
					ordinal, _ := p.Attributes.Value(otelmetric.OrdinalKey)
					if backend == attribute.StringValue("rocm") && ordinal.String() == "0" {
						got = append(got, p.Value)
					}
				}
			}
		}
		assert.Equal(t, []int64{tracked + size}, got)
	})

	t.Run("pprof", func(t *testing.T) {
		var buf bytes.Buffer
		require.NoError(t, pprof.WriteProfile(&buf, d, pprof.InUse))
		p, err := profile.Parse(&buf)
		require.NoError(t, err)
		var bytesIdx = -1
		for i, st := range p.SampleType {
			if st.Unit == "bytes" {
				bytesIdx = i
			}
		}
		require.GreaterOrEqual(t, bytesIdx, 0, "%v", p.SampleType)
		var sum int64
		for _, s := range p.Sample {
			if strings.Contains(strings.Join(s.Label["category"], ","), "kv_cache") {
				sum += s.Value[bytesIdx]
			}
		}
		assert.Equal(t, int64(size), sum, "%v", p)
		assert.Contains(t, p.Comments[0], "rocm:0")
	})

	t.Run("trace", func(t *testing.T) {
		h, err := d.History().Snapshot()
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, trace.Write(&buf, h))
		var f struct {
			TraceEvents []json.RawMessage `json:"traceEvents"`
		}
		require.NoError(t, json.Unmarshal(buf.Bytes(), &f), "%s", buf.String())
		assert.NotEmpty(t, f.TraceEvents)
		assert.Contains(t, buf.String(), "rocm:0")
	})

	t.Run("web", func(t *testing.T) {
		var dev *web.Device
		page := web.Read()
		for i := range page.Devices {
			if page.Devices[i].Name == "rocm:0" {
				dev = &page.Devices[i]
			}
		}
		require.NotNil(t, dev, "the page lists rocm:0")
		assert.Equal(t, tracked+size, dev.Tracked)
		assert.Positive(t, dev.Total)
		assert.True(t, dev.PerProcess, dev.PerProcessError)
		assert.GreaterOrEqual(t, dev.ProcessUsed, dev.Tracked)
	})
}
