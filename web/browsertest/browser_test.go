// Package browsertest opens memtrack's page (package
// github.com/memtrack/memtrack/web) in headless Chromium and checks what a
// person would see. It is a module of its own so that neither the core nor
// package web depends on chromedp. scripts/test-browser.sh installs
// Chromium where it is missing and runs it.
package browsertest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/web"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var screenshot = flag.String("screenshot", "", "where to save the page's screenshot (default: a file in the test's temporary directory)")

// chromium returns the path of a Chromium or Chrome binary. Where there is
// none the test is skipped, except in CI (CI=true), where it fails: CI
// installs Chromium (scripts/test-browser.sh) and must run this test.
func chromium(t *testing.T) string {
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found (chromium, chromium-browser, google-chrome or $CHROMIUM): install it (apt-get install -y chromium, as scripts/test-browser.sh does) to run the browser test"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

//go:noinline
func loadWeights(d memtrack.Device) *memtrack.Buffer { return alloc(d, 12<<20) }

//go:noinline
func activation(d memtrack.Device) *memtrack.Buffer { return alloc(d, 3<<20) }

//go:noinline
func attentionScratch(d memtrack.Device) *memtrack.Buffer { return alloc(d, 5<<20) }

var allocErr error

func alloc(d memtrack.Device, n int64) *memtrack.Buffer {
	b, err := d.Alloc(n)
	if err != nil {
		allocErr = errors.Join(allocErr, err)
	}
	return b
}

// pattern allocates a known pattern on d: weights that stay, then four
// layers, each allocating its activation and a scratch buffer and freeing
// the scratch and the previous activation; then one allocation refused by
// the limit. The peak is the weights, two activations and a scratch: 23 MiB.
// It marks its phases: the spans "load weights" and "layers", and the mark
// "limit set".
func pattern(t *testing.T, d memtrack.Device, limit int64) (weights *memtrack.Buffer) {
	load, err := d.History().BeginSpan("load weights")
	require.NoError(t, err)
	weights = loadWeights(d)
	time.Sleep(40 * time.Millisecond) // long enough on the plot for the span's label
	require.NoError(t, load.End())
	layers, err := d.History().BeginSpan("layers")
	require.NoError(t, err)
	var prev *memtrack.Buffer
	for range 4 {
		time.Sleep(20 * time.Millisecond) // spread the events over time for the plot
		act := activation(d)
		time.Sleep(10 * time.Millisecond)
		s := attentionScratch(d)
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, s.Free())
		if prev != nil {
			require.NoError(t, prev.Free())
		}
		prev = act
	}
	require.NoError(t, allocErr)
	require.NoError(t, layers.End())
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, d.SetMemoryLimit(limit))
	require.NoError(t, d.History().Mark("limit set"))
	_, err = d.Alloc(limit)
	require.ErrorIs(t, err, memtrack.ErrOutOfMemory)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, prev.Free())
	return weights
}

// servePage serves the page at /debug/memtrack/ until the test ends.
func servePage(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/debug/memtrack/", web.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// browser starts headless Chromium and returns a context for a tab of it,
// and a func that returns the errors its console has shown: console.error
// calls, uncaught exceptions and error entries of the browser's log (a
// failed request among them).
func browser(t *testing.T, exe string) (context.Context, func() []string) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 640),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel)
	var mu sync.Mutex
	var errs []string
	done := make(chan struct{})
	messages := chromedp.Console(ctx) // starts the browser
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s %s:%d: %s", m.Type, m.URL, m.Line+1, m.Text))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// view is what the page shows in its plots, read from the DOM.
type view struct {
	Plots []struct {
		Device string  `json:"device"`
		Y0     float64 `json:"y0"`   // the pixel of 0 bytes
		YTop   float64 `json:"yTop"` // the pixel of YMax bytes
		YMax   float64 `json:"yMax"`
	} `json:"plots"`
	Limits []struct {
		Bytes string  `json:"bytes"`
		Y1    float64 `json:"y1"`
		Y2    float64 `json:"y2"`
	} `json:"limits"`
	PeakLabels []struct {
		Bytes   string `json:"bytes"`
		Text    string `json:"text"`
		Visible bool   `json:"visible"`
	} `json:"peakLabels"`
	PeakMarkers []float64 `json:"peakMarkers"` // their cy
	Sites       []string  `json:"sites"`
	Refusals    []string  `json:"refusals"` // their kinds
	// The spans' bars and the marks' lines, with their labels as shown.
	Spans []struct {
		Name    string  `json:"name"`
		X       float64 `json:"x"`
		Width   float64 `json:"width"`
		Label   string  `json:"label"`
		Visible bool    `json:"visible"`
	} `json:"spans"`
	Bands []string `json:"bands"`
	Marks []struct {
		Name    string  `json:"name"`
		X       float64 `json:"x"`
		Label   string  `json:"label"`
		Visible bool    `json:"visible"`
	} `json:"marks"`
	Refusal []float64 `json:"refusalX"` // the refusals' x
}

