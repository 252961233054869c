package otelmetric_test

import (
	"context"
	"fmt"
	"log"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/otelmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The instruments on the SDK's provider, read by a manual reader; a program
// gives the provider a periodic reader with an OTLP exporter, or
// OpenTelemetry's Prometheus exporter, instead.
func ExampleRegister() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := otelmetric.Register(mp)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()

	buf, err := memtrack.CPU().Alloc(1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "memtrack.tracked" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				backend, _ := p.Attributes.Value(otelmetric.BackendKey)
				fmt.Println(sm.Scope.Name, m.Name, m.Unit, backend.AsString(), p.Value)
			}
		}
	}
	// Output:
	// github.com/memtrack/memtrack/otelmetric memtrack.tracked By cpu 1048576
}
