package memtrack

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stackHere returns the caller's stack, to stand for an allocation site.
//
//go:noinline
func stackHere() []uintptr {
	pcs := make([]uintptr, 8)
	return pcs[:runtime.Callers(2, pcs)]
}

//go:noinline
func siteA() []uintptr { return stackHere() }

//go:noinline
func siteB() []uintptr { return stackHere() }

// logLines decodes the JSON lines slog wrote.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(buf)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		out = append(out, m)
	}
	return out
}

func TestLeakLoggerOneWarningPerSitePerInterval(t *testing.T) {
	var buf bytes.Buffer
	g := NewLeakLogger(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := siteA(), siteB()
	cuda := Device{kind: KindCUDA}

	g.handle(Leak{Device: cuda, Size: 10, Stack: a, Collected: true}, now)
	g.handle(Leak{Device: cuda, Size: 20, Stack: a, Collected: true}, now)  // within the minute: counted
	g.handle(Leak{Device: cuda, Size: 30, Stack: b, Collected: true}, now)  // another site: logged
	g.handle(Leak{Device: CPU(), Size: 40, Stack: a, Collected: true}, now) // another device: logged
	lines := logLines(t, &buf)
	require.Len(t, lines, 3)
	assert.Equal(t, "WARN", lines[0]["level"])
	assert.Equal(t, "memtrack: leaked buffer: the garbage collector found it unreachable without a free", lines[0]["msg"])
	assert.Equal(t, "github.com/memtrack/memtrack.siteA", lines[0]["site"])
	assert.Equal(t, "cuda:0", lines[0]["device"])
	assert.Equal(t, float64(10), lines[0]["bytes"])
	assert.Equal(t, float64(1), lines[0]["leaks"])
	assert.Equal(t, "github.com/memtrack/memtrack.siteB", lines[1]["site"])
	assert.Equal(t, "cpu", lines[2]["device"])
	assert.Contains(t, lines[0]["stack"], "memtrack.siteA (leak_log_test.go:")

	now = now.Add(time.Minute)
	g.handle(Leak{Device: cuda, Size: 50, Stack: a, Collected: true}, now)
	lines = logLines(t, &buf)
	require.Len(t, lines, 1)
	assert.Equal(t, float64(2), lines[0]["leaks"], "the leak held back, and this one")
	assert.Equal(t, float64(70), lines[0]["leaked_bytes"])
	assert.Equal(t, float64(50), lines[0]["bytes"])
}

func TestLeakLoggerBoundsItsSites(t *testing.T) {
	var buf bytes.Buffer
	g := NewLeakLogger(slog.New(slog.NewJSONHandler(&buf, nil)), time.Hour)
	for i := range maxLeakLogSites + 10 {
		g.Handle(Leak{Device: CPU(), Size: 1, Stack: []uintptr{uintptr(i + 1)}})
	}
	assert.Equal(t, maxLeakLogSites+1, len(g.sites), "the sites, and one rate for the rest")
	// The sites past the bound share the rate of leaks without a site: one
	// warning for the ten of them.
	assert.Equal(t, maxLeakLogSites+1, len(logLines(t, &buf)))
}

func TestLeakLoggerEveryLeakAtZeroInterval(t *testing.T) {
	var buf bytes.Buffer
	g := NewLeakLogger(slog.New(slog.NewJSONHandler(&buf, nil)), 0)
	for range 3 {
		g.Handle(Leak{Device: CPU(), Size: 1, Tracked: true, Collected: true, Err: errFakeDriver})
	}
	lines := logLines(t, &buf)
	require.Len(t, lines, 3)
	assert.Equal(t, "unknown", lines[0]["site"])
	assert.Equal(t, "memtrack: leaked tracked handle: the garbage collector found it unreachable without a free", lines[0]["msg"])
	assert.Equal(t, errFakeDriver.Error(), lines[0]["error"])
}
