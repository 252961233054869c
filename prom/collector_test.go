package prom

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counterNames are the metrics read from memtrack's own counters; the
// device_* metrics come from the OS and change between reads.
var counterNames = []string{
	"memtrack_tracked_bytes", "memtrack_peak_tracked_bytes", "memtrack_buffers",
	"memtrack_peak_buffers", "memtrack_alloc_bytes_total", "memtrack_freed_bytes_total",
	"memtrack_allocs_total", "memtrack_frees_total", "memtrack_failed_allocs_total",
	"memtrack_limit_bytes", "memtrack_held_bytes", "memtrack_peak_held_bytes",
	"memtrack_leaks_total", "memtrack_leaked_bytes_total",
	"memtrack_address_space_bytes", "memtrack_reservations",
}

const countersText = `
# HELP memtrack_buffers Live buffers and tracked handles memtrack counts on the device.
# TYPE memtrack_buffers gauge
memtrack_buffers{%[1]s} 1
# HELP memtrack_peak_buffers High-water mark of memtrack_buffers since the last peak reset.
# TYPE memtrack_peak_buffers gauge
memtrack_peak_buffers{%[1]s} 2
# HELP memtrack_tracked_bytes Bytes memtrack tracks on the device: the sizes asked for of its live buffers and tracked memory.
# TYPE memtrack_tracked_bytes gauge
memtrack_tracked_bytes{%[1]s} 2048
# HELP memtrack_alloc_bytes_total Bytes allocated through memtrack on the device (requested sizes) since the last reset of the cumulative figures.
# TYPE memtrack_alloc_bytes_total counter
memtrack_alloc_bytes_total{%[1]s} 3072
# HELP memtrack_peak_tracked_bytes High-water mark of memtrack_tracked_bytes since the last peak reset.
# TYPE memtrack_peak_tracked_bytes gauge
memtrack_peak_tracked_bytes{%[1]s} 3072
# HELP memtrack_failed_allocs_total Allocations refused by the memory limit or failed in the backend since the last reset of the cumulative figures.
# TYPE memtrack_failed_allocs_total counter
memtrack_failed_allocs_total{%[1]s} 1
# HELP memtrack_allocs_total Allocations through memtrack on the device since the last reset of the cumulative figures.
# TYPE memtrack_allocs_total counter
memtrack_allocs_total{%[1]s} 2
# HELP memtrack_frees_total Frees through memtrack on the device since the last reset of the cumulative figures.
# TYPE memtrack_frees_total counter
memtrack_frees_total{%[1]s} 1
# HELP memtrack_freed_bytes_total Bytes freed through memtrack on the device since the last reset of the cumulative figures.
# TYPE memtrack_freed_bytes_total counter
memtrack_freed_bytes_total{%[1]s} 1024
# HELP memtrack_held_bytes Bytes the device holds for buffers allocated through memtrack: memtrack_tracked_bytes plus stream-ordered frees the device has not yet executed.
# TYPE memtrack_held_bytes gauge
memtrack_held_bytes{%[1]s} 2048
# HELP memtrack_peak_held_bytes High-water mark of memtrack_held_bytes since the last peak reset.
# TYPE memtrack_peak_held_bytes gauge
memtrack_peak_held_bytes{%[1]s} 3072
# HELP memtrack_leaked_bytes_total Bytes of the leaks counted by memtrack_leaks_total.
# TYPE memtrack_leaked_bytes_total counter
memtrack_leaked_bytes_total{%[1]s} 0
# HELP memtrack_leaks_total Buffers and tracked handles the garbage collector found unreachable without a free while the device was watched for leaks, since the last reset of the cumulative figures.
# TYPE memtrack_leaks_total counter
memtrack_leaks_total{%[1]s} 0
# HELP memtrack_address_space_bytes Bytes of address space the device's reservations hold (Device.Reserve), mapped or not: no memory; the physical memory mapped into them is in memtrack_tracked_bytes.
# TYPE memtrack_address_space_bytes gauge
memtrack_address_space_bytes{%[1]s} 0
# HELP memtrack_reservations Reservations of address space on the device, not yet released.
# TYPE memtrack_reservations gauge
memtrack_reservations{%[1]s} 0
`

