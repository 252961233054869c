package prom_test

import (
	"fmt"
	"log"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/prom"
	"github.com/prometheus/client_golang/prometheus"
)

func Example() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector(prom.WithConstLabels(prometheus.Labels{"service": "llm"})))
	// Serve it as usual:
	//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	buf, err := memtrack.CPU().Alloc(4 << 10)
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "memtrack_tracked_bytes" && mf.GetName() != "memtrack_buffers" {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Print(mf.GetName(), "{")
			for i, l := range m.GetLabel() {
				if i > 0 {
					fmt.Print(",")
				}
				fmt.Printf("%s=%q", l.GetName(), l.GetValue())
			}
			fmt.Println("}", m.GetGauge().GetValue())
		}
	}
	// Output:
	// memtrack_buffers{backend="cpu",ordinal="0",service="llm"} 1
	// memtrack_tracked_bytes{backend="cpu",ordinal="0",service="llm"} 4096
}