const readView = `(() => {
  const q = s => [...document.querySelectorAll(s)];
  const a = (e, n) => e.getAttribute(n);
  return {
    plots: q('svg.plot').map(e => ({device: a(e, 'data-device'), y0: +a(e, 'data-y0'), yTop: +a(e, 'data-ymax-px'), yMax: +a(e, 'data-ymax')})),
    limits: q('svg.plot line.limit').map(e => ({bytes: a(e, 'data-bytes'), y1: +a(e, 'y1'), y2: +a(e, 'y2')})),
    peakLabels: q('svg.plot text.peak-label').map(e => {
      const r = e.getBoundingClientRect();
      return {bytes: a(e, 'data-bytes'), text: e.textContent, visible: r.width > 0 && r.height > 0};
    }),
    peakMarkers: q('svg.plot circle.peak-marker').map(e => +a(e, 'cy')),
    sites: q('svg.plot path.site').map(e => a(e, 'data-site')),
    refusals: q('svg.plot line.refusal').map(e => a(e, 'data-kind')),
    refusalX: q('svg.plot line.refusal').map(e => +a(e, 'x1')),
    spans: q('svg.plot rect.span').map(e => {
      const l = [...e.parentNode.querySelectorAll('text.span-label')].find(t => Math.abs(+a(t, 'x') - 3 - +a(e, 'x')) < 0.01);
      const r = l ? l.getBoundingClientRect() : {width: 0, height: 0};
      return {name: a(e, 'data-mark'), x: +a(e, 'x'), width: +a(e, 'width'), label: l ? l.textContent : "", visible: r.width > 0 && r.height > 0};
    }),
    bands: q('svg.plot rect.span-band').map(e => a(e, 'data-mark')),
    marks: q('svg.plot line.mark').map(e => {
      const l = [...e.parentNode.querySelectorAll('text.mark-label')].find(t => Math.abs(+a(t, 'x') - 3 - +a(e, 'x1')) < 0.01);
      const r = l ? l.getBoundingClientRect() : {width: 0, height: 0};
      return {name: a(e, 'data-mark'), x: +a(e, 'x1'), label: l ? l.textContent : "", visible: r.width > 0 && r.height > 0};
    }),
  };
})()`