const limitText = `# HELP memtrack_limit_bytes Memory limit on memtrack_tracked_bytes; absent where none is set.
# TYPE memtrack_limit_bytes gauge
memtrack_limit_bytes{%[1]s} 1.048576e+06
`

const deviceText = `# HELP memtrack_device_free_bytes Free memory of the device as the OS or driver reports it; absent where the query fails.
# TYPE memtrack_device_free_bytes gauge
memtrack_device_free_bytes{%[1]s} 1000
# HELP memtrack_device_total_bytes Total memory of the device as the OS or driver reports it; absent where the query fails.
# TYPE memtrack_device_total_bytes gauge
memtrack_device_total_bytes{%[1]s} 4000
`

const infoText = `# HELP memtrack_device_info The device's identity: 1, with its UUID (as nvidia-smi prints a GPU's; a Metal device's registryID; empty for the CPU) and model name; absent where the query fails.
# TYPE memtrack_device_info gauge
memtrack_device_info{%[1]s} 1
`

// cpuInfoLabels are the labels of the CPU's memtrack_device_info as
// fixedDevInfo names it.
const cpuInfoLabels = `backend="cpu",name="Fake CPU \\ \"9000\"",ordinal="0",uuid="CPU-0"`

// fixedDevInfo names the CPU with a UUID (which the real CPU has none of),
// and with a backslash and quotes, which the exposition escapes.
func fixedDevInfo(d memtrack.Device) (memtrack.DeviceInfo, error) {
	return memtrack.DeviceInfo{Device: d, Name: `Fake CPU \ "9000"`, UUID: "CPU-0"}, nil
}

// over is a collector that sends, at each scrape, the readings that read
// returns, as the Collector sends what Collect reads of every used device
// (Collector.send): a scrape of chosen devices, or of figures a test sets.
type over struct {
	*Collector
	read func() []reading
}

func (o over) Collect(ch chan<- prometheus.Metric) {
	for _, r := range o.read() {
		o.send(ch, r)
	}
}

// of returns a collector of c that reads devices ds only, as Collect reads
// every used device, each reading passed through set (nil: as read).
func of(c *Collector, set func(*reading), ds ...memtrack.Device) over {
	return over{c, func() []reading {
		rs := make([]reading, len(ds))
		for i, d := range ds {
			rs[i] = read(d)
			if set != nil {
				set(&rs[i])
			}
		}
		return rs
	}}
}

// cpuLabels are the labels of the CPU's metrics without constant labels.
const cpuLabels = `backend="cpu",ordinal="0"`

// expect joins parts of the expected exposition, with labels (in the sorted
// order of the exposition) in place of %[1]s.
func expect(labels string, parts ...string) string {
	return strings.ReplaceAll(strings.Join(parts, ""), "%[1]s", labels)
}

func TestCollectorCompare(t *testing.T) {
	fixedInfo := func(memtrack.Device) (int64, int64, error) { return 1000, 4000, nil }
	failedInfo := func(d memtrack.Device) (int64, int64, error) {
		return 0, 0, &memtrack.BackendError{Device: d, Op: "meminfo", Err: errors.New("driver gone")}
	}
	failedDevInfo := func(d memtrack.Device) (memtrack.DeviceInfo, error) {
		return memtrack.DeviceInfo{Device: d}, &memtrack.BackendError{Device: d, Op: "info", Err: errors.New("driver gone")}
	}
	tests := []struct {
		name    string
		opts    []Option
		limit   int64
		memInfo func(memtrack.Device) (int64, int64, error)
		devInfo func(memtrack.Device) (memtrack.DeviceInfo, error)
		want    string
	}{
		{"no limit", nil, 0, fixedInfo, fixedDevInfo, expect(cpuLabels, countersText, deviceText) + expect(cpuInfoLabels, infoText)},
		{"limit", nil, 1 << 20, fixedInfo, fixedDevInfo, expect(cpuLabels, countersText, limitText, deviceText) + expect(cpuInfoLabels, infoText)},
		{"queries fail", nil, 0, failedInfo, failedDevInfo, expect(cpuLabels, countersText)},
		{"info fails", nil, 0, fixedInfo, failedDevInfo, expect(cpuLabels, countersText, deviceText)},
		{"const labels", []Option{WithConstLabels(prometheus.Labels{"model": "llama", "zone": "a"})}, 1 << 20, fixedInfo, fixedDevInfo,
			expect(`backend="cpu",model="llama",ordinal="0",zone="a"`, countersText, limitText, deviceText) +
				expect(`backend="cpu",model="llama",name="Fake CPU \\ \"9000\"",ordinal="0",uuid="CPU-0",zone="a"`, infoText)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rendertest.SetCPU(t, tt.limit)
			c := of(NewCollector(tt.opts...), func(r *reading) {
				r.free, r.total, r.memErr = tt.memInfo(r.dev)
				r.info, r.infoErr = tt.devInfo(r.dev)
			}, memtrack.CPU())

			reg := prometheus.NewPedanticRegistry()
			require.NoError(t, reg.Register(c))
			// Every metric the collector sends, compared as a whole.
			assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(tt.want)))
			problems, err := testutil.GatherAndLint(reg)
			require.NoError(t, err)
			assert.Empty(t, problems)
		})
	}
}

