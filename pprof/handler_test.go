package pprof

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProfileHandler(t *testing.T) {
	prefix := http.NewServeMux()
	prefix.Handle("/debug/memtrack/", Handler())
	wildcard := http.NewServeMux()
	wildcard.Handle("GET /sites/{device}", Handler())

	d := recording(t, 32)
	a := allocOK(t)(allocFromA(d, 1000))
	freeAll(t, a)
	b := allocOK(t)(allocFromB(d, 300))
	defer freeAll(t, b)

	for _, tc := range []struct {
		name, method, url string
		mux               *http.ServeMux
		code              int
		leaves            map[string][2]int64 // for a profile
		body              string              // for an error or the index
	}{
		{"in use", "GET", "/debug/memtrack/cpu", prefix, 200, map[string][2]int64{funcB: {1, 300}}, ""},
		{"at the peak", "GET", "/debug/memtrack/cpu?peak=1", prefix, 200, map[string][2]int64{funcA: {1, 1000}}, ""},
		{"peak=0", "GET", "/debug/memtrack/cpu?peak=0", prefix, 200, map[string][2]int64{funcB: {1, 300}}, ""},
		{"wildcard pattern", "GET", "/sites/cpu", wildcard, 200, map[string][2]int64{funcB: {1, 300}}, ""},
		{"HEAD", "HEAD", "/debug/memtrack/cpu", prefix, 200, nil, ""},
		{"index (A stays for the peak)", "GET", "/debug/memtrack/", prefix, 200, nil, "cpu\trecording, 2 sites, 1 live buffers, 300 bytes\n"},
		{"unreadable device", "GET", "/debug/memtrack/tpu:0", prefix, 400, nil, "memtrack: invalid device"},
		{"the cpu with an ordinal", "GET", "/debug/memtrack/cpu:3", prefix, 400, nil, "memtrack: invalid device"},
		{"backend not built", "GET", "/debug/memtrack/metal:0", prefix, 404, nil, "-tags metal"},
		{"bad peak", "GET", "/debug/memtrack/cpu?peak=maybe", prefix, 400, nil, `peak="maybe"`},
		{"POST", "POST", "/debug/memtrack/cpu", prefix, 405, nil, "method POST not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.mux.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.url, nil))
			res := rec.Result()
			require.Equal(t, tc.code, res.StatusCode, rec.Body.String())
			switch {
			case tc.leaves != nil:
				assert.Equal(t, "application/octet-stream", res.Header.Get("Content-Type"))
				p, err := profile.Parse(rec.Body)
				require.NoError(t, err)
				assert.Equal(t, tc.leaves, byLeaf(p))
			case tc.code == 200 && tc.method == "HEAD":
				assert.NotEmpty(t, res.Header.Get("Content-Length"))
			default:
				assert.Contains(t, rec.Body.String(), tc.body)
			}
		})
	}

	t.Run("not recording", func(t *testing.T) {
		d.Sites().Disable()
		rec := httptest.NewRecorder()
		prefix.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/memtrack/cpu", nil))
		assert.Equal(t, http.StatusConflict, rec.Code)
		assert.Contains(t, rec.Body.String(), "Sites().Enable")
	})
}
