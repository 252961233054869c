package oomdump

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limited sets a memory limit on the CPU that leaves room for room bytes
// beside what it holds, for the test.
func limited(t *testing.T, room int64) memtrack.Device {
	t.Helper()
	cpu := memtrack.CPU()
	require.NoError(t, cpu.SetMemoryLimit(cpu.MemoryAllocated()+room))
	t.Cleanup(func() { require.NoError(t, cpu.SetMemoryLimit(0)) })
	return cpu
}

// recordEverything turns on allocation sites (every allocation) and the
// memory history of d for the test.
func recordEverything(t *testing.T, d memtrack.Device) {
	t.Helper()
	require.NoError(t, d.Sites().SetRate(1))
	require.NoError(t, d.Sites().Enable(16))
	require.NoError(t, d.History().Enable(1024))
	t.Cleanup(func() {
		d.Sites().Disable()
		d.History().Disable()
		require.NoError(t, d.Sites().SetRate(0))
	})
}

//go:noinline
func holdWeights(t *testing.T, d memtrack.Device, n int64) *memtrack.Buffer {
	b, err := d.Alloc(n)
	require.NoError(t, err)
	return b
}

// clock is a settable time for the Dumper's rate.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// clocked makes du dump at the times of clk instead of the wall clock's:
// it replaces the observer that Install registered by one that gives du
// the refusals as that one does (Dumper.observe), at clk's time.
func clocked(t *testing.T, du *Dumper, clk *clock) {
	t.Helper()
	require.NoError(t, du.obs.Remove())
	obs, err := du.dev.OnOutOfMemory(func(e *memtrack.OutOfMemoryError) { du.dump(e, clk.now()) })
	require.NoError(t, err)
	du.obs = obs
}