// TestCollectorUsedDevices scrapes the real device list and driver figures.
func TestCollectorUsedDevices(t *testing.T) {
	rendertest.SetCPU(t, 0)
	c := NewCollector()
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(expect(cpuLabels, countersText)), counterNames...))

	used := len(memtrack.UsedDevices())
	require.GreaterOrEqual(t, used, 1)
	assert.Equal(t, 15*used, testutil.CollectAndCount(c, counterNames...))
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		// The CPU's figures come from /proc/meminfo or sysctl.
		_, total, err := memtrack.CPU().MemGetInfo()
		require.NoError(t, err)
		assert.Equal(t, 1, testutil.CollectAndCount(c, "memtrack_device_free_bytes"))
		assert.Equal(t, 1, testutil.CollectAndCount(c, "memtrack_device_total_bytes"))
		assert.Equal(t, float64(total), testutil.ToFloat64(onlyTotal{c}))
	}

	// The CPU's identity, as the core reports it.
	info, err := memtrack.CPU().Info()
	require.NoError(t, err)
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	wantInfo := expect(`backend="cpu",name="`+esc.Replace(info.Name)+`",ordinal="0",uuid=""`, infoText)
	if used == 1 {
		assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(wantInfo), "memtrack_device_info"))
	}
	assert.Equal(t, used, testutil.CollectAndCount(c, "memtrack_device_info"))

	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// onlyTotal passes on the collector's memtrack_device_total_bytes alone, for
// testutil.ToFloat64.
type onlyTotal struct{ c *Collector }

func (o onlyTotal) Describe(ch chan<- *prometheus.Desc) { ch <- o.c.devTotal }

func (o onlyTotal) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { o.c.Collect(all); close(all) }()
	for m := range all {
		if m.Desc() == o.c.devTotal {
			ch <- m
		}
	}
}

const poolText = `# HELP memtrack_pool_reserved_bytes Bytes the device's CUDA memory pool reserves, used or not, as the driver reports them.
# TYPE memtrack_pool_reserved_bytes gauge
memtrack_pool_reserved_bytes{%[1]s} 8
# HELP memtrack_peak_pool_reserved_bytes High-water mark of memtrack_pool_reserved_bytes since the last peak reset, as the driver reports it.
# TYPE memtrack_peak_pool_reserved_bytes gauge
memtrack_peak_pool_reserved_bytes{%[1]s} 16
# HELP memtrack_pool_used_bytes Bytes in use in the device's CUDA memory pool, as the driver reports them.
# TYPE memtrack_pool_used_bytes gauge
memtrack_pool_used_bytes{%[1]s} 2
# HELP memtrack_peak_pool_used_bytes High-water mark of memtrack_pool_used_bytes since the last peak reset, as the driver reports it.
# TYPE memtrack_peak_pool_used_bytes gauge
memtrack_peak_pool_used_bytes{%[1]s} 4
`

