package web_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/memtrack/memtrack/web"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDataJSONHundredCategories reads the page's figures of a device with
// 100 categories while goroutines allocate and free in them: the table has
// every category, and the plot stacks TopCategories of them, the others
// as one series, and the uncategorised memory, which add up to the
// tracked bytes at every point (up to the buffers allocated at once).
func TestDataJSONHundredCategories(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_WEB_CHILD") {
		return
	}
	const n = 100
	cpu := memtrack.CPU()
	require.NoError(t, cpu.History().Enable(1<<16))
	defer cpu.History().Disable()
	cats := rendertest.Categories(t, cpu, n)
	srv := serve(t)
	read := func() web.Device {
		_, body := get(t, srv.URL+"/debug/memtrack/data.json")
		var p web.Page
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		for _, d := range p.Devices {
			if d.Name == "cpu" {
				return d
			}
		}
		t.Fatal("no cpu in data.json")
		return web.Device{}
	}
	stop := rendertest.Churn(t, cats, 4, 4000) // 32000 events: the ring keeps them all
	defer stop()
	for range 5 {
		d := read()
		assert.Len(t, d.Categories, n+1, "the table has every category and the rest")
		require.NotNil(t, d.History)
		assert.Len(t, d.History.Categories, web.TopCategories+2)
	}
	stop()
	d := read()
	h := d.History
	require.NotNil(t, h)
	var names []string
	for _, s := range h.Categories {
		names = append(names, s.Name)
	}
	var want []string
	for i := n - web.TopCategories; i < n; i++ {
		want = append(want, fmt.Sprintf("layer%03d", i))
	}
	want = append(want, web.OtherCategories, memtrack.Uncategorised)
	assert.Equal(t, want, names, "the categories that track the most at the highest point, then the others as one")
	for j, b := range h.Bytes {
		var sum int64
		for _, s := range h.Categories {
			sum += s.Bytes[j]
		}
		// Exact for a serial history; under concurrency each figure of an
		// event is one the device held between the event and its recording
		// (memtrack.HistoryEvent.Tracked), so each of the 4 goroutines'
		// 64-byte buffers may be in one figure and not in the other.
		assert.InDelta(t, b, sum, 4*64, "the series add up to the tracked bytes at point %d", j)
	}
	last := len(h.Bytes) - 1
	var others int64
	for i := range n - web.TopCategories {
		others += int64(i+1) << 10
	}
	assert.Equal(t, others, h.Categories[web.TopCategories].Bytes[last])
}
