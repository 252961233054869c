package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/trace"
	"github.com/memtrack/memtrack/web"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func serve(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/debug/memtrack/", web.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

//go:noinline
func weights(d memtrack.Device) (*memtrack.Buffer, error) { return d.Alloc(8 << 10) }

//go:noinline
func scratch(d memtrack.Device) (*memtrack.Buffer, error) { return d.Alloc(3 << 10) }

// TestDataJSON reads the figures and the history of a known pattern: a
// buffer that stays and two short ones, with sites recorded.
func TestDataJSON(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(100))
	defer d.History().Disable()
	require.NoError(t, d.Sites().SetRate(1)) // every allocation: exact sites
	defer d.Sites().SetRate(0)
	require.NoError(t, d.Sites().Enable(8))
	defer d.Sites().Disable()
	base := d.MemoryAllocated()
	w, err := weights(d)
	require.NoError(t, err)
	defer w.Free()
	for range 2 {
		s, err := scratch(d)
		require.NoError(t, err)
		require.NoError(t, s.Free())
	}

	resp, body := get(t, serve(t).URL+"/debug/memtrack/data.json")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var p web.Page
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	var cpu *web.Device
	for i := range p.Devices {
		if p.Devices[i].Name == "cpu" {
			cpu = &p.Devices[i]
		}
	}
	require.NotNil(t, cpu, "%s", body)
	s := d.MemoryStats()
	assert.Equal(t, s.Tracked, cpu.Tracked)
	assert.Equal(t, s.PeakTracked, cpu.PeakTracked)
	assert.True(t, cpu.Sites)
	require.NotNil(t, cpu.History)
	h := cpu.History
	k := int64(1 << 10)
	assert.Equal(t, []int64{base + 8*k, base + 11*k, base + 8*k, base + 11*k, base + 8*k}, h.Bytes)
	assert.Len(t, h.T, 5)
	assert.Equal(t, base+11*k, h.Max)
	assert.Equal(t, h.T[1], h.MaxT, "the first of the equal highs")
	assert.Equal(t, s.PeakTracked == base+11*k, h.MaxAtPeak)
	assert.Equal(t, 5, h.Events)
	require.Len(t, h.Sites, 2, "%+v", h.Sites)
	assert.Equal(t, "web_test.weights ← web_test.TestDataJSON", h.Sites[0].Name)
	assert.Equal(t, []int64{8 * k, 8 * k, 8 * k, 8 * k, 8 * k}, h.Sites[0].Bytes)
	assert.Equal(t, "web_test.scratch ← web_test.TestDataJSON", h.Sites[1].Name)
	assert.Equal(t, []int64{0, 3 * k, 0, 3 * k, 0}, h.Sites[1].Bytes)
}

func TestIndexPage(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.SetMemoryLimit(1<<40))
	defer d.SetMemoryLimit(0)
	b, err := d.Alloc(5 << 10)
	require.NoError(t, err)
	defer b.Free()

	resp, body := get(t, serve(t).URL+"/debug/memtrack/?refresh=7")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
	assert.Contains(t, body, `<tr data-device="cpu">`)
	assert.Contains(t, body, `<td title="1099511627776 B">1.00 TiB</td>`, "the limit")
	assert.Contains(t, body, `<noscript><meta http-equiv="refresh" content="7"></noscript>`)
	assert.Contains(t, body, `<script src="memtrack.js"></script>`)
	assert.NotContains(t, body, "http://", "nothing from elsewhere")
	assert.NotContains(t, body, "https://", "nothing from elsewhere")
}

