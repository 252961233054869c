package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The dashboard on a real Prometheus server: examples/profile serves
// /metrics on the loopback, a Prometheus server (Debian's prometheus
// package) scrapes it every second, and every expression of memtrack.json
// is evaluated through the server's HTTP API, with Grafana's variables
// filled in as Grafana fills them. It takes about 20 s, so it runs where
// MEMTRACK_PROMETHEUS_SERVER is set (.ci/run sets it).

const (
	serverEnv      = "MEMTRACK_PROMETHEUS_SERVER"
	scrapeJob      = "memtrack-profile"
	scrapeInterval = time.Second
	// rateInterval stands for Grafana's $__rate_interval: at least four
	// scrape intervals, so that rate() has samples to work on.
	rateInterval = "10s"
	// minScrapes is how many scrapes of the example the server must hold
	// before the expressions are evaluated: more than rateInterval spans.
	minScrapes = 12
)

// exampleAddr matches the line in which examples/profile names its /metrics.
var exampleAddr = regexp.MustCompile(`http://(\S+)/metrics`)

// gpuBackend matches a matcher that selects the series of a GPU backend.
var gpuBackend = regexp.MustCompile(`backend\s*=~?\s*"(cuda|metal)"`)

// noDataReason says why expr may return no data on a CPU-only run of the
// example, whose scrape holds the metrics in exported: it selects a GPU
// backend, queries another exporter, or queries a metric the example does
// not export on the CPU (the limit where none is set, the pool figures). It
// returns "" for an expression that must return data.
func noDataReason(expr string, exported map[string]bool) (string, error) {
	if m := gpuBackend.FindStringSubmatch(expr); m != nil {
		return fmt.Sprintf("selects backend %q; the example runs on the CPU", m[1]), nil
	}
	names, err := metricNames(expr)
	if err != nil {
		return "", err
	}
	for _, n := range names {
		if external(n) {
			return n + " comes from dcgm-exporter, which is not scraped here", nil
		}
	}
	for _, n := range names {
		if !exported[n] {
			return n + " is not in the example's scrape on the CPU", nil
		}
	}
	return "", nil
}

// grafanaVars are the values of the dashboard's variables for one run.
type grafanaVars struct {
	job, instance string
}

