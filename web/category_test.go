package web

import (
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
)

func TestCategorySeries(t *testing.T) {
	start := time.Now()
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Millisecond) }
	pts := []memtrack.HistoryEvent{
		{Seq: 0, Time: at(0), Action: memtrack.HistoryAlloc, Size: 100, Tracked: 100, Category: "weights", CategoryTracked: 100},
		{Seq: 1, Time: at(1), Action: memtrack.HistoryAlloc, Size: 10, Tracked: 110},
		{Seq: 2, Time: at(2), Action: memtrack.HistoryAlloc, Size: 40, Tracked: 150, Category: "activations", CategoryTracked: 40},
		{Seq: 3, Time: at(3), Action: memtrack.HistoryFree, Size: 40, Tracked: 110, Category: "activations"},
	}
	got := categorySeries(pts, []int{0, 2, 3})
	assert.Equal(t, []SiteSeries{
		{Name: "weights", Bytes: []int64{100, 100, 100}},
		{Name: "activations", Bytes: []int64{0, 40, 0}},
		{Name: memtrack.Uncategorised, Bytes: []int64{0, 10, 10}},
	}, got, "at each kept point the series add up to the tracked bytes")
	assert.Nil(t, categorySeries(pts[1:2], []int{0}), "no categories, no series")
}
