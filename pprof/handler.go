package pprof

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/memtrack/memtrack"
)

// Handler returns an [http.Handler] that serves [WriteProfile] for the
// device named by the last element of the path, as [memtrack.ParseDevice]
// reads it, so that it can be mounted beside net/http/pprof:
//
//	http.Handle("/debug/memtrack/", pprof.Handler())
//	// go tool pprof http://host/debug/memtrack/cuda:0
//	// go tool pprof http://host/debug/memtrack/cuda:0?peak=1
//
// A pattern with a {device} wildcard works too. With ?peak=1 it serves the
// [Peak] figures. The path without a device lists the devices and
// whether they record allocation sites. A device that cannot be read is a
// 400, one that does not exist a 404, and one that does not record sites a
// 409, each with the error in the body.
func Handler() http.Handler { return handler{} }

// handler is the http.Handler that Handler returns.
type handler struct{}

// ServeHTTP writes the profile of the device the path names, or the list of
// devices for the bare path.
func (handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpError(w, http.StatusMethodNotAllowed, fmt.Errorf("memtrack: method %s not allowed", r.Method))
		return
	}
	name := r.PathValue("device")
	if name == "" {
		name = r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	}
	if name == "" {
		serveIndex(w)
		return
	}
	kind := InUse
	if v := r.URL.Query().Get("peak"); v != "" {
		peak, err := strconv.ParseBool(v)
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("memtrack: peak=%q: want 1 or 0", v))
			return
		}
		if peak {
			kind = Peak
		}
	}
	d, err := memtrack.ParseDevice(name)
	var buf bytes.Buffer
	if err == nil {
		err = WriteProfile(&buf, d, kind)
	}
	switch {
	case err == nil:
	case errors.Is(err, memtrack.ErrInvalidDevice):
		httpError(w, http.StatusBadRequest, err)
		return
	case errors.Is(err, memtrack.ErrInvalidOrdinal), errors.Is(err, memtrack.ErrBackendNotBuilt), errors.Is(err, memtrack.ErrBackendUnavailable):
		httpError(w, http.StatusNotFound, err)
		return
	case errors.Is(err, memtrack.ErrSitesNotRecorded):
		httpError(w, http.StatusConflict, err)
		return
	default:
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "memtrack-"+strings.ReplaceAll(d.String(), ":", "")+"-"+kind.String()+".pb.gz"))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Write(buf.Bytes())
}

// serveIndex lists the devices and whether they record allocation sites.
func serveIndex(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	ds, err := memtrack.Devices()
	if err != nil {
		// A backend that cannot start: why, as a comment line each.
		fmt.Fprintf(w, "# %s\n", strings.ReplaceAll(err.Error(), "\n", "\n# "))
	}
	for _, d := range ds {
		st := d.Sites().Stats()
		if st.Enabled {
			fmt.Fprintf(w, "%v\trecording, %d sites, %d live buffers, %d bytes\n", d, st.Sites, st.Buffers, st.Bytes)
		} else {
			fmt.Fprintf(w, "%v\tnot recording (Device.Sites().Enable)\n", d)
		}
	}
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.Error(w, err.Error(), code)
}
