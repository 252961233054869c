package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/prom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dashboard is the part of Grafana's dashboard model that the tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion float64 `json:"schemaVersion"`
	Time          *struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	GridPos    *gridPos        `json:"gridPos"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []target        `json:"targets"`
}

type gridPos struct{ H, W, X, Y int }

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// panelTypes are the panel plugins built into Grafana that a dashboard here
// may use.
var panelTypes = []string{"timeseries", "stat", "gauge", "bargauge", "table", "text", "row"}

// builtinVariables are Grafana's own variables.
var builtinVariables = []string{"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms", "__all"}

// exported returns the names of every metric the collector describes.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { prom.NewCollector().Describe(ch); close(ch) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, m, "no name in %v", d)
		names[m[1]] = true
	}
	require.Contains(t, names, "memtrack_tracked_bytes", "the collector's descriptions were read")
	return names
}

// external reports whether a metric comes from another exporter that the
// dashboard joins: dcgm-exporter's DCGM_ metrics.
func external(name string) bool { return strings.HasPrefix(name, "DCGM_") }

// check returns every problem of the dashboard model in data: fields
// Grafana requires, panels that overlap, variables used but not defined,
// and metrics that neither the collector exports nor external allows.
func check(data []byte, metrics map[string]bool) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []error{fmt.Errorf("not a JSON dashboard: %w", err)}
	}
	if d.Title == "" {
		fail("no title")
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`).MatchString(d.UID) {
		fail("uid %q is not 1 to 40 letters, digits, - or _", d.UID)
	}
	if d.SchemaVersion < 36 {
		fail("schemaVersion %v: Grafana 9 and later write 36 or more", d.SchemaVersion)
	}
	if d.Time == nil || d.Time.From == "" || d.Time.To == "" {
		fail("no time range")
	}
	if len(d.Panels) == 0 {
		fail("no panels")
	}

	defined := slices.Clone(builtinVariables)
	var exprs []string
	for _, v := range d.Templating.List {
		if v.Name == "" || v.Type == "" {
			fail("variable %+v has no name or type", v)
		}
		defined = append(defined, v.Name)
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil || q.Query == "" {
			fail("variable %s has no query", v.Name)
			continue
		}
		// label_values(selector, label): the selector names a metric.
		m := regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_]\w*\)$`).FindStringSubmatch(q.Query)
		if m == nil {
			fail("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		exprs = append(exprs, m[1])
	}

	ids := map[int]bool{}
	for i, p := range d.Panels {
		name := fmt.Sprintf("panel %d (%q)", i, p.Title)
		if p.ID <= 0 || ids[p.ID] {
			fail("%s: id %d is not positive and unique", name, p.ID)
		}
		ids[p.ID] = true
		if !slices.Contains(panelTypes, p.Type) {
			fail("%s: type %q is none of %v", name, p.Type, panelTypes)
		}
		if p.Title == "" {
			fail("%s: no title", name)
		}
		g := p.GridPos
		if g == nil || g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			fail("%s: gridPos %+v is not within the 24 columns", name, g)
		} else {
			for _, q := range d.Panels[:i] {
				if h := q.GridPos; h != nil && g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
					fail("%s overlaps panel %q", name, q.Title)
				}
			}
		}
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if len(p.Datasource) == 0 {
			fail("%s: no datasource", name)
		}
		if len(p.Targets) == 0 {
			fail("%s: no targets", name)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				fail("%s: refId %q is empty or repeated", name, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Expr == "" {
				fail("%s: target %s has no expr", name, tg.RefID)
			}
			exprs = append(exprs, tg.Expr)
		}
	}

	for _, e := range exprs {
		for _, v := range variablesIn(e) {
			if !slices.Contains(defined, v) {
				fail("%q uses $%s, which the dashboard does not define", e, v)
			}
		}
		names, err := metricNames(e)
		if err != nil {
			fail("%q: %v", e, err)
		}
		if len(names) == 0 {
			fail("%q names no metric", e)
		}
		for _, n := range names {
			if !metrics[n] && !external(n) {
				fail("%q queries %s, which package prom does not export", e, n)
			}
		}
	}
	return errs
}

// variablesIn returns the Grafana variables ($name, ${name}) in expr.
func variablesIn(expr string) []string {
	var vs []string
	for _, m := range regexp.MustCompile(`\$\{?([A-Za-z_]\w*)`).FindAllStringSubmatch(expr, -1) {
		vs = append(vs, m[1])
	}
	return vs
}

// promqlWords are PromQL's keywords, aggregators (which may be followed by
// "by (...)" before their parenthesis) and the modifiers that take a list of
// labels in parentheses.
var (
	promqlWords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on", "ignoring", "group_left", "group_right",
		"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"}
	labelListWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
)

// metricNames returns the metric names a PromQL expression selects: its
// identifiers, less function and aggregation names (followed by "("),
// keywords, the label lists of by, on and the like, and what is inside
// strings, label matchers ({...}) and ranges ([...]). It is a scanner, not a
// parser: it is enough for the expressions of a dashboard, and an
// identifier it does not know as a keyword is taken for a metric, so that a
// mistake shows as an unknown metric instead of passing.
func metricNames(expr string) ([]string, error) {
	var names []string
	s := expr
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	nextNonSpace := func(i int) byte {
		for ; i < len(s); i++ {
			if s[i] != ' ' && s[i] != '\t' && s[i] != '\n' {
				return s[i]
			}
		}
		return 0
	}
	// skipTo returns the index after the closing byte that matches s[i].
	skipTo := func(i int, close byte) (int, error) {
		open := s[i]
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"', '\'', '`':
				k := strings.IndexByte(s[j+1:], s[j])
				if k < 0 {
					return 0, fmt.Errorf("unterminated string at %d", j)
				}
				j += k + 1
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("no %q to close %q at %d", close, open, i)
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			k := strings.IndexByte(s[i+1:], c)
			if k < 0 {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			i += k + 2
		case c == '{':
			j, err := skipTo(i, '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(i, ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$': // a Grafana variable
			i++
			for i < len(s) && (isPart(s[i]) || s[i] == '{' || s[i] == '}') {
				i++
			}
		case c >= '0' && c <= '9' || c == '.': // a number or duration
			for i < len(s) && (isPart(s[i]) || s[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(s) && isPart(s[j]) {
				j++
			}
			word := s[i:j]
			next := nextNonSpace(j)
			i = j
			switch {
			case slices.Contains(labelListWords, word) && next == '(':
				k := strings.IndexByte(s[j:], '(')
				end, err := skipTo(j+k, ')')
				if err != nil {
					return nil, err
				}
				i = end
			case slices.Contains(promqlWords, strings.ToLower(word)):
			case next == '(': // a function or aggregation
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names, nil
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`memtrack_tracked_bytes`, []string{"memtrack_tracked_bytes"}},
		{`memtrack_tracked_bytes{job=~"$job",backend="cuda"}`, []string{"memtrack_tracked_bytes"}},
		{`rate(memtrack_frees_total{instance=~"$instance"}[$__rate_interval])`, []string{"memtrack_frees_total"}},
		{`sum by (uuid) (a * on(instance, job) group_left(uuid) b)`, []string{"a", "b"}},
		{`max by (uuid) (label_replace(DCGM_FI_DEV_FB_USED, "uuid", "$1", "UUID", "(.+)")) * 1048576`, []string{"DCGM_FI_DEV_FB_USED"}},
		{`x and on(uuid) y offset 5m > bool 1e6`, []string{"x", "y"}},
		{`sum without(ordinal) (z) or vector(0)`, []string{"z"}},
		{`{__name__="x"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := metricNames(tt.expr)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	for _, bad := range []string{`x{a="b"`, `rate(x[5m)`, `label_replace(x, "a`, `sum by (a x`} {
		_, err := metricNames(bad)
		assert.Error(t, err, "%s", bad)
	}
}

// TestDashboards checks every dashboard of this folder.
func TestDashboards(t *testing.T) {
	files, err := filepath.Glob("*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	metrics := exported(t)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			assert.Empty(t, check(data, metrics))
		})
	}
}

// TestCheckFindsProblems proves that check fails where it should: each case
// spoils the real dashboard in one way.
func TestCheckFindsProblems(t *testing.T) {
	data, err := os.ReadFile("memtrack.json")
	require.NoError(t, err)
	metrics := exported(t)
	require.Empty(t, check(data, metrics))

	tests := []struct {
		name, old, new, want string
	}{
		{"misspelt metric", `memtrack_peak_tracked_bytes{`, `memtrack_alocated_peak_bytes{`, "memtrack_alocated_peak_bytes, which package prom does not export"},
		{"misspelt metric in a variable", `label_values(memtrack_device_info, job)`, `label_values(memtrack_device_infos, job)`, "memtrack_device_infos"},
		{"unknown variable", `instance=~\"$instance\"`, `instance=~\"$host\"`, "$host"},
		{"no uid", `"uid": "memtrack-device-memory"`, `"uid": ""`, "uid"},
		{"no title", `"title": "memtrack: device memory"`, `"title": ""`, "no title"},
		{"unknown panel type", `"type": "table"`, `"type": "tabel"`, "type \"tabel\""},
		{"too wide", `"w": 24,`, `"w": 25,`, "24 columns"},
		{"old schema", `"schemaVersion": 39`, `"schemaVersion": 16`, "schemaVersion"},
		{"not JSON", `{`, `[`, "not a JSON dashboard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spoilt := strings.Replace(string(data), tt.old, tt.new, 1)
			require.NotEqual(t, string(data), spoilt, "the case changes the dashboard")
			errs := check([]byte(spoilt), metrics)
			require.NotEmpty(t, errs)
			assert.Contains(t, fmt.Sprint(errs), tt.want)
		})
	}
}
