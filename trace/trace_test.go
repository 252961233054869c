package trace_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// history is a CPU history with every kind of event and a gap, 1 ms apart.
func history(start time.Time) memtrack.History {
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	return memtrack.History{
		Device: memtrack.CPU(), MaxEntries: 16, Start: start,
		Events: []memtrack.HistoryEvent{
			{Seq: 0, Time: at(1), Action: memtrack.HistoryAlloc, Size: 100, Tracked: 100},
			{Seq: 1, Time: at(2), Action: memtrack.HistoryAlloc, Size: 300, Tracked: 400},
			{Seq: 2, Time: at(3), Action: memtrack.HistoryLimit, Size: 700, Tracked: 400},
			{Seq: 3, Time: at(4), Action: memtrack.HistoryFree, Size: 100, Tracked: 300},
			{Seq: 6, Time: at(7), Action: memtrack.HistoryOutOfMemory, Size: 1 << 40, Tracked: 300},
			{Seq: 7, Time: at(8), Action: memtrack.HistoryFree, Size: 300, Tracked: 0},
		},
		Gaps: []memtrack.HistoryGap{{After: 3, Before: 6, Missing: 2, From: at(4), To: at(7)}},
	}
}

// parse reads a trace as a viewer would: JSON, then the events.
func parse(t *testing.T, data []byte) trace.File {
	t.Helper()
	var f trace.File
	require.NoError(t, json.Unmarshal(data, &f), "%s", data)
	return f
}

func TestWrite(t *testing.T) {
	start := time.Now()
	var buf bytes.Buffer
	require.NoError(t, trace.Write(&buf, history(start)))
	f := parse(t, buf.Bytes())
	assert.Equal(t, "ms", f.DisplayTimeUnit)

	type point struct {
		Ts    float64
		Bytes float64
	}
	var counter []point
	var instants, slices, meta []string
	for _, e := range f.TraceEvents {
		assert.Equal(t, 1, e.Pid, "one process for the one device")
		switch e.Ph {
		case "C":
			assert.Equal(t, "allocated", e.Name)
			counter = append(counter, point{e.Ts, e.Args["bytes"].(float64)})
		case "i":
			instants = append(instants, e.Name)
			switch e.Name {
			case "limit":
				assert.Equal(t, 3000.0, e.Ts)
				assert.Equal(t, 700.0, e.Args["requested"])
				assert.Equal(t, 400.0, e.Args["allocated"])
			case "out of memory":
				assert.Equal(t, 7000.0, e.Ts)
				assert.Equal(t, float64(1<<40), e.Args["requested"])
			case "highest in the history":
				assert.Equal(t, 2000.0, e.Ts)
				assert.Equal(t, 400.0, e.Args["allocated"])
			}
		case "X":
			slices = append(slices, e.Name)
			assert.Equal(t, 4000.0, e.Ts)
			assert.Equal(t, 3000.0, e.Dur)
			assert.Equal(t, 2.0, e.Args["missing"])
		case "M":
			if e.Name == "process_name" {
				meta = append(meta, e.Args["name"].(string))
			}
		}
	}
	assert.Equal(t, []point{{1000, 100}, {2000, 400}, {4000, 300}, {8000, 0}}, counter, "refusals leave the counter alone")
	assert.ElementsMatch(t, []string{"limit", "out of memory", "highest in the history"}, instants)
	assert.Equal(t, []string{"gap: 2 events lost"}, slices)
	assert.Equal(t, []string{"memtrack cpu"}, meta)
}

func TestWriteDevicesShareTheClock(t *testing.T) {
	start := time.Now()
	a := history(start)
	b := history(start.Add(-time.Second)) // began a second earlier
	b.Events = b.Events[:1]
	b.Gaps = nil
	var buf bytes.Buffer
	require.NoError(t, trace.Write(&buf, a, b))
	f := parse(t, buf.Bytes())
	first := map[int]float64{}
	for _, e := range f.TraceEvents {
		if _, ok := first[e.Pid]; !ok && e.Ph == "C" {
			first[e.Pid] = e.Ts
		}
	}
	assert.Equal(t, map[int]float64{1: 1001000, 2: 1000}, first, "times count from the earliest start")
}

func TestWriteRealHistory(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(64))
	defer d.History().Disable()
	base := d.MemoryAllocated()
	var bufs []*memtrack.Buffer
	for i := range 5 {
		b, err := d.Alloc(int64(i+1) << 10)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		require.NoError(t, b.Free())
	}
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, trace.Write(&buf, h))
	var peak float64
	for _, e := range parse(t, buf.Bytes()).TraceEvents {
		if e.Ph == "i" && e.Name == "highest in the history" {
			peak = e.Args["allocated"].(float64)
		}
	}
	assert.Equal(t, float64(base+15<<10), peak)
}