func TestDump(t *testing.T) {
	d := limited(t, 1<<20)
	recordEverything(t, d)
	dir := filepath.Join(t.TempDir(), "dumps") // created by the first dump
	du, err := Install(d, dir, Options{MinInterval: time.Hour})
	require.NoError(t, err)
	defer du.Remove()
	clk := &clock{t: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)}
	clocked(t, du, clk)

	load, err := d.History().BeginSpan("load weights")
	require.NoError(t, err)
	w := holdWeights(t, d, 768<<10)
	defer w.Free()
	require.NoError(t, load.End())
	pass, err := d.History().BeginSpan("pass") // open when the refusal is dumped
	require.NoError(t, err)
	defer pass.End()
	_, err = d.Alloc(512 << 10)
	var oom *memtrack.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	dumps := du.Dumps()
	require.Len(t, dumps, 1)
	assert.True(t, strings.HasPrefix(filepath.Base(dumps[0]), "oom-cpu-20260102T150405Z-"), dumps[0])

	report, err := os.ReadFile(filepath.Join(dumps[0], "report.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "memtrack: out of memory on cpu: tried to allocate 512 KiB (524288 B)")
	assert.Contains(t, string(report), "oomdump.holdWeights", "the largest holder")
	assert.NotContains(t, string(report), "not written")

	var st memtrack.Stats
	raw, err := os.ReadFile(filepath.Join(dumps[0], "stats.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &st))
	assert.Equal(t, d.MemoryStats(), st)

	for name, sample := range map[string]string{"inuse.pb.gz": "inuse_space", "peak.pb.gz": "peak_inuse_space"} {
		f, err := os.Open(filepath.Join(dumps[0], name))
		require.NoError(t, err)
		p, err := profile.Parse(f)
		f.Close()
		require.NoError(t, err, name)
		assert.Equal(t, sample, p.SampleType[1].Type, name)
		found := false
		for _, s := range p.Sample {
			for _, l := range s.Location {
				for _, line := range l.Line {
					found = found || strings.HasSuffix(line.Function.Name, "oomdump.holdWeights")
				}
			}
		}
		assert.True(t, found, "%s attributes the weights to holdWeights", name)
	}
	tr, err := os.ReadFile(filepath.Join(dumps[0], "trace.json"))
	require.NoError(t, err)
	assert.Contains(t, string(tr), `"ph":"C"`)
	var parsed struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Args          map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(tr, &parsed))
	spans := map[string]bool{} // by name: open
	for _, e := range parsed.TraceEvents {
		if e.Cat == "memtrack.span" && e.Ph == "X" {
			spans[e.Name] = e.Args["open"] == true
		}
	}
	assert.Equal(t, map[string]bool{"load weights": false, "pass": true}, spans, "the phases in the dump's trace, the refused one open")

	// Within the interval: no dump. Past it: a second one.
	_, err = d.Alloc(512 << 10)
	require.Error(t, err)
	assert.Len(t, du.Dumps(), 1)
	assert.Equal(t, 1, du.Skipped())
	clk.t = clk.t.Add(time.Hour)
	_, err = d.Alloc(512 << 10)
	require.Error(t, err)
	assert.Len(t, du.Dumps(), 2)
	assert.Zero(t, du.Unwritten())
}

// TestDumpWithoutRecording: without sites and history, the dump holds the
// report and the stats, and the report says what is missing and why.
func TestDumpWithoutRecording(t *testing.T) {
	d := limited(t, 1<<10)
	path, err := Write(t.TempDir(), refusal(t, d))
	require.NoError(t, err)
	names := files(t, path)
	assert.Equal(t, []string{"report.txt", "stats.json"}, names)
	report, err := os.ReadFile(filepath.Join(path, "report.txt"))
	require.NoError(t, err)
	for _, f := range []string{"inuse.pb.gz", "peak.pb.gz", "trace.json"} {
		assert.Contains(t, string(report), "dump: "+f+": not written: ")
	}
}

func refusal(t *testing.T, d memtrack.Device) *memtrack.OutOfMemoryError {
	t.Helper()
	_, err := d.Alloc(1 << 20)
	var oom *memtrack.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	return oom
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestDumpUnwritable: a directory that cannot be made (under a regular
// file, which fails even for root) is reported once through slog, and the
// allocation's error and figures are those without a dumper.
func TestDumpUnwritable(t *testing.T) {
	d := limited(t, 1<<10)
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	var log bytes.Buffer
	du, err := Install(d, filepath.Join(blocker, "dumps"), Options{MinInterval: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	defer du.Remove()
	clk := &clock{t: time.Unix(1e9, 0)}
	clocked(t, du, clk)

	want := refusal(t, d).Error()
	for range 3 {
		clk.t = clk.t.Add(time.Second)
		before := d.MemoryStats()
		got := refusal(t, d)
		assert.Equal(t, want, got.Error(), "the allocation's error is unchanged")
		before.FailedAllocs++
		assert.Equal(t, before, d.MemoryStats())
	}
	assert.Equal(t, 4, du.Unwritten())
	assert.Empty(t, du.Dumps())
	assert.Equal(t, 1, strings.Count(log.String(), "could not be written"), "reported once:\n%s", log.String())
	assert.Contains(t, log.String(), "not a directory")
}

func TestInstallErrors(t *testing.T) {
	d := memtrack.CPU()
	_, err := Install(d, "", Options{})
	assert.ErrorIs(t, err, ErrInvalidDir)
	_, err = Install(d, t.TempDir(), Options{MinInterval: -time.Second})
	assert.ErrorIs(t, err, memtrack.ErrInvalidArgument)
	_, err = Write("", &memtrack.OutOfMemoryError{})
	assert.ErrorIs(t, err, ErrInvalidDir)
	_, err = Write(t.TempDir(), nil)
	assert.ErrorIs(t, err, memtrack.ErrInvalidArgument)

	du, err := Install(d, t.TempDir(), Options{})
	require.NoError(t, err)
	require.NoError(t, du.Remove())
	assert.ErrorIs(t, du.Remove(), memtrack.ErrInvalidArgument, "removed twice")
}

// TestDumpNoRecursion: an allocation refused while the device's observers
// run (here another observer's, before the dump) writes no second dump:
// the observers do not run again until they have returned.
func TestDumpNoRecursion(t *testing.T) {
	d := limited(t, 1<<10)
	var nested error
	o, err := d.OnOutOfMemory(func(*memtrack.OutOfMemoryError) { _, nested = d.Alloc(1 << 20) })
	require.NoError(t, err)
	defer o.Remove()
	du, err := Install(d, t.TempDir(), Options{MinInterval: time.Nanosecond})
	require.NoError(t, err)
	defer du.Remove()
	clk := &clock{t: time.Unix(1e9, 0)}
	clocked(t, du, clk)

	refusal(t, d)
	assert.ErrorIs(t, nested, memtrack.ErrOutOfMemory)
	assert.Len(t, du.Dumps(), 1)
	assert.Zero(t, du.Skipped(), "the nested refusal did not reach the dumper at all")
}

// TestDumpCategories: the dump of a device with categories holds their
// rows, in the report and in stats.json; without categories stats.json
// has none.
func TestDumpCategories(t *testing.T) {
	d := limited(t, 1<<20)
	weights, err := d.Category(memtrack.CategoryWeights)
	require.NoError(t, err)
	kv, err := d.Category(memtrack.CategoryKVCache)
	require.NoError(t, err)
	dir := t.TempDir()
	du, err := Install(d, dir, Options{})
	require.NoError(t, err)
	defer du.Remove()
	w, err := weights.Alloc(768 << 10)
	require.NoError(t, err)
	defer w.Free()
	_, err = kv.Alloc(512 << 10)
	require.ErrorIs(t, err, memtrack.ErrOutOfMemory)
	require.Len(t, du.Dumps(), 1)

	report, err := os.ReadFile(filepath.Join(du.Dumps()[0], "report.txt"))
	require.NoError(t, err)
	assert.Regexp(t, `\n    weights +768 KiB \(786432 B\) +768 KiB \(786432 B\) +none\n`, string(report))
	assert.Regexp(t, `\n    kv_cache \(the request's\) +0 B +0 B +none\n`, string(report))

	raw, err := os.ReadFile(filepath.Join(du.Dumps()[0], "stats.json"))
	require.NoError(t, err)
	var got struct {
		memtrack.Stats
		Categories []memtrack.CategoryStats
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.Equal(t, d.MemoryStats(), got.Stats)
	require.Len(t, got.Categories, 3)
	assert.Equal(t, d.CategoryStats(), got.Categories)
	assert.Equal(t, []string{"weights", "kv_cache", memtrack.Uncategorised},
		[]string{got.Categories[0].Category, got.Categories[1].Category, got.Categories[2].Category})
	assert.Equal(t, int64(768<<10), got.Categories[0].Tracked)
	assert.Equal(t, int64(1), got.Categories[1].FailedAllocs)
}
