package main

import (
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/prom"
	"github.com/memtrack/memtrack/trace"
	"github.com/memtrack/memtrack/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// startView records the device's history (and its allocation sites) when
// the page is served (-serve) or the trace written (-trace), and serves the
// page at /debug/memtrack/ and the metrics of package prom at /metrics
// (what dashboards/memtrack.json reads) while the program runs. The func it returns
// writes the trace and, after linger, stops serving; calls after the first
// do nothing.
func startView(dev memtrack.Device, addr, traceFile string, linger time.Duration) (stop func()) {
	first := startViewOnce(dev, addr, traceFile, linger)
	var once sync.Once
	return func() { once.Do(first) }
}

func startViewOnce(dev memtrack.Device, addr, traceFile string, linger time.Duration) (stop func()) {
	if addr == "" && traceFile == "" {
		return func() {}
	}
	check(dev.History().Enable(1 << 16))
	check(dev.Sites().Enable(32))
	var srv *http.Server
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		check(err)
		mux := http.NewServeMux()
		mux.Handle("/debug/memtrack/", web.Handler())
		reg := prometheus.NewRegistry()
		reg.MustRegister(prom.NewCollector())
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		log.Printf("serving the page at http://%s/debug/memtrack/ and the metrics at http://%s/metrics", ln.Addr(), ln.Addr())
	}
	return func() {
		if traceFile != "" {
			h, err := dev.History().Snapshot()
			check(err)
			f, err := os.Create(traceFile)
			check(err)
			check(trace.Write(f, h))
			check(f.Close())
			log.Printf("wrote %d events to %s: open it in Perfetto UI or chrome://tracing (docs/timeline.md)", len(h.Events), traceFile)
		}
		if srv != nil {
			if linger > 0 {
				log.Printf("serving for %v more", linger)
				time.Sleep(linger)
			}
			srv.Close()
		}
	}
}