func TestRoutes(t *testing.T) {
	d := memtrack.CPU()
	b, err := d.Alloc(1) // used (reading a figure would not)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	srv := serve(t)
	for _, tc := range []struct {
		path, method string
		code         int
		contentType  string
	}{
		{"/debug/memtrack/memtrack.js", "GET", 200, "text/javascript; charset=utf-8"},
		{"/debug/memtrack/memtrack.css", "GET", 200, "text/css; charset=utf-8"},
		{"/debug/memtrack/trace.json", "GET", 200, "application/json"},
		{"/debug/memtrack/?refresh=x", "GET", 400, "text/plain; charset=utf-8"},
		{"/debug/memtrack/data.json", "POST", 405, "text/plain; charset=utf-8"},
		// Device paths go to package pprof's handler: the CPU does not
		// record sites (409), a device that does not exist is a 404.
		{"/debug/memtrack/cpu", "GET", 409, "text/plain; charset=utf-8"},
		{"/debug/memtrack/cuda:7", "GET", 404, "text/plain; charset=utf-8"},
		{"/debug/memtrack/nonsense", "GET", 400, "text/plain; charset=utf-8"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, tc.code, resp.StatusCode)
			assert.Equal(t, tc.contentType, resp.Header.Get("Content-Type"))
		})
	}
}

func TestDevicePathServesProfile(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.Sites().Enable(8))
	defer d.Sites().Disable()
	resp, body := get(t, serve(t).URL+"/debug/memtrack/cpu?peak=1")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	assert.True(t, strings.HasPrefix(body, "\x1f\x8b"), "a gzipped profile")
}

func TestTraceJSON(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(10))
	defer d.History().Disable()
	b, err := d.Alloc(100)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	_, body := get(t, serve(t).URL+"/debug/memtrack/trace.json")
	var f trace.File
	require.NoError(t, json.Unmarshal([]byte(body), &f))
	var counters int
	for _, e := range f.TraceEvents {
		if e.Ph == "C" {
			counters++
		}
	}
	assert.Equal(t, 2, counters)
}

//go:noinline
func small(d memtrack.Device) (*memtrack.Buffer, error) { return d.Alloc(4 << 10) }

//go:noinline
func sampled(d memtrack.Device) (*memtrack.Buffer, error) { return d.Alloc(64 << 10) }

// TestDataJSONSampledSites stacks sites recorded at two rates: a 4 KiB
// buffer at rate 1, then twenty 64 KiB buffers at rate 64 KiB, of which
// the sampled ones stand for more bytes than their size. Walked back from
// the live figures, each site starts where it started: the first point
// has the 4 KiB site alone.
func TestDataJSONSampledSites(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.History().Enable(100))
	defer d.History().Disable()
	require.NoError(t, d.Sites().SetRate(1))
	defer d.Sites().SetRate(0)
	require.NoError(t, d.Sites().Enable(8))
	defer d.Sites().Disable()
	base := d.MemoryAllocated()
	a, err := small(d)
	require.NoError(t, err)
	defer a.Free()
	require.NoError(t, d.Sites().SetRate(64<<10))
	for range 20 {
		b, err := sampled(d)
		require.NoError(t, err)
		defer b.Free()
	}
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	require.Greater(t, len(snap.Sites), 1, "at least one of the 64 KiB buffers is sampled (1 - e^-1 each)")

	resp, body := get(t, serve(t).URL+"/debug/memtrack/data.json")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var p web.Page
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	var h *web.History
	for i := range p.Devices {
		if p.Devices[i].Name == "cpu" {
			h = p.Devices[i].History
		}
	}
	require.NotNil(t, h, "%s", body)
	require.Len(t, h.Bytes, 21)
	require.Equal(t, base+4<<10, h.Bytes[0])
	at := map[string]int64{}
	for _, s := range h.Sites {
		at[s.Name] = s.Bytes[0]
	}
	// Each sampled event's scaled bytes are rounded to the byte once.
	assert.InDelta(t, 4<<10, at["web_test.small ← web_test.TestDataJSONSampledSites"], 1, "%v", at)
	assert.InDelta(t, 0, at["web_test.sampled ← web_test.TestDataJSONSampledSites"], 21, "%v", at)
	var sum int64
	for _, v := range at {
		sum += v
	}
	assert.InDelta(t, 4<<10, sum, 21, "the stacked sites at the first point against the line's 4 KiB: %v", at)
}
