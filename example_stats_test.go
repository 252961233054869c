package memtrack_test

import (
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/memtrack/memtrack"
)

func ExampleStats_String() {
	s := memtrack.Stats{Current: 3 << 29, Peak: 2 << 30, Active: 3, PeakActive: 4, AllocatedBytes: 5 << 30, FreedBytes: 3584 << 20, Allocs: 10, Frees: 7}
	fmt.Println(s)
	// Output:
	// cpu: current 1.50 GiB (1610612736 B), peak 2.00 GiB (2147483648 B); 3 live buffers (peak 4); allocated 5.00 GiB (5368709120 B) in 10 allocs, freed 3.50 GiB (3758096384 B) in 7 frees; 0 failed; no limit
}

func ExampleStats_LogValue() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	s := memtrack.Stats{Current: 3 << 20, Peak: 4 << 20, Active: 2, PeakActive: 3, AllocatedBytes: 5 << 20, FreedBytes: 2 << 20, Allocs: 4, Frees: 2}
	logger.Info("memory", "stats", s) // with a real device: dev.MemoryStats()
	// Output:
	// level=INFO msg=memory stats.device=cpu stats.current=3145728 stats.peak=4194304 stats.allocated_bytes=5242880 stats.freed_bytes=2097152 stats.active=2 stats.peak_active=3 stats.allocs=4 stats.frees=2 stats.failed_allocs=0 stats.limit=0
}

func ExampleExpvar() {
	v := memtrack.Expvar()
	// Publish it once, in main, to serve it at /debug/vars:
	//	expvar.Publish("memtrack", v)

	buf, err := memtrack.CPU().Alloc(1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()

	var stats map[string]memtrack.Stats // what a reader of /debug/vars gets
	if err := json.Unmarshal([]byte(v.String()), &stats); err != nil {
		log.Fatal(err)
	}
	fmt.Println(stats["cpu"].Current, stats["cpu"].Active)
	// Output:
	// 1048576 1
}
