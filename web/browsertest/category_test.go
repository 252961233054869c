package browsertest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/web"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCategoriesInChromium allocates in two categories and outside them,
// and opens the page with ?stack=categories: the plot stacks the
// categories and the memory outside them, and the device's section lists
// their figures.
func TestCategoriesInChromium(t *testing.T) {
	exe := chromium(t)
	d := memtrack.CPU()
	require.Zero(t, d.MemoryAllocated(), "the test starts with nothing allocated")
	require.NoError(t, d.History().Enable(1000))
	defer d.History().Disable()
	weights, err := d.Category(memtrack.CategoryWeights)
	require.NoError(t, err)
	acts, err := d.Category(memtrack.CategoryActivations)
	require.NoError(t, err)
	w, err := weights.Alloc(8 << 20)
	require.NoError(t, err)
	defer w.Free()
	time.Sleep(10 * time.Millisecond)
	a, err := acts.Alloc(2 << 20)
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond)
	u, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	defer u.Free()
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, a.Free())

	mux := http.NewServeMux()
	mux.Handle("/debug/memtrack/", web.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, consoleErrors := browser(t, exe)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/debug/memtrack/?stack=categories"),
		chromedp.WaitVisible(chromedp.CSS(`table.categories`)),
	))
	type shown struct {
		Stacked []string `json:"stacked"`
		Rows    []string `json:"rows"`
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[shown](`(() => ({
  stacked: [...document.querySelectorAll('section[data-device="cpu"] svg.plot path.category')].map(e => e.getAttribute('data-category')),
  rows: [...document.querySelectorAll('section[data-device="cpu"] table.categories tbody tr')].map(r => r.cells[0].textContent + " " + r.cells[1].title),
}))()`))
	require.NoError(t, err)
	assert.Equal(t, []string{"weights", "activations", "uncategorised"}, v.Stacked, "the categories stacked, then the rest")
	assert.Equal(t, []string{"weights 8388608 B", "activations 0 B", "uncategorised 1048576 B"}, v.Rows)
	assert.Empty(t, consoleErrors(), "the page logs no error")
}