// TestWriteHistoryNotRecorded: the history of a device that does not
// record (MemoryHistory's answer with its error: no start, no events) is
// written as an empty process and moves no other history's times.
func TestWriteHistoryNotRecorded(t *testing.T) {
	start := time.Now()
	empty, err := memtrack.CPU().History().Snapshot()
	require.ErrorIs(t, err, memtrack.ErrHistoryNotRecorded)
	for _, order := range [][]memtrack.History{{history(start), empty}, {empty, history(start)}} {
		var buf bytes.Buffer
		require.NoError(t, trace.Write(&buf, order...))
		var ts []float64
		for _, e := range parse(t, buf.Bytes()).TraceEvents {
			if e.Ph == "C" {
				ts = append(ts, e.Ts)
			}
		}
		assert.Equal(t, []float64{1000, 2000, 4000, 8000}, ts, "times count from the recorded history's start")
	}
}

// TestWriteGapDurations: every gap is a slice with a duration of zero or
// more, where its neighbours share an instant and where their times are
// out of order (their times are read before their numbers are taken).
func TestWriteGapDurations(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name     string
		from, to time.Time
		ts, dur  float64
	}{
		{"in order", at(1), at(3), 1000, 2000},
		{"same instant", at(2), at(2), 2000, 0},
		{"out of order", at(3), at(2), 2000, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := memtrack.History{Device: memtrack.CPU(), MaxEntries: 8, Start: start,
				Events: []memtrack.HistoryEvent{
					{Seq: 0, Time: tc.from, Action: memtrack.HistoryAlloc, Size: 1, Tracked: 1},
					{Seq: 2, Time: tc.to, Action: memtrack.HistoryFree, Size: 1, Tracked: 0},
				},
				Gaps: []memtrack.HistoryGap{{After: 0, Before: 2, Missing: 1, From: tc.from, To: tc.to}},
			}
			var buf bytes.Buffer
			require.NoError(t, trace.Write(&buf, h))
			var raw struct {
				TraceEvents []map[string]any `json:"traceEvents"`
			}
			require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
			var gaps int
			for _, e := range raw.TraceEvents {
				if e["ph"] != "X" {
					continue
				}
				gaps++
				require.Contains(t, e, "dur", "a complete event needs its duration: %v", e)
				assert.Equal(t, tc.ts, e["ts"])
				assert.Equal(t, tc.dur, e["dur"])
			}
			assert.Equal(t, 1, gaps)
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	err := trace.Write(failWriter{}, history(time.Now()))
	assert.ErrorContains(t, err, "memtrack: writing the trace: disk full")
}

// TestByCategory: a history with events in categories has the counter "by
// category", whose series add up to the tracked bytes after each event.
func TestByCategory(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	h := memtrack.History{
		Device: memtrack.CPU(), MaxEntries: 16, Start: start,
		Events: []memtrack.HistoryEvent{
			{Seq: 0, Time: at(1), Action: memtrack.HistoryAlloc, Size: 100, Tracked: 100, Category: "weights", CategoryTracked: 100},
			{Seq: 1, Time: at(2), Action: memtrack.HistoryAlloc, Size: 50, Tracked: 150},
			{Seq: 2, Time: at(3), Action: memtrack.HistoryAlloc, Size: 30, Tracked: 180, Category: "kv_cache", CategoryTracked: 30},
			{Seq: 3, Time: at(4), Action: memtrack.HistoryLimit, Size: 900, Tracked: 180, Category: "kv_cache", CategoryTracked: 30},
			{Seq: 4, Time: at(5), Action: memtrack.HistoryFree, Size: 100, Tracked: 80, Category: "weights"},
		},
	}
	var got []map[string]any
	for _, e := range trace.Events(h) {
		if e.Name == "by category" {
			assert.Equal(t, "C", e.Ph)
			got = append(got, e.Args)
		}
	}
	assert.Equal(t, []map[string]any{
		{"weights": int64(100), "uncategorised": int64(0)},
		{"weights": int64(100), "uncategorised": int64(50)},
		{"weights": int64(100), "kv_cache": int64(30), "uncategorised": int64(50)},
		{"weights": int64(0), "kv_cache": int64(30), "uncategorised": int64(50)},
	}, got, "one point per allocation or free, none for the refusal")

	for _, e := range trace.Events(history(start)) {
		assert.NotEqual(t, "by category", e.Name, "no such counter without categories")
	}
}
