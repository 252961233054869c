package browsertest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

	srv := servePage(t)
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

// TestHundredCategoriesInChromium opens the page of a device with 100
// categories, stacked by category: the plot stacks web.TopCategories of
// them, the others as one and the rest, with a legend of as many; the
// table, folded under its summary, opens on a click and lists every one;
// the page logs no error.
func TestHundredCategoriesInChromium(t *testing.T) {
	exe := chromium(t)
	if os.Getenv("MEMTRACK_BROWSER_CHILD") == "" {
		// The categories stay on the CPU for the life of the process: run
		// in a process of its own, so that the other tests' pages do not
		// show them.
		cmd := exec.Command(os.Args[0], "-test.run=^TestHundredCategoriesInChromium$", "-test.v", "-test.count=1", "-screenshot="+*screenshot)
		cmd.Env = append(os.Environ(), "MEMTRACK_BROWSER_CHILD=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child output:\n%s", out)
		assert.Contains(t, string(out), "--- PASS: TestHundredCategoriesInChromium", "child output:\n%s", out)
		return
	}
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(1000))
	defer d.History().Disable()
	for i := range 100 {
		c, err := d.Category(fmt.Sprintf("layer%03d", i))
		require.NoError(t, err)
		b, err := c.Alloc(int64(i+1) << 16)
		require.NoError(t, err)
		defer b.Free()
	}
	srv := servePage(t)
	ctx, consoleErrors := browser(t, exe)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/debug/memtrack/?stack=categories&refresh=1"),
		chromedp.WaitVisible(chromedp.CSS(`details.categories > summary`)),
	))
	// The table is folded under its summary, and opens on a click.
	folded, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const d = document.querySelector('details.categories'); return d.open + " " + d.querySelector('summary').textContent; })()`))
	require.NoError(t, err)
	assert.Equal(t, "false 100 categories and the memory outside them", folded)
	rendered := func() int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.rendered`))
		require.NoError(t, err)
		v, err := strconv.Atoi(n)
		require.NoError(t, err)
		return v
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`details.categories > summary`)),
		chromedp.WaitVisible(chromedp.CSS(`table.categories`)),
	))
	// It stays open when the page reads its figures again (every second
	// here).
	after := rendered() + 1
	_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](fmt.Sprintf("Number(document.body.dataset.rendered) >= %d", after), chromedp.WithPollingTimeout(15*time.Second)))
	require.NoError(t, err, "the page did not refresh")
	reopened, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('details.categories').open`))
	require.NoError(t, err)
	assert.True(t, reopened, "the table stays open across a refresh")
	type shown struct {
		Stacked []string `json:"stacked"`
		Legend  int      `json:"legend"`
		Rows    int      `json:"rows"`
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[shown](`(() => ({
  stacked: [...document.querySelectorAll('section[data-device="cpu"] svg.plot path.category')].map(e => e.getAttribute('data-category')),
  legend: document.querySelectorAll('section[data-device="cpu"] .legend > span').length,
  rows: document.querySelectorAll('section[data-device="cpu"] table.categories tbody tr').length,
}))()`))
	require.NoError(t, err)
	var want []string
	for i := 100 - web.TopCategories; i < 100; i++ {
		want = append(want, fmt.Sprintf("layer%03d", i))
	}
	want = append(want, web.OtherCategories, memtrack.Uncategorised)
	assert.Equal(t, want, v.Stacked)
	assert.Equal(t, len(want), v.Legend)
	assert.Equal(t, 101, v.Rows)
	if *screenshot != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(strings.TrimSuffix(*screenshot, ".png")+"-categories.png", png, 0o644))
	}
	assert.Empty(t, consoleErrors(), "the page logs no error")
}
