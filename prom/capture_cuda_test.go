//go:build cuda

package prom

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestCollectorDuringCapture scrapes cuda:0 over HTTP, as Prometheus does,
// while the program captures a CUDA graph in global mode: the scrape
// succeeds and the program's capture ends with its graph
// (rendertest.DuringCapture). It runs in a process of its own, since using
// cuda:0 adds it to the used devices that other tests list.
func TestCollectorDuringCapture(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_PROM_CHILD") {
		return
	}
	d, _ := rendertest.CUDA0(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector())
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
	rendertest.DuringCapture(t, d, []rendertest.Rendering{{Name: "scrape", Render: func() error {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("the scrape answered %d: %s", rec.Code, rec.Body)
		}
		return nil
	}}})
}