// expand fills in Grafana's variables in expr as Grafana does for a
// Prometheus data source: $job and $instance (used with =~) as escaped
// regular expressions, $__rate_interval as a duration.
func (v grafanaVars) expand(expr string) string {
	regex := func(s string) string { return strings.ReplaceAll(regexp.QuoteMeta(s), `\`, `\\`) }
	return strings.NewReplacer(
		"${__rate_interval}", rateInterval, "$__rate_interval", rateInterval,
		"${job}", regex(v.job), "$job", regex(v.job),
		"${instance}", regex(v.instance), "$instance", regex(v.instance),
	).Replace(expr)
}

func TestNoDataReason(t *testing.T) {
	exported := map[string]bool{"memtrack_tracked_bytes": true, "memtrack_device_info": true}
	for _, tc := range []struct {
		expr, reason string
	}{
		{`memtrack_tracked_bytes{job=~"$job"}`, ""},
		{`rate(memtrack_tracked_bytes[$__rate_interval])`, ""},
		{`memtrack_limit_bytes{job=~"$job"}`, "memtrack_limit_bytes is not in the example's scrape on the CPU"},
		{`sum by (uuid) (memtrack_tracked_bytes{backend="cuda"} * on(instance) group_left(uuid) memtrack_device_info)`, `selects backend "cuda"; the example runs on the CPU`},
		{`memtrack_tracked_bytes and on(uuid) label_replace(DCGM_FI_DEV_FB_USED, "uuid", "$1", "UUID", "(.+)")`, "DCGM_FI_DEV_FB_USED comes from dcgm-exporter, which is not scraped here"},
	} {
		got, err := noDataReason(tc.expr, exported)
		require.NoError(t, err)
		assert.Equal(t, tc.reason, got, tc.expr)
	}
}

func TestExpand(t *testing.T) {
	v := grafanaVars{job: scrapeJob, instance: "127.0.0.1:4242"}
	assert.Equal(t,
		`rate(x{job=~"memtrack-profile",instance=~"127\\.0\\.0\\.1:4242"}[10s]) + label_replace(y, "u", "$1", "U", "(.+)")`,
		v.expand(`rate(x{job=~"$job",instance=~"$instance"}[$__rate_interval]) + label_replace(y, "u", "$1", "U", "(.+)")`))
}

// apiResponse is the envelope of the Prometheus HTTP API's answers.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// api GETs path with query from the server at base and decodes the answer;
// an error is one of the API's or of the transport.
func api(base, path string, query url.Values) (json.RawMessage, error) {
	resp, err := http.Get(base + path + "?" + query.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r apiResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d, undecodable answer: %w", path, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// instantQuery evaluates expr now and returns how many series it gave.
func instantQuery(base, expr string) (int, error) {
	data, err := api(base, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return 0, err
	}
	var d struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return 0, err
	}
	if d.ResultType == "scalar" {
		return 1, nil
	}
	return len(d.Result), nil
}

// lockedBuffer collects a child's output while the child writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start starts cmd with its output in out, and kills it (the process this
// test started, by its id) when the test ends.
func start(t *testing.T, cmd *exec.Cmd, out io.Writer) {
	t.Helper()
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), "starting %v", cmd.Args)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// freePort returns a loopback address on which nothing listens now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// waitFor calls f every 200 ms until it returns nil, and fails the test
// with f's last error after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %v", timeout, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestDashboardOnPrometheusServer(t *testing.T) {
	if os.Getenv(serverEnv) == "" {
		t.Skipf("set %s=1 to run examples/profile under a Prometheus server and evaluate the dashboard (.ci/run does)", serverEnv)
	}
	promBin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "the Prometheus server is not installed (Debian: apt-get install prometheus; .ci/run installs it)")
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()

	// The example, built and started as a user starts it, serving until
	// the test ends.
	build := exec.Command(gotool, "build", "-o", filepath.Join(dir, "profile"), "../examples/profile")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./examples/profile: %s", out)
	var exampleOut lockedBuffer
	start(t, exec.Command(filepath.Join(dir, "profile"), "-serve", "127.0.0.1:0", "-linger", "10m"), &exampleOut)
	defer func() {
		if t.Failed() {
			t.Logf("examples/profile:\n%s", exampleOut.String())
		}
	}()
	var target string
	waitFor(t, "examples/profile to serve /metrics", time.Minute, func() error {
		if m := exampleAddr.FindStringSubmatch(exampleOut.String()); m != nil {
			target = m[1]
			return nil
		}
		return fmt.Errorf("no line naming /metrics in its output yet")
	})
	t.Logf("examples/profile serves http://%s/metrics", target)

	// What the example exports on this machine.
	resp, err := http.Get("http://" + target + "/metrics")
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	exported := map[string]bool{}
	for name, f := range families {
		exported[name] = len(f.GetMetric()) > 0
	}
	require.True(t, exported["memtrack_tracked_bytes"], "the example exports package prom's metrics")

	// The server, scraping the example every second.
	promAddr := freePort(t)
	config := fmt.Sprintf("global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n  - job_name: %s\n    static_configs:\n      - targets: [%q]\n",
		scrapeInterval, scrapeInterval, scrapeJob, target)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644))
	var promOut lockedBuffer
	start(t, exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr), &promOut)
	defer func() {
		if t.Failed() {
			t.Logf("prometheus:\n%s", promOut.String())
		}
	}()
	base := "http://" + promAddr
	out, _ = exec.Command(promBin, "--version").CombinedOutput()
	t.Logf("%s listens at %s", strings.SplitN(string(out), "\n", 2)[0], base)
	waitFor(t, "the server to be ready", time.Minute, func() error {
		r, err := http.Get(base + "/-/ready")
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", r.StatusCode)
		}
		return nil
	})
	upQuery := fmt.Sprintf(`count_over_time(up{job=%q}[1m]) and on() up{job=%q} == 1`, scrapeJob, scrapeJob)
	scrapes := 0
	waitFor(t, fmt.Sprintf("%d successful scrapes of the example", minScrapes), 2*time.Minute, func() error {
		data, err := api(base, "/api/v1/query", url.Values{"query": {upQuery}})
		if err != nil {
			return err
		}
		var d struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if len(d.Result) != 1 {
			return fmt.Errorf("the target is not up yet (%s)", data)
		}
		s, _ := d.Result[0].Value[1].(string)
		scrapes, _ = strconv.Atoi(s)
		if scrapes < minScrapes {
			return fmt.Errorf("%d scrapes so far", scrapes)
		}
		return nil
	})
	t.Logf("the server holds %d scrapes of the example, every %v", scrapes, scrapeInterval)

	// The dashboard's variables take their values from the server, as
	// Grafana's label_values queries do.
	data, err := os.ReadFile("memtrack.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	vars := grafanaVars{job: scrapeJob, instance: target}
	want := map[string]string{"job": scrapeJob, "instance": target}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		require.NoError(t, json.Unmarshal(v.Query, &q))
		m := regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_]\w*)\)$`).FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable %s: %q", v.Name, q.Query)
		data, err := api(base, "/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {vars.expand(m[1])}})
		require.NoError(t, err, "variable %s: %q", v.Name, q.Query)
		var values []string
		require.NoError(t, json.Unmarshal(data, &values))
		t.Logf("variable %-8s %s = %v", v.Name, q.Query, values)
		assert.Contains(t, values, want[v.Name], "variable %s: %q", v.Name, q.Query)
	}

	// Every expression: no error, and data wherever the CPU has it.
	withData, without := 0, 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := vars.expand(tg.Expr)
			reason, err := noDataReason(tg.Expr, exported)
			require.NoError(t, err, tg.Expr)
			n, err := instantQuery(base, expr)
			switch {
			case err != nil:
				t.Errorf("panel %q, %s: %s\n\tFAILS: %v", p.Title, tg.RefID, expr, err)
			case n == 0 && reason == "":
				t.Errorf("panel %q, %s: %s\n\tFAILS: no data, though the example exports every metric it queries", p.Title, tg.RefID, expr)
			case n == 0:
				without++
				t.Logf("panel %q, %s: no data, as expected: %s", p.Title, tg.RefID, reason)
			default:
				withData++
				t.Logf("panel %q, %s: %d series", p.Title, tg.RefID, n)
			}
		}
	}
	t.Logf("%d expressions returned data, %d returned none where the CPU has no such series; none failed", withData, without)
}

// TestInstantQueryError checks that an error of the API (here a PromQL one,
// as the server words it) is an error of instantQuery, not "no data".
func TestInstantQueryError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/api/v1/query", r.URL.Path)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:6: parse error: expected type range vector in call to function \"rate\", got instant vector"}`)
	}))
	defer srv.Close()
	n, err := instantQuery(srv.URL, "rate(x)")
	assert.ErrorContains(t, err, "bad_data: invalid parameter")
	assert.Zero(t, n)
}
