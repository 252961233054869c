package trace_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drawn is a mark or span as a viewer shows it.
type drawn struct {
	Name    string
	Ph      string
	Tid     int
	Ts, Dur float64
}

// marksOf returns the trace's marks and spans, and its threads' names.
func marksOf(t *testing.T, h memtrack.History) ([]drawn, map[int]string) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, trace.Write(&buf, h))
	var out []drawn
	threads := map[int]string{}
	for _, e := range parse(t, buf.Bytes()).TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			threads[e.Tid] = e.Args["name"].(string)
		case e.Cat == "memtrack.mark" || e.Cat == "memtrack.span":
			out = append(out, drawn{e.Name, e.Ph, e.Tid, e.Ts, e.Dur})
		case e.Ph == "C":
			assert.NotContains(t, []float64{5000, 6000}, e.Ts, "a mark is no point of the counters")
		}
	}
	return out, threads
}

func TestWriteMarks(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(seq uint64, ms int, a memtrack.HistoryAction, mark string, span uint64, tracked int64) memtrack.HistoryEvent {
		return memtrack.HistoryEvent{Seq: seq, Time: at(ms), Action: a, Mark: mark, Span: span, Tracked: tracked}
	}
	h := memtrack.History{Device: memtrack.CPU(), MaxEntries: 64, Start: start, Events: []memtrack.HistoryEvent{
		ev(0, 1, memtrack.HistoryBegin, "load weights", 0, 0),
		{Seq: 1, Time: at(2), Action: memtrack.HistoryAlloc, Size: 100, Tracked: 100},
		ev(2, 3, memtrack.HistoryEnd, "load weights", 0, 100),
		ev(3, 4, memtrack.HistoryBegin, "pass", 3, 100),
		ev(4, 5, memtrack.HistoryMark, "halfway", 0, 100),
		ev(5, 6, memtrack.HistoryBegin, "layer", 5, 100),   // nests in pass
		ev(6, 7, memtrack.HistoryBegin, "overlap", 6, 100), // ends after pass: another lane
		ev(7, 8, memtrack.HistoryEnd, "layer", 5, 100),
		ev(8, 9, memtrack.HistoryEnd, "pass", 3, 100),
		ev(9, 10, memtrack.HistoryEnd, "overlap", 6, 100),
		ev(10, 11, memtrack.HistoryBegin, "cache", 10, 100), // still open
		{Seq: 11, Time: at(12), Action: memtrack.HistoryFree, Size: 100, Tracked: 0},
	}}
	got, threads := marksOf(t, h)
	assert.ElementsMatch(t, []drawn{
		{"halfway", "i", 3, 5000, 0},
		{"load weights", "X", 3, 1000, 2000},
		{"pass", "X", 3, 4000, 5000},
		{"layer", "X", 3, 6000, 2000},
		{"overlap", "X", 4, 7000, 3000},
		{"cache", "X", 3, 11000, 1000},
	}, got)
	assert.Equal(t, "marks", threads[3])
	assert.Equal(t, "marks 2", threads[4])
}

// TestWriteSpanBeginLost: a span whose begin the ring let go starts at the
// history's first event, and says so.
func TestWriteSpanBeginLost(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	h := memtrack.History{Device: memtrack.CPU(), MaxEntries: 2, Start: start, Overwritten: 5, Events: []memtrack.HistoryEvent{
		{Seq: 5, Time: at(2), Action: memtrack.HistoryAlloc, Size: 1, Tracked: 1},
		{Seq: 6, Time: at(3), Action: memtrack.HistoryEnd, Mark: "old", Span: 1, Tracked: 1},
	}}
	var buf bytes.Buffer
	require.NoError(t, trace.Write(&buf, h))
	var n int
	for _, e := range parse(t, buf.Bytes()).TraceEvents {
		if e.Cat == "memtrack.span" {
			n++
			assert.Equal(t, "old", e.Name)
			assert.Equal(t, 2000.0, e.Ts)
			assert.Equal(t, 1000.0, e.Dur)
			assert.Equal(t, true, e.Args["begin_lost"])
			assert.Equal(t, 6.0, e.Args["end_seq"])
		}
	}
	assert.Equal(t, 1, n)
}

func TestWriteRealMarks(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(64))
	defer d.History().Disable()
	sp, err := d.History().BeginSpan("load weights")
	require.NoError(t, err)
	b, err := d.Alloc(1 << 10)
	require.NoError(t, err)
	require.NoError(t, sp.End())
	require.NoError(t, d.History().Mark("loaded"))
	require.NoError(t, b.Free())
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	got, _ := marksOf(t, h)
	require.Len(t, got, 2)
	names := []string{got[0].Name, got[1].Name}
	assert.ElementsMatch(t, []string{"load weights", "loaded"}, names)
	for _, g := range got {
		if g.Ph == "X" {
			assert.Positive(t, g.Dur)
		}
	}
}
