package dashboards

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The join of memtrack's series with dcgm-exporter's, evaluated by
// Prometheus's own engine: promtool test rules, over series laid out as a
// fleet has them. Two processes share GPU-bbb: process a sees it as cuda:1,
// process b (CUDA_VISIBLE_DEVICES=1) as cuda:0. dcgm-exporter reports
// framebuffer MiB per GPU, under the label UUID.
var joinSeries = []map[string]string{
	{"series": `memtrack_tracked_bytes{instance="a:2112",job="app",backend="cuda",ordinal="0"}`, "values": "1073741824x5"},
	{"series": `memtrack_tracked_bytes{instance="a:2112",job="app",backend="cuda",ordinal="1"}`, "values": "2147483648x5"},
	{"series": `memtrack_tracked_bytes{instance="a:2112",job="app",backend="cpu",ordinal="0"}`, "values": "4096x5"},
	{"series": `memtrack_tracked_bytes{instance="b:2112",job="app",backend="cuda",ordinal="0"}`, "values": "536870912x5"},
	{"series": `memtrack_device_info{instance="a:2112",job="app",backend="cuda",ordinal="0",uuid="GPU-aaa",name="NVIDIA H100 80GB HBM3"}`, "values": "1x5"},
	{"series": `memtrack_device_info{instance="a:2112",job="app",backend="cuda",ordinal="1",uuid="GPU-bbb",name="NVIDIA H100 80GB HBM3"}`, "values": "1x5"},
	{"series": `memtrack_device_info{instance="a:2112",job="app",backend="cpu",ordinal="0",uuid="",name="AMD EPYC 9654"}`, "values": "1x5"},
	{"series": `memtrack_device_info{instance="b:2112",job="app",backend="cuda",ordinal="0",uuid="GPU-bbb",name="NVIDIA H100 80GB HBM3"}`, "values": "1x5"},
	{"series": `DCGM_FI_DEV_FB_USED{instance="node:9400",job="dcgm",gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node"}`, "values": "2048x5"},
	{"series": `DCGM_FI_DEV_FB_USED{instance="node:9400",job="dcgm",gpu="1",UUID="GPU-bbb",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node"}`, "values": "4096x5"},
	{"series": `DCGM_FI_DEV_FB_USED{instance="node:9400",job="dcgm",gpu="2",UUID="GPU-ccc",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",Hostname="node"}`, "values": "100x5"},
	// The same processes through package otelmetric and OpenTelemetry's
	// Prometheus exporter, in the same server: package prom's names, with
	// memtrack_backend and memtrack_ordinal for labels; every series of a
	// GPU carries hw_id, and the driver's figure of each GPU is
	// hw_gpu_memory_usage_bytes. The selectors keep the two apart: the
	// expressions above select backend="cuda", these memtrack_backend="cuda".
	{"series": `memtrack_tracked_bytes{instance="a:2112",job="app",memtrack_backend="cuda",memtrack_ordinal="0",hw_id="GPU-aaa",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, "values": "1073741824x5"},
	{"series": `memtrack_tracked_bytes{instance="a:2112",job="app",memtrack_backend="cuda",memtrack_ordinal="1",hw_id="GPU-bbb",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, "values": "2147483648x5"},
	{"series": `memtrack_tracked_bytes{instance="a:2112",job="app",memtrack_backend="cpu",memtrack_ordinal="0",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, "values": "4096x5"},
	{"series": `memtrack_tracked_bytes{instance="b:2112",job="app",memtrack_backend="cuda",memtrack_ordinal="0",hw_id="GPU-bbb",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, "values": "536870912x5"},
	{"series": `hw_gpu_memory_usage_bytes{instance="a:2112",job="app",hw_id="GPU-aaa",hw_name="cuda:0",hw_type="gpu",hw_vendor="NVIDIA",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, "values": "2147483648x5"},
	{"series": `hw_gpu_memory_usage_bytes{instance="a:2112",job="app",hw_id="GPU-bbb",hw_name="cuda:1",hw_type="gpu",hw_vendor="NVIDIA",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, "values": "4294967296x5"},
	{"series": `hw_gpu_memory_usage_bytes{instance="b:2112",job="app",hw_id="GPU-bbb",hw_name="cuda:0",hw_type="gpu",hw_vendor="NVIDIA",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, "values": "4294967296x5"},
}

type sample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

// perProcessShare is the per-process form that docs/integrations.md gives:
// each process's tracked bytes over what dcgm-exporter reports used on the
// same GPU. group_left needs its "()" here: without them the parenthesis
// that follows is read as its label list.
const perProcessShare = `(memtrack_tracked_bytes{backend="cuda"} * on(instance, job, backend, ordinal) group_left(uuid) memtrack_device_info)
  / on(uuid) group_left()
(max by (uuid) (label_replace(DCGM_FI_DEV_FB_USED, "uuid", "$1", "UUID", "(.+)")) * 1048576)`

// The joins docs/integrations.md gives for package otelmetric's series:
// each process's share of the memory in use on its GPU, the share over
// every process, and the same against the driver's figure that the
// processes report themselves (hw.gpu.memory.usage), without dcgm-exporter.
const (
	otelPerProcessShare = `memtrack_tracked_bytes{memtrack_backend="cuda"}
  / on(hw_id) group_left()
(max by (hw_id) (label_replace(DCGM_FI_DEV_FB_USED, "hw_id", "$1", "UUID", "(.+)")) * 1048576)`
	otelShare = `sum by (hw_id) (memtrack_tracked_bytes{memtrack_backend="cuda"})
  / on(hw_id)
(max by (hw_id) (label_replace(DCGM_FI_DEV_FB_USED, "hw_id", "$1", "UUID", "(.+)")) * 1048576)`
	otelShareOfUsage = `sum by (hw_id) (memtrack_tracked_bytes{memtrack_backend="cuda"})
  / on(hw_id)
max by (hw_id) (hw_gpu_memory_usage_bytes)`
)

func TestDCGMJoin(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed, and CI must evaluate the join: .ci/run installs it (Debian: apt-get install prometheus)")
		}
		t.Skip("promtool is not installed (Debian: apt-get install prometheus); the join's PromQL is not evaluated")
	}
	data, err := os.ReadFile("memtrack.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	exprOf := func(panelID int, ref string) string {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if p.ID == panelID && tg.RefID == ref {
					// Every job and instance, as the variables' All gives.
					return strings.NewReplacer("$job", ".*", "$instance", ".*").Replace(tg.Expr)
				}
			}
		}
		t.Fatalf("the dashboard has no panel %d with target %s", panelID, ref)
		return ""
	}
	type exprTest struct {
		Expr     string   `json:"expr"`
		EvalTime string   `json:"eval_time"`
		Samples  []sample `json:"exp_samples"`
	}
	tests := []exprTest{
		// Panel 8: bytes tracked per GPU over every process, and used.
		{exprOf(8, "A"), "4m", []sample{{`{uuid="GPU-aaa"}`, 1 << 30}, {`{uuid="GPU-bbb"}`, 2<<30 + 512<<20}}},
		{exprOf(8, "B"), "4m", []sample{{`{uuid="GPU-aaa"}`, 2048 << 20}, {`{uuid="GPU-bbb"}`, 4096 << 20}}},
		// Panel 9: the share of used memory that memtrack tracks.
		{exprOf(9, "A"), "4m", []sample{{`{uuid="GPU-aaa"}`, 0.5}, {`{uuid="GPU-bbb"}`, 0.625}}},
		// The joins of docs/integrations.md for package otelmetric's series,
		// which carry hw_id themselves: one step, without an info metric.
		{otelPerProcessShare, "4m", []sample{
			{`{instance="a:2112",job="app",memtrack_backend="cuda",memtrack_ordinal="0",hw_id="GPU-aaa",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, 0.5},
			{`{instance="a:2112",job="app",memtrack_backend="cuda",memtrack_ordinal="1",hw_id="GPU-bbb",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, 0.5},
			{`{instance="b:2112",job="app",memtrack_backend="cuda",memtrack_ordinal="0",hw_id="GPU-bbb",otel_scope_name="github.com/memtrack/memtrack/otelmetric"}`, 0.125},
		}},
		{otelShare, "4m", []sample{{`{hw_id="GPU-aaa"}`, 0.5}, {`{hw_id="GPU-bbb"}`, 0.625}}},
		{otelShareOfUsage, "4m", []sample{{`{hw_id="GPU-aaa"}`, 0.5}, {`{hw_id="GPU-bbb"}`, 0.625}}},
		{perProcessShare, "4m", []sample{
			{`{instance="a:2112",job="app",backend="cuda",ordinal="0",uuid="GPU-aaa"}`, 0.5},
			{`{instance="a:2112",job="app",backend="cuda",ordinal="1",uuid="GPU-bbb"}`, 0.5},
			{`{instance="b:2112",job="app",backend="cuda",ordinal="0",uuid="GPU-bbb"}`, 0.125},
		}},
		// Without label_replace nothing matches, even for one GPU:
		// dcgm-exporter's label is UUID, and label names are
		// case-sensitive. (Over every GPU the same expression is an error:
		// all of dcgm's series fall in the one match group uuid="".)
		{`(memtrack_tracked_bytes{backend="cuda"} * on(instance, job, backend, ordinal) group_left(uuid) memtrack_device_info) / on(uuid) group_left() DCGM_FI_DEV_FB_USED{UUID="GPU-aaa"}`, "4m", nil},
		// And without backend="cuda", the CPU, whose uuid is empty, matches
		// that dcgm series, which has no uuid either: a wrong figure.
		{`(memtrack_tracked_bytes * on(instance, job, backend, ordinal) group_left(uuid) memtrack_device_info) / on(uuid) group_left() DCGM_FI_DEV_FB_USED{UUID="GPU-aaa"}`, "4m",
			[]sample{{`{instance="a:2112",job="app",backend="cpu",ordinal="0"}`, 2}}},
	}
	file := map[string]any{
		"rule_files":          []string{},
		"evaluation_interval": "1m",
		"tests":               []any{map[string]any{"interval": "1m", "input_series": joinSeries, "promql_expr_test": tests}},
	}
	out, err := json.MarshalIndent(file, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "join_test.yml") // JSON is YAML
	require.NoError(t, os.WriteFile(path, out, 0o644))
	res, err := exec.Command(promtool, "test", "rules", path).CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", res)
	t.Logf("promtool test rules: %s", strings.TrimSpace(string(res)))
}