// TestCollectorPool: a device whose pool answers gets the pool_* metrics;
// one whose pool query fails (a CPU, a GPU without pools) gets none.
func TestCollectorPool(t *testing.T) {
	rendertest.SetCPU(t, 0)
	c := of(NewCollector(), func(r *reading) {
		r.free, r.total, r.memErr = 1000, 4000, nil
		r.info, r.infoErr = memtrack.DeviceInfo{}, errors.New("no info")
		r.pool, r.poolErr = memtrack.PoolStats{Device: r.dev, PoolReserved: 8, PeakPoolReserved: 16, PoolUsed: 2, PeakPoolUsed: 4}, nil
	}, memtrack.CPU())
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expect(cpuLabels, countersText, deviceText, poolText))))

	assert.Zero(t, testutil.CollectAndCount(of(NewCollector(), nil, memtrack.CPU()), "memtrack_pool_used_bytes"), "the CPU's pool query fails")
}

const graphsText = `# HELP memtrack_graph_reserved_bytes Bytes the CUDA driver reserves for the allocations of CUDA graphs, mapped or not, as it reports them: device memory memtrack does not track.
# TYPE memtrack_graph_reserved_bytes gauge
memtrack_graph_reserved_bytes{%[1]s} 6
# HELP memtrack_peak_graph_reserved_bytes High-water mark of memtrack_graph_reserved_bytes since the last peak reset, as the driver reports it.
# TYPE memtrack_peak_graph_reserved_bytes gauge
memtrack_peak_graph_reserved_bytes{%[1]s} 12
# HELP memtrack_graph_used_bytes Bytes of memtrack_graph_reserved_bytes that CUDA graphs map now, as the driver reports them.
# TYPE memtrack_graph_used_bytes gauge
memtrack_graph_used_bytes{%[1]s} 4
# HELP memtrack_peak_graph_used_bytes High-water mark of memtrack_graph_used_bytes since the last peak reset, as the driver reports it.
# TYPE memtrack_peak_graph_used_bytes gauge
memtrack_peak_graph_used_bytes{%[1]s} 10
`

// TestCollectorGraphs: a device whose graph memory answers gets the
// graph_* metrics, each under its name; one whose query fails (a CPU, a
// driver before CUDA 11.4) gets none.
func TestCollectorGraphs(t *testing.T) {
	rendertest.SetCPU(t, 0)
	c := of(NewCollector(), func(r *reading) {
		r.free, r.total, r.memErr = 1000, 4000, nil
		r.info, r.infoErr = memtrack.DeviceInfo{}, errors.New("no info")
		r.graphs, r.graphsErr = memtrack.GraphStats{Device: r.dev, GraphReserved: 6, PeakGraphReserved: 12, GraphUsed: 4, PeakGraphUsed: 10}, nil
	}, memtrack.CPU())
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expect(cpuLabels, countersText, deviceText, graphsText))))

	assert.Zero(t, testutil.CollectAndCount(of(NewCollector(), nil, memtrack.CPU()), "memtrack_graph_reserved_bytes"), "the CPU has no CUDA graphs")
}

func TestCollectorNoDevices(t *testing.T) {
	c := of(NewCollector(), nil)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	assert.Empty(t, mfs)
}

func TestCollectorBadConstLabels(t *testing.T) {
	tests := []struct {
		name   string
		labels prometheus.Labels
	}{
		{"clashes with backend", prometheus.Labels{"backend": "x"}},
		{"clashes with ordinal", prometheus.Labels{"ordinal": "1"}},
		{"clashes with uuid", prometheus.Labels{"uuid": "x"}},
		{"clashes with name", prometheus.Labels{"name": "x"}},
		{"reserved name", prometheus.Labels{"__reserved": "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			assert.Error(t, reg.Register(NewCollector(WithConstLabels(tt.labels))))
		})
	}
}

// TestConstLabelsClashDocumented: every variable label of the collector's
// metrics (read from their descriptions) makes a constant label of that
// name fail to register, and WithConstLabels' doc names it.
func TestConstLabelsClashDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "collector.go", nil, parser.ParseComments)
	require.NoError(t, err)
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "WithConstLabels" {
			doc = fn.Doc.Text()
		}
	}
	require.NotEmpty(t, doc)
	ch := make(chan *prometheus.Desc, 256)
	NewCollector().Describe(ch)
	close(ch)
	labels := map[string]bool{}
	re := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	for d := range ch {
		m := re.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		for _, l := range strings.Split(m[1], ",") {
			labels[strings.TrimSpace(l)] = true
		}
	}
	require.Contains(t, labels, "category", "the category metrics are described")
	for l := range labels {
		reg := prometheus.NewPedanticRegistry()
		assert.Error(t, reg.Register(NewCollector(WithConstLabels(prometheus.Labels{l: "x"}))), l)
		assert.Regexp(t, `\b`+l+`\b`, doc, "WithConstLabels' doc names %q among the labels that clash", l)
	}
}

