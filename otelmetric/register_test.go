package otelmetric

import (
	"context"
	"errors"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// point is one observation as a reader collected it: the instrument's unit
// and kind (read back from the data's type), the attributes and the value.
type point struct {
	unit  string
	kind  string
	attrs attribute.Set
	value float64
}

// collect registers the instruments with register on a provider with a
// manual reader, collects once, and returns the points by instrument name.
func collect(t *testing.T, register func(metric.MeterProvider) (metric.Registration, error)) map[string][]point {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { assert.NoError(t, mp.Shutdown(context.Background())) })
	reg, err := register(mp)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Unregister()) })
	return read1(t, reader)
}

// registered registers the instruments with Register, as a program does.
func registered(opts ...Option) func(metric.MeterProvider) (metric.Registration, error) {
	return func(mp metric.MeterProvider) (metric.Registration, error) { return Register(mp, opts...) }
}

// observing registers the instruments as Register makes them
// (newCollection), with a callback of the test's own that observes what
// source returns, where Register's observes what it reads of the used
// devices.
func observing(source func() []reading, opts ...Option) func(metric.MeterProvider) (metric.Registration, error) {
	return func(mp metric.MeterProvider) (metric.Registration, error) {
		c, err := newCollection(mp, opts)
		if err != nil {
			return nil, err
		}
		return c.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			c.observe(o, source())
			return nil
		}, c.obs...)
	}
}

