package web

import (
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
)

// TestCategorySeries plots a history with events in categories: at each
// point each category has the bytes of its latest event, and the rest of
// the tracked bytes is uncategorised; thinned or not, the series add up to
// the tracked bytes at every point.
func TestCategorySeries(t *testing.T) {
	start := time.Now()
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Millisecond) }
	events := []memtrack.HistoryEvent{
		{Seq: 0, Time: at(0), Action: memtrack.HistoryAlloc, Size: 100, Tracked: 100, Category: "weights", CategoryTracked: 100},
		{Seq: 1, Time: at(1), Action: memtrack.HistoryAlloc, Size: 10, Tracked: 110},
		{Seq: 2, Time: at(2), Action: memtrack.HistoryAlloc, Size: 40, Tracked: 150, Category: "activations", CategoryTracked: 40},
		{Seq: 3, Time: at(3), Action: memtrack.HistoryLimit, Size: 900, Tracked: 150, Category: "activations", CategoryTracked: 40},
		{Seq: 4, Time: at(4), Action: memtrack.HistoryFree, Size: 40, Tracked: 110, Category: "activations"},
	}
	plotted := func(limit int, evs []memtrack.HistoryEvent) *History {
		p := newPlotter(limit)
		for _, e := range evs {
			p.add(e)
		}
		return p.finish(memtrack.History{Start: start, MaxEntries: 16}, 150, nil)
	}
	h := plotted(100, events)
	assert.Equal(t, []SiteSeries{
		{Name: "weights", Bytes: []int64{100, 100, 100, 100}},
		{Name: "activations", Bytes: []int64{0, 0, 40, 0}},
		{Name: memtrack.Uncategorised, Bytes: []int64{0, 10, 10, 10}},
	}, h.Categories, "one value per point, none for the refusal")
	assert.Nil(t, plotted(100, events[1:2]).Categories, "no categories, no series")

	// A long history, thinned: the series still add up at every point.
	var long []memtrack.HistoryEvent
	var w, a int64
	var wantW, wantA []int64 // by event: the categories' bytes after it
	for i := range 5000 {
		e := memtrack.HistoryEvent{Seq: uint64(i), Time: at(i), Action: memtrack.HistoryAlloc}
		switch i % 3 {
		case 0:
			w += 3
			e.Category, e.CategoryTracked = "weights", w
		case 1:
			a = int64(i % 50)
			e.Category, e.CategoryTracked = "activations", a
		}
		e.Tracked = w + a + int64(i%7)
		long = append(long, e)
		wantW, wantA = append(wantW, w), append(wantA, a)
	}
	h = plotted(64, long)
	assert.Less(t, len(h.T), 5000, "thinned")
	for j, ms := range h.T {
		i := int(ms + 0.5) // the point's event: event i is at i ms
		assert.Equal(t, []int64{wantW[i], wantA[i], int64(i % 7)},
			[]int64{h.Categories[0].Bytes[j], h.Categories[1].Bytes[j], h.Categories[2].Bytes[j]}, "point %d (event %d)", j, i)
	}
}

// TestOtherCategoriesIsNoCategory: no category can take the name of the
// series the plot folds the others into, so that the page never shows two
// series of that name.
func TestOtherCategoriesIsNoCategory(t *testing.T) {
	_, err := memtrack.CPU().Category(OtherCategories)
	assert.ErrorIs(t, err, memtrack.ErrInvalidCategory)
}
