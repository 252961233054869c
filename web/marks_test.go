package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlotterMarks: marks are no points, spans pair and take lanes, and a
// mark between two events does not make a gap of itself.
func TestPlotterMarks(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	point := func(seq uint64, ms int, cur int64) memtrack.HistoryEvent {
		return memtrack.HistoryEvent{Seq: seq, Time: at(ms), Action: memtrack.HistoryAlloc, Size: 1, Tracked: cur}
	}
	mark := func(seq uint64, ms int, a memtrack.HistoryAction, name string, span uint64) memtrack.HistoryEvent {
		return memtrack.HistoryEvent{Seq: seq, Time: at(ms), Action: a, Mark: name, Span: span, Tracked: 99}
	}
	events := []memtrack.HistoryEvent{
		mark(0, 1, memtrack.HistoryBegin, "load weights", 0),
		point(1, 2, 10),
		mark(2, 3, memtrack.HistoryEnd, "load weights", 0),
		mark(3, 4, memtrack.HistoryMark, "loaded", 0),
		mark(4, 5, memtrack.HistoryBegin, "pass", 4),
		mark(5, 6, memtrack.HistoryBegin, "side", 5),
		point(6, 7, 20),
		mark(7, 8, memtrack.HistoryEnd, "pass", 4),
		point(8, 9, 10),
		mark(9, 10, memtrack.HistoryBegin, "cache", 9),
	}
	p := newPlotter(MaxPoints)
	out := p.finish(feed(p, start, events), 20, nil)
	assert.Equal(t, []float64{2, 7, 9}, out.T, "marks are no points")
	assert.Equal(t, []int64{10, 20, 10}, out.Bytes)
	assert.Empty(t, out.Gaps)
	assert.Equal(t, 10, out.Events)
	assert.Equal(t, 7, out.MarkEvents)
	assert.Equal(t, []Mark{
		{Name: "load weights", T: 1, Span: true, End: 3},
		{Name: "loaded", T: 4},
		{Name: "pass", T: 5, Span: true, End: 8},
		{Name: "side", T: 6, Span: true, End: 10, Lane: 1, Open: true},
		{Name: "cache", T: 10, Span: true, End: 10, Open: true},
	}, out.Marks)
	assert.Zero(t, out.MarksLeftOut)

	// A gap before a mark is still a gap before the next point.
	p = newPlotter(MaxPoints)
	h := feed(p, start, []memtrack.HistoryEvent{point(0, 1, 1), mark(3, 2, memtrack.HistoryMark, "m", 0), point(4, 3, 2)})
	out = p.finish(h, 2, nil)
	assert.Equal(t, []float64{1, 3}, out.T)
	assert.Len(t, out.Gaps, 1)
}

func TestPlotterMaxMarks(t *testing.T) {
	start := time.Now()
	var events []memtrack.HistoryEvent
	for i := range MaxMarks + 5 {
		events = append(events, memtrack.HistoryEvent{Seq: uint64(i), Time: start.Add(time.Duration(i) * time.Millisecond), Action: memtrack.HistoryMark, Mark: fmt.Sprint("m", i)})
	}
	p := newPlotter(MaxPoints)
	out := p.finish(feed(p, start, events), 0, nil)
	require.Len(t, out.Marks, MaxMarks)
	assert.Equal(t, "m5", out.Marks[0].Name, "the newest are kept")
	assert.Equal(t, 5, out.MarksLeftOut)
	assert.Empty(t, out.T)
}

// TestReadMarks: the page's figures carry a device's marks.
func TestReadMarks(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(100))
	defer d.History().Disable()
	sp, err := d.History().BeginSpan("load weights")
	require.NoError(t, err)
	b, err := d.Alloc(1 << 10)
	require.NoError(t, err)
	defer b.Free()
	require.NoError(t, sp.End())
	require.NoError(t, d.History().Mark("loaded"))
	var dev *Device
	page := Read()
	for i := range page.Devices {
		if page.Devices[i].Name == "cpu" {
			dev = &page.Devices[i]
		}
	}
	require.NotNil(t, dev)
	require.NotNil(t, dev.History)
	require.Len(t, dev.History.Marks, 2)
	assert.Equal(t, "load weights", dev.History.Marks[0].Name)
	assert.True(t, dev.History.Marks[0].Span)
	assert.Greater(t, dev.History.Marks[0].End, dev.History.Marks[0].T)
	assert.Equal(t, Mark{Name: "loaded", T: dev.History.Marks[1].T}, dev.History.Marks[1])
	assert.Len(t, dev.History.T, 1, "one point: the allocation")
}

// TestPlotterManyMarks: a history of many more marks and spans than
// MaxMarks keeps memory for about MaxMarks of each, and sends the newest.
func TestPlotterManyMarks(t *testing.T) {
	start := time.Now()
	p := newPlotter(MaxPoints)
	var events []memtrack.HistoryEvent
	for i := range 20 * MaxMarks {
		seq := uint64(3 * i)
		at := start.Add(time.Duration(i) * time.Millisecond)
		events = append(events,
			memtrack.HistoryEvent{Seq: seq, Time: at, Action: memtrack.HistoryMark, Mark: "m"},
			memtrack.HistoryEvent{Seq: seq + 1, Time: at, Action: memtrack.HistoryBegin, Mark: "s", Span: seq + 1},
			memtrack.HistoryEvent{Seq: seq + 2, Time: at, Action: memtrack.HistoryEnd, Mark: "s", Span: seq + 1})
	}
	h := feed(p, start, events)
	assert.Less(t, len(p.instants), 2*MaxMarks)
	out := p.finish(h, 0, nil)
	require.Len(t, out.Marks, MaxMarks)
	assert.Equal(t, 2*20*MaxMarks-MaxMarks, out.MarksLeftOut)
	assert.Equal(t, float64(20*MaxMarks-1), out.Marks[len(out.Marks)-1].T, "the newest are sent")
}
