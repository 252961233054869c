package pprof_test

import (
	"bytes"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/google/pprof/profile"
	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/pprof"
)

//go:noinline
func loadWeights(d memtrack.Device) *memtrack.Buffer {
	b, err := d.Alloc(3 << 20)
	if err != nil {
		log.Fatal(err)
	}
	return b
}

//go:noinline
func scratch(d memtrack.Device) {
	b, err := d.Alloc(5 << 20)
	if err != nil {
		log.Fatal(err)
	}
	b.Free()
}

// Record allocation sites, then read who holds the memory now and who held
// it at the peak. go tool pprof reads the same profiles.
func ExampleWriteProfile() {
	d := memtrack.CPU()
	// Record every allocation, for exact figures; the default rate samples
	// (on average one sample per 512 KiB) and scales its figures.
	if err := d.Sites().SetRate(1); err != nil {
		log.Fatal(err)
	}
	defer d.Sites().SetRate(0)
	if err := d.Sites().Enable(32); err != nil {
		log.Fatal(err)
	}
	defer d.Sites().Disable()

	w := loadWeights(d)
	defer w.Free()
	scratch(d)

	for _, kind := range []pprof.Kind{pprof.InUse, pprof.Peak} {
		var buf bytes.Buffer
		if err := pprof.WriteProfile(&buf, d, kind); err != nil {
			log.Fatal(err)
		}
		p, err := profile.Parse(&buf)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(p.DefaultSampleType + ":") // samples come largest first
		for _, s := range p.Sample {
			fn := s.Location[0].Line[0].Function.Name
			fmt.Printf("  %s: %d MiB\n", fn[strings.LastIndexByte(fn, '.')+1:], s.Value[1]>>20)
		}
	}
	// Output:
	// inuse_space:
	//   loadWeights: 3 MiB
	// peak_inuse_space:
	//   scratch: 5 MiB
	//   loadWeights: 3 MiB
}

// Mount the profiles beside net/http/pprof; then
// go tool pprof http://host/debug/memtrack/cpu reads them.
func ExampleHandler() {
	mux := http.NewServeMux()
	mux.Handle("/debug/memtrack/", pprof.Handler())

	d := memtrack.CPU()
	for _, path := range []string{"/debug/memtrack/cpu", "/debug/memtrack/gpu:0"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	if err := d.Sites().Enable(32); err != nil {
		log.Fatal(err)
	}
	defer d.Sites().Disable()
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/memtrack/cpu", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Disposition"))
	// Output:
	// 409 memtrack: allocation sites not recorded on cpu: call Device.Sites().Enable first
	// 400 memtrack: invalid device: "gpu:0": want cpu, cuda:N, metal:N or rocm:N
	// 200 attachment; filename="memtrack-cpu-inuse.pb.gz"
}
