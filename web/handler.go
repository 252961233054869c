// Package web serves memtrack's page at /debug/memtrack/: for every used
// device the tracked bytes now and at the peak, the limit, what the OS or
// driver reports as free and total, and, for devices that record a history
// ([memtrack.HistoryRecorder.Enable]), a timeline of the tracked bytes
// with the peak, the limit, the refused allocations, the gaps, and, where
// allocation sites are recorded, the largest sites stacked under the line.
// The page refreshes itself while the program runs. It is self-contained
// (its script and style are embedded; it loads nothing from elsewhere) and
// shows the figures as a plain table where scripts are off.
//
//	http.Handle("/debug/memtrack/", web.Handler())
//
// Beside the page the handler serves data.json (the page's figures, a
// [Page]) and trace.json (the histories for Perfetto UI, as package
// [github.com/memtrack/memtrack/trace] writes them), and hands every other
// path below it to [pprof.Handler], so that go tool pprof
// http://host/debug/memtrack/cuda:0 keeps working.
package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/pprof"
	"github.com/memtrack/memtrack/trace"
)

//go:embed static
var static embed.FS

var page = template.Must(template.New("index.html").Funcs(template.FuncMap{
	"bytes": bytesize.Format,
}).ParseFS(static, "static/index.html"))

// DefaultRefresh is how often, in seconds, the page reads the figures anew
// unless the URL says otherwise (?refresh=N; 0 stops).
const DefaultRefresh = 2

// Handler returns the [http.Handler] of the page, to be mounted at a path
// that ends in a slash, such as /debug/memtrack/.
func Handler() http.Handler {
	return handler{profiles: pprof.Handler()}
}

// handler is the http.Handler that Handler returns.
type handler struct{ profiles http.Handler }

// ServeHTTP serves the page, its script, style and figures, and the trace,
// and hands device paths to package pprof's handler.
func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	switch name {
	case "", "data.json", "trace.json", "memtrack.js", "memtrack.css":
	default:
		h.profiles.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("memtrack: method %s not allowed", r.Method), http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	switch name {
	case "":
		serveIndex(w, r)
	case "data.json":
		serveJSON(w, Read())
	case "trace.json":
		serveTrace(w)
	case "memtrack.js":
		serveStatic(w, name, "text/javascript; charset=utf-8")
	case "memtrack.css":
		serveStatic(w, name, "text/css; charset=utf-8")
	}
}

func serveIndex(w http.ResponseWriter, r *http.Request) {
	refresh := DefaultRefresh
	if v := r.URL.Query().Get("refresh"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("memtrack: refresh=%q: want a number of seconds, 0 to stop", v), http.StatusBadRequest)
			return
		}
		refresh = n
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, struct {
		Page
		Refresh int
	}{Read(), refresh}); err != nil {
		http.Error(w, "memtrack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// Nothing but this server's own script, style and data.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func serveJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "memtrack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(data)
}

func serveTrace(w http.ResponseWriter) {
	var hs []memtrack.History
	for _, d := range memtrack.UsedDevices() {
		if h, err := d.History().Snapshot(); err == nil {
			hs = append(hs, h)
		}
	}
	var buf bytes.Buffer
	if err := trace.Write(&buf, hs...); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="memtrack-trace.json"`)
	w.Write(buf.Bytes())
}

func serveStatic(w http.ResponseWriter, name, contentType string) {
	data, err := static.ReadFile("static/" + name)
	if err != nil {
		http.Error(w, "memtrack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Write(data)
}