func TestPageInChromium(t *testing.T) {
	exe := chromium(t)
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(10000))
	defer d.History().Disable()
	require.NoError(t, d.Sites().SetRate(1)) // every allocation: the stacked sites are exact
	defer d.Sites().SetRate(0)
	require.NoError(t, d.Sites().Enable(16))
	defer d.Sites().Disable()
	require.Zero(t, d.MemoryAllocated(), "the test starts with nothing allocated")

	const limit = 28 << 20
	weights := pattern(t, d, limit)
	defer weights.Free()
	defer d.SetMemoryLimit(0)
	peak := d.MaxMemoryAllocated()
	require.Equal(t, int64(12+3+3+5)<<20, peak, "the pattern's peak")

	srv := servePage(t)

	ctx, consoleErrors := browser(t, exe)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/debug/memtrack/?refresh=1"),
		chromedp.WaitVisible(chromedp.CSS(`svg.plot text.peak-label`)),
	))
	v, err := chromedp.Run(ctx, chromedp.Evaluate[view](readView))
	require.NoError(t, err)

	// One plot per used device.
	var names, plotted []string
	for _, u := range memtrack.UsedDevices() {
		names = append(names, u.String())
	}
	for _, p := range v.Plots {
		plotted = append(plotted, p.Device)
	}
	require.Equal(t, names, plotted, "one plot per used device")

	// The peak label shows MaxMemoryAllocated, exactly.
	require.Len(t, v.PeakLabels, 1)
	assert.Equal(t, strconv.FormatInt(peak, 10), v.PeakLabels[0].Bytes)
	assert.Contains(t, v.PeakLabels[0].Text, fmt.Sprintf("peak 23.0 MiB (%d B) at ", peak))
	assert.True(t, v.PeakLabels[0].Visible, "the peak label is on screen")

	// The limit line is where the limit is on the plot's scale, and the peak
	// marker where the peak is: both against the y axis's pixels.
	require.Len(t, v.Limits, 1)
	require.Len(t, v.PeakMarkers, 1)
	p := v.Plots[0]
	require.Greater(t, p.Y0, p.YTop)
	bytesAt := func(y float64) float64 { return (p.Y0 - y) / (p.Y0 - p.YTop) * p.YMax }
	perPixel := p.YMax / (p.Y0 - p.YTop)
	assert.Equal(t, strconv.Itoa(limit), v.Limits[0].Bytes)
	assert.InDelta(t, float64(limit), bytesAt(v.Limits[0].Y1), perPixel/100, "the limit line's height")
	assert.Equal(t, v.Limits[0].Y1, v.Limits[0].Y2, "the limit line is level")
	assert.InDelta(t, float64(peak), bytesAt(v.PeakMarkers[0]), perPixel/100, "the peak marker's height")
	assert.Less(t, v.Limits[0].Y1, v.PeakMarkers[0], "the limit is drawn above the peak")

	// The largest sites are stacked, named by the functions that allocated.
	for _, fn := range []string{"loadWeights", "activation", "attentionScratch"} {
		assert.True(t, slices.ContainsFunc(v.Sites, func(s string) bool { return strings.Contains(s, "."+fn) }),
			"site %s stacked in the plot: %v", fn, v.Sites)
	}

	assert.Equal(t, []string{"limit"}, v.Refusals, "the refused allocation is marked")

	// The phases: two labelled spans, one after the other, and the mark
	// just before the refusal.
	require.Len(t, v.Spans, 2, "%+v", v.Spans)
	assert.Equal(t, []string{"load weights", "layers"}, v.Bands)
	for i, name := range []string{"load weights", "layers"} {
		s := v.Spans[i]
		assert.Equal(t, name, s.Name)
		assert.Equal(t, name, s.Label, "the span's label is whole")
		assert.True(t, s.Visible, "the label of %s is on screen", name)
		assert.Positive(t, s.Width)
	}
	assert.LessOrEqual(t, v.Spans[0].X+v.Spans[0].Width, v.Spans[1].X+0.01, "load weights ends before the layers begin")
	require.Len(t, v.Marks, 1)
	assert.Equal(t, "limit set", v.Marks[0].Name)
	assert.Equal(t, "limit set", v.Marks[0].Label)
	assert.True(t, v.Marks[0].Visible)
	require.Len(t, v.Refusal, 1)
	assert.LessOrEqual(t, v.Marks[0].X, v.Refusal[0], "the mark comes before the refusal")
	assert.GreaterOrEqual(t, v.Marks[0].X, v.Spans[1].X+v.Spans[1].Width-0.01, "and after the layers")

	// The screenshot, for the documentation.
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := *screenshot
	if path == "" {
		path = filepath.Join(t.TempDir(), "timeline.png")
	}
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)

	// It refreshes while the program runs: a new allocation shows in the
	// table without reloading.
	b, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	defer b.Free()
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	want := fmt.Sprintf("%d B, %d events of 10000", d.MemoryAllocated(), len(h.Events))
	cur := `(() => { const r = document.querySelector('#devices tbody tr[data-device="cpu"]'); return r.cells[1].title + ", " + r.cells[8].textContent; })()`
	_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](fmt.Sprintf("%s === %q", cur, want), chromedp.WithPollingTimeout(15*time.Second)))
	got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](cur))
	require.NoError(t, err, "the table shows the new figures %q; it shows %q", want, got)

	assert.Empty(t, consoleErrors(), "the page logs no error")
}

// TestPageWithoutScripts opens the page with scripts off: the table shows
// the figures, and the page asks to be refreshed.
func TestPageWithoutScripts(t *testing.T) {
	exe := chromium(t)
	d := memtrack.CPU()
	b, err := d.Alloc(3 << 20)
	require.NoError(t, err)
	defer b.Free()
	require.NoError(t, d.SetMemoryLimit(64<<20))
	defer d.SetMemoryLimit(0)

	srv := servePage(t)

	ctx, consoleErrors := browser(t, exe)
	_, err = chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/debug/memtrack/"),
		chromedp.WaitVisible(chromedp.CSS(`#devices`)),
	))
	// The page's scripts are off; the test's own evaluations still run.
	plots, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('svg.plot').length`))
	require.NoError(t, err)
	row, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#devices tbody tr[data-device="cpu"] td')].map(td => td.title || td.textContent)`))
	require.NoError(t, err)
	// With scripts off the browser reads the refresh inside <noscript>.
	refresh, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('meta[http-equiv="refresh"]') || {content: ""}).content`))
	require.NoError(t, err)
	assert.Zero(t, plots, "no script, no plot")
	require.GreaterOrEqual(t, len(row), 4, "%v", row)
	assert.Equal(t, "cpu", row[0])
	assert.Equal(t, fmt.Sprintf("%d B", d.MemoryAllocated()), row[1])
	assert.Equal(t, fmt.Sprintf("%d B", d.MaxMemoryAllocated()), row[2])
	assert.Equal(t, fmt.Sprintf("%d B", 64<<20), row[3])
	assert.Equal(t, strconv.Itoa(web.DefaultRefresh), refresh)
	assert.Empty(t, consoleErrors())
}