// TestWithConstLabelsCopies checks that the caller's map may change after
// the option is made.
func TestWithConstLabelsCopies(t *testing.T) {
	rendertest.SetCPU(t, 0)
	labels := prometheus.Labels{"model": "llama"}
	c := of(NewCollector(WithConstLabels(labels)), nil, memtrack.CPU())
	labels["model"] = "changed"
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(expect(`backend="cpu",model="llama",ordinal="0"`, countersText)), counterNames...))
}

// TestCollectorPromlint runs client_golang's promlint over a scrape in which
// every metric of the collector is present, and over a control metric that
// breaks its rules, so that a linter which reports nothing is not mistaken
// for a clean exposition.
func TestCollectorPromlint(t *testing.T) {
	rendertest.SetCPU(t, 1<<20)
	c := of(NewCollector(WithConstLabels(prometheus.Labels{"service": "llm"})), func(r *reading) {
		r.free, r.total, r.memErr = 1000, 4000, nil
		r.info, r.infoErr = fixedDevInfo(r.dev)
		r.pool, r.poolErr = memtrack.PoolStats{Device: r.dev, PoolReserved: 8, PeakPoolReserved: 16, PoolUsed: 2, PeakPoolUsed: 4}, nil
		r.graphs, r.graphsErr = memtrack.GraphStats{Device: r.dev, GraphReserved: 6, PeakGraphReserved: 12, GraphUsed: 4, PeakGraphUsed: 10}, nil
		r.cats = fixedCategories(r.dev)
		r.usage, r.usageErr = fixedUsage(r.dev)
	}, memtrack.CPU())
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, len(c.descs()), "the scrape lacks some of the collector's metrics")

	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)

	// The control: a counter without _total, in milliseconds.
	bad := prometheus.NewCounter(prometheus.CounterOpts{Name: "memtrack_alloc_time_milliseconds", Help: "x"})
	badReg := prometheus.NewRegistry()
	require.NoError(t, badReg.Register(bad))
	badMfs, err := badReg.Gather()
	require.NoError(t, err)
	problems, err = promlint.NewWithMetricFamilies(badMfs).Lint()
	require.NoError(t, err)
	assert.NotEmpty(t, problems)
}

// leakCPU allocates on the CPU from a frame of its own and drops the buffer.
//
//go:noinline
func leakCPU(t *testing.T) {
	_, err := memtrack.CPU().Alloc(1000)
	require.NoError(t, err)
}

// TestCollectorLeaks: a leak the collector finds is exported as counted.
func TestCollectorLeaks(t *testing.T) {
	cpu := memtrack.CPU()
	cpu.ResetAccumulatedMemoryStats()
	found := make(chan memtrack.Leak, 1)
	// Freed, so that the CPU holds nothing more after the test.
	require.NoError(t, cpu.Leaks().Enable(memtrack.LeakWatch{Handler: func(l memtrack.Leak) { found <- l }, FreeLeaks: true}))
	t.Cleanup(cpu.Leaks().Disable)
	leakCPU(t)
	deadline := time.Now().Add(10 * time.Second)
	for waiting := true; waiting; {
		runtime.GC()
		select {
		case <-found:
			waiting = false
		case <-time.After(10 * time.Millisecond):
			require.True(t, time.Now().Before(deadline), "the leak was never found")
		}
	}
	c := of(NewCollector(), nil, cpu)
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(expect(cpuLabels, `
# HELP memtrack_leaked_bytes_total Bytes of the leaks counted by memtrack_leaks_total.
# TYPE memtrack_leaked_bytes_total counter
memtrack_leaked_bytes_total{%[1]s} 1000
# HELP memtrack_leaks_total Buffers and tracked handles the garbage collector found unreachable without a free while the device was watched for leaks, since the last reset of the cumulative figures.
# TYPE memtrack_leaks_total counter
memtrack_leaks_total{%[1]s} 1
`)), "memtrack_leaks_total", "memtrack_leaked_bytes_total"))
	cpu.ResetAccumulatedMemoryStats()
}
