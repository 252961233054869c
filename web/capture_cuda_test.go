//go:build cuda

package web

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/require"
)

// TestHandlerDuringCapture serves the page, its data, its trace and a
// profile of cuda:0 while the program captures a CUDA graph in global
// mode: each answers 200 and the program's capture ends with its graph
// (rendertest.DuringCapture). It runs in a process of its own, since using
// cuda:0 adds it to the used devices that the other tests list.
func TestHandlerDuringCapture(t *testing.T) {
	if !rendertest.InChild(t, "MEMTRACK_WEB_CHILD") {
		return
	}
	d, _ := rendertest.CUDA0(t)
	require.NoError(t, d.Sites().Enable(16))
	require.NoError(t, d.History().Enable(1024))
	h := Handler()
	get := func(path string) func() error {
		return func() error {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != http.StatusOK {
				t.Errorf("GET %s answered %d: %s", path, rec.Code, rec.Body)
			}
			return nil
		}
	}
	rendertest.DuringCapture(t, d, []rendertest.Rendering{
		{Name: "page", Render: get("/debug/memtrack/")},
		{Name: "data.json", Render: get("/debug/memtrack/data.json")},
		{Name: "trace.json", Render: get("/debug/memtrack/trace.json")},
		{Name: "profile", Render: get("/debug/memtrack/cuda:0")},
		{Name: "Read", Render: func() error { Read(); return nil }},
	})
}