// read1 collects from reader once.
func read1(t *testing.T, reader *sdkmetric.ManualReader) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, ScopeName, sm.Scope.Name)
		assert.Equal(t, "https://opentelemetry.io/schemas/1.43.0", sm.Scope.SchemaURL)
		for _, m := range sm.Metrics {
			add := func(kind string, attrs attribute.Set, v float64) {
				got[m.Name] = append(got[m.Name], point{unit: m.Unit, kind: kind, attrs: attrs, value: v})
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				assert.Equal(t, metricdata.CumulativeTemporality, d.Temporality, m.Name)
				kind := "UpDownCounter"
				if d.IsMonotonic {
					kind = "Counter"
				}
				for _, p := range d.DataPoints {
					add(kind, p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add("Gauge", p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					add("Gauge", p.Attributes, p.Value)
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	for _, ps := range got {
		sort.Slice(ps, func(i, j int) bool {
			return ps[i].attrs.Encoded(attribute.DefaultEncoder()) < ps[j].attrs.Encoded(attribute.DefaultEncoder())
		})
	}
	return got
}

// wantOwn returns what memtrack's own instruments report for one device with
// statistics s and attributes attrs, written out figure by figure from the
// table in doc.go. The limit is left out where none is set.
func wantOwn(s memtrack.Stats, attrs attribute.Set) map[string]point {
	p := func(unit, kind string, v int64) point { return point{unit, kind, attrs, float64(v)} }
	want := map[string]point{
		"memtrack.tracked":       p("By", "UpDownCounter", s.Tracked),
		"memtrack.peak_tracked":  p("By", "Gauge", s.PeakTracked),
		"memtrack.held":          p("By", "UpDownCounter", s.Held),
		"memtrack.peak_held":     p("By", "Gauge", s.PeakHeld),
		"memtrack.buffers":       p("{buffer}", "UpDownCounter", s.Buffers),
		"memtrack.peak_buffers":  p("{buffer}", "Gauge", s.PeakBuffers),
		"memtrack.allocs":        p("{allocation}", "Counter", s.Allocs),
		"memtrack.alloc_bytes":   p("By", "Counter", s.AllocBytes),
		"memtrack.failed_allocs": p("{allocation}", "Counter", s.FailedAllocs),
		"memtrack.leaks":         p("{buffer}", "Counter", s.Leaks),
		"memtrack.leaked_bytes":  p("By", "Counter", s.LeakedBytes),
		"memtrack.frees":         p("{free}", "Counter", s.Frees),
		"memtrack.freed_bytes":   p("By", "Counter", s.FreedBytes),
		"memtrack.address_space": p("By", "UpDownCounter", s.AddressSpace),
		"memtrack.reservations":  p("{reservation}", "UpDownCounter", s.Reservations),
	}
	if s.Limit > 0 {
		want["memtrack.limit"] = p("By", "UpDownCounter", s.Limit)
	}
	return want
}

// wantCategories returns what the category instruments report for a
// device's category rows, whose device attributes are own, written out
// figure by figure from the table in doc.go: one point per row, with
// memtrack.category; no peaks for the uncategorised row, no limit where
// none is set.
func wantCategories(rows []memtrack.CategoryStats, own attribute.Set) map[string][]point {
	want := map[string][]point{}
	for _, r := range rows {
		attrs := attribute.NewSet(append(own.ToSlice(), attribute.String("memtrack.category", r.Category))...)
		add := func(name, unit, kind string, v int64) {
			want[name] = append(want[name], point{unit, kind, attrs, float64(v)})
		}
		add("memtrack.category_tracked", "By", "UpDownCounter", r.Tracked)
		add("memtrack.category_buffers", "{buffer}", "UpDownCounter", r.Buffers)
		add("memtrack.category_alloc_bytes", "By", "Counter", r.AllocBytes)
		add("memtrack.category_freed_bytes", "By", "Counter", r.FreedBytes)
		add("memtrack.category_allocs", "{allocation}", "Counter", r.Allocs)
		add("memtrack.category_frees", "{free}", "Counter", r.Frees)
		add("memtrack.category_failed_allocs", "{allocation}", "Counter", r.FailedAllocs)
		if r.Category != memtrack.Uncategorised {
			add("memtrack.category_peak_tracked", "By", "Gauge", r.PeakTracked)
			add("memtrack.category_peak_buffers", "{buffer}", "Gauge", r.PeakBuffers)
		}
		if r.Limit > 0 {
			add("memtrack.category_limit", "By", "UpDownCounter", r.Limit)
		}
	}
	return withRows(map[string][]point{}, want) // sorted as read1 sorts
}

// withRows returns want with the points of rows added.
func withRows(want map[string][]point, rows map[string][]point) map[string][]point {
	for name, ps := range rows {
		want[name] = append(want[name], ps...)
	}
	for _, ps := range want {
		sort.Slice(ps, func(i, j int) bool {
			return ps[i].attrs.Encoded(attribute.DefaultEncoder()) < ps[j].attrs.Encoded(attribute.DefaultEncoder())
		})
	}
	return want
}

// merge adds the points of each device into one map by name.
func merge(devs ...map[string]point) map[string][]point {
	out := map[string][]point{}
	for _, d := range devs {
		for name, p := range d {
			out[name] = append(out[name], p)
		}
	}
	for _, ps := range out {
		sort.Slice(ps, func(i, j int) bool {
			return ps[i].attrs.Encoded(attribute.DefaultEncoder()) < ps[j].attrs.Encoded(attribute.DefaultEncoder())
		})
	}
	return out
}

// gpuAttrs are the attributes of the fake GPU: those of memtrack's own
// instruments, and those of the hardware conventions'.
var (
	gpuOwn = attribute.NewSet(
		attribute.String("memtrack.backend", "cuda"), attribute.Int("memtrack.ordinal", 1),
		attribute.String("hw.id", gpuUUID))
	gpuHW = attribute.NewSet(
		attribute.String("hw.id", gpuUUID), attribute.String("hw.type", "gpu"),
		attribute.String("hw.name", "cuda:1"), attribute.String("hw.model", "NVIDIA H100 80GB HBM3"),
		attribute.String("hw.vendor", "NVIDIA"))
	cpuOwn = attribute.NewSet(attribute.String("memtrack.backend", "cpu"), attribute.Int("memtrack.ordinal", 0))
)

// wantGPU is what the fake GPU reports, written out.
func wantGPU() map[string]point {
	want := wantOwn(fakeGPU().stats, gpuOwn)
	want["memtrack.pool_reserved"] = point{"By", "UpDownCounter", gpuOwn, 32 << 20}
	want["memtrack.peak_pool_reserved"] = point{"By", "Gauge", gpuOwn, 48 << 20}
	want["memtrack.pool_used"] = point{"By", "UpDownCounter", gpuOwn, 16 << 20}
	want["memtrack.peak_pool_used"] = point{"By", "Gauge", gpuOwn, 24 << 20}
	want["memtrack.graph_reserved"] = point{"By", "UpDownCounter", gpuOwn, 12 << 20}
	want["memtrack.peak_graph_reserved"] = point{"By", "Gauge", gpuOwn, 14 << 20}
	want["memtrack.graph_used"] = point{"By", "UpDownCounter", gpuOwn, 10 << 20}
	want["memtrack.peak_graph_used"] = point{"By", "Gauge", gpuOwn, 13 << 20}
	want["memtrack.process_used"] = point{"By", "UpDownCounter", gpuOwn, 600 << 20}
	want["memtrack.process_untracked"] = point{"By", "UpDownCounter", gpuOwn, 599 << 20}
	want["memtrack.other_processes_used"] = point{"By", "UpDownCounter", gpuOwn, 19 << 30}
	want["hw.gpu.memory.usage"] = point{"By", "UpDownCounter", gpuHW, 20 << 30}
	want["hw.gpu.memory.limit"] = point{"By", "UpDownCounter", gpuHW, 80 << 30}
	want["hw.gpu.memory.utilization"] = point{"1", "Gauge", gpuHW, 0.25}
	return want
}

// wantCPU is what the fake CPU reports, written out.
func wantCPU() map[string]point {
	want := wantOwn(fakeCPU().stats, cpuOwn)
	want["memtrack.device_free"] = point{"By", "UpDownCounter", cpuOwn, 3 << 30}
	want["memtrack.device_total"] = point{"By", "UpDownCounter", cpuOwn, 4 << 30}
	return want
}

// without returns want less the instruments named.
func without(want map[string]point, names ...string) map[string]point {
	for _, n := range names {
		delete(want, n)
	}
	return want
}

func TestInstruments(t *testing.T) {
	gpuNoInfo := fakeGPU()
	gpuNoInfo.infoErr = errors.New("no identity")
	noInfoOwn := attribute.NewSet(attribute.String("memtrack.backend", "cuda"), attribute.Int("memtrack.ordinal", 1))
	wantNoInfo := wantGPU()
	for name := range wantNoInfo {
		if p := wantNoInfo[name]; p.attrs.Equals(&gpuHW) {
			delete(wantNoInfo, name) // hw.id is required there
		} else {
			p.attrs = noInfoOwn
			wantNoInfo[name] = p
		}
	}
	noInfoRows := wantCategories(gpuNoInfo.cats, noInfoOwn)
	gpuNoCats := fakeGPU()
	gpuNoCats.cats = nil
	gpuRows := wantCategories(fakeGPU().cats, gpuOwn)
	gpuNoMem := fakeGPU()
	gpuNoMem.memErr = errors.New("no memory figures")
	wantNoMem := without(wantGPU(), "hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.gpu.memory.utilization")
	cpuNoMem := fakeCPU()
	cpuNoMem.memErr = errors.New("no memory figures")
	wantCPUNoMem := without(wantCPU(), "memtrack.device_free", "memtrack.device_total")

	for _, tc := range []struct {
		name string
		devs []reading
		want map[string][]point
	}{
		{"none", nil, map[string][]point{}},
		{"gpu", []reading{fakeGPU()}, withRows(merge(wantGPU()), gpuRows)},
		{"gpu without categories", []reading{gpuNoCats}, merge(wantGPU())},
		{"cpu", []reading{fakeCPU()}, merge(wantCPU())},
		{"cpu and gpu", []reading{fakeCPU(), fakeGPU()}, withRows(merge(wantCPU(), wantGPU()), gpuRows)},
		{"gpu without identity", []reading{gpuNoInfo}, withRows(merge(wantNoInfo), noInfoRows)},
		{"gpu without memory figures", []reading{gpuNoMem}, withRows(merge(wantNoMem), gpuRows)},
		{"cpu without memory figures", []reading{cpuNoMem}, merge(wantCPUNoMem)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := collect(t, observing(func() []reading { return tc.devs }))
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestInstrumentsCPU checks every instrument against the CPU's own
// Stats and MemGetInfo, read through Register as a program would.
func TestInstrumentsCPU(t *testing.T) {
	rendertest.SetCPU(t, 1<<30)
	got := collect(t, registered())
	cpu := memtrack.CPU()
	s := cpu.MemoryStats()
	require.Equal(t, int64(2048), s.Tracked, "setCPU left one buffer of 2 KiB")
	require.Equal(t, int64(1), s.FailedAllocs)

	_, total, err := cpu.MemGetInfo()
	require.NoError(t, err)
	free := got["memtrack.device_free"] // the OS's figure moves between reads
	require.Len(t, free, 1)
	assert.Greater(t, free[0].value, 0.0)
	assert.LessOrEqual(t, free[0].value, float64(total))
	want := wantOwn(s, cpuOwn)
	want["memtrack.device_free"] = point{"By", "UpDownCounter", cpuOwn, free[0].value}
	want["memtrack.device_total"] = point{"By", "UpDownCounter", cpuOwn, float64(total)}
	assert.Equal(t, merge(want), got)
}

// TestInstrumentsCategories checks every category instrument against the
// CPU's CategoryStats, read through Register as a program would: one point
// per row with memtrack.category, the uncategorised row without peaks,
// the limit only where one is set. It runs in a process of its own, since
// categories, once made, stay on the device that the other tests read.
func TestInstrumentsCategories(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_OTEL_CHILD") {
		return
	}
	cpu := memtrack.CPU()
	kv, err := cpu.Category("kv_cache")
	require.NoError(t, err)
	weights, err := cpu.Category("weights")
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(3000))
	a, err := kv.Alloc(2048)
	require.NoError(t, err)
	defer a.Free()
	b, err := kv.Alloc(512)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	_, err = kv.Alloc(1024)
	require.ErrorIs(t, err, memtrack.ErrOutOfMemory)
	w, err := weights.Alloc(4096)
	require.NoError(t, err)
	defer w.Free()
	u, err := cpu.Alloc(100)
	require.NoError(t, err)
	defer u.Free()

	got := collect(t, registered())
	rows := cpu.CategoryStats()
	require.Len(t, rows, 3, "kv_cache, weights, uncategorised")
	require.Equal(t, memtrack.CategoryStats{Device: cpu, Category: "kv_cache", Tracked: 2048, PeakTracked: 2560,
		Buffers: 1, PeakBuffers: 2, AllocBytes: 2560, FreedBytes: 512, Allocs: 2, Frees: 1, FailedAllocs: 1, Limit: 3000}, rows[0])
	want := wantCategories(rows, cpuOwn)
	for name, ps := range got {
		if strings.HasPrefix(name, "memtrack.category_") {
			assert.Equal(t, want[name], ps, name)
			delete(want, name)
		}
	}
	assert.Empty(t, want, "category instruments not reported")
	kvAttrs := attribute.NewSet(append(cpuOwn.ToSlice(), attribute.String("memtrack.category", "kv_cache"))...)
	assert.Equal(t, []point{{"By", "UpDownCounter", kvAttrs, 3000}}, got["memtrack.category_limit"], "only kv_cache has a limit")
	assert.Len(t, got["memtrack.category_peak_tracked"], 2, "no peak for uncategorised")
	assert.Len(t, got["memtrack.category_tracked"], 3)
}

func TestWithAttributes(t *testing.T) {
	model := attribute.String("model", "llama-3-8b")
	got := collect(t, observing(func() []reading { return []reading{fakeGPU()} }, WithAttributes(model)))
	require.NotEmpty(t, got)
	for name, ps := range got {
		for _, p := range ps {
			v, ok := p.attrs.Value("model")
			assert.True(t, ok && v.AsString() == "llama-3-8b", "%s has %v", name, p.attrs)
		}
	}
	assert.Equal(t, 6, got["hw.gpu.memory.usage"][0].attrs.Len(), "hw.id, hw.type, hw.name, hw.model, hw.vendor and model")
}

func TestRegisterRefuses(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	for _, kv := range []attribute.KeyValue{
		attribute.String("memtrack.backend", "x"),
		attribute.Int("memtrack.ordinal", 3),
		attribute.String("memtrack.category", "x"),
		attribute.String("hw.id", "x"),
		attribute.String("hw.vendor", "x"),
		attribute.String("", "x"),
	} {
		t.Run(string(kv.Key), func(t *testing.T) {
			reg, err := Register(mp, WithAttributes(kv))
			assert.ErrorIs(t, err, ErrAttribute)
			assert.Nil(t, reg)
		})
	}
	reg, err := Register(nil)
	assert.Error(t, err)
	assert.Nil(t, reg)
}

// TestRegisterReadsAtCollection checks that Register's callback reads the
// used devices anew at each collection, and not after Unregister: the CPU's
// figures follow a buffer allocated and freed between collections.
func TestRegisterReadsAtCollection(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	cpu := memtrack.CPU()
	require.Zero(t, cpu.MemoryAllocated(), "an earlier test left CPU buffers live")
	reg, err := Register(mp)
	require.NoError(t, err)

	b, err := cpu.Alloc(4096)
	require.NoError(t, err)
	assert.Equal(t, []point{{"By", "UpDownCounter", cpuOwn, 4096}}, read1(t, reader)["memtrack.tracked"])
	require.NoError(t, b.Free())
	assert.Equal(t, []point{{"By", "UpDownCounter", cpuOwn, 0}}, read1(t, reader)["memtrack.tracked"], "each collection reads the figures anew")

	require.NoError(t, reg.Unregister())
	assert.Empty(t, read1(t, reader), "an unregistered callback reads nothing")
}

// TestDocTable checks the tables of doc.go against the instruments: every
// name, kind and unit, in order.
func TestDocTable(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var got, want []string
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		if strings.HasPrefix(line, "//\t") && len(f) >= 3 && (strings.HasPrefix(f[0], "memtrack.") || strings.HasPrefix(f[0], "hw.")) {
			got = append(got, strings.Join(f[:3], " "))
		}
	}
	for _, in := range instruments {
		want = append(want, in.name+" "+in.kind.String()+" "+in.unit)
	}
	slices.Sort(got)
	slices.Sort(want)
	assert.Equal(t, want, got)
}
