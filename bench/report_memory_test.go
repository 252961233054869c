package bench

import (
	"os"
	"strconv"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/memtest"
)

// BenchmarkReportMemory is an operation that holds two CPU buffers at once
// and allocates three in all, reported by memtest.ReportMemory: the example
// of docs/leaks.md, where MEMTRACK_BENCH_SCALE (a factor on the sizes,
// default 1) stands for a second version of the code.
func BenchmarkReportMemory(b *testing.B) {
	scale := int64(1)
	if s, err := strconv.ParseInt(os.Getenv("MEMTRACK_BENCH_SCALE"), 10, 64); err == nil && s > 0 {
		scale = s
	}
	d := memtrack.CPU()
	memtest.ReportMemory(b, d)
	for b.Loop() {
		x, err := d.Alloc(64 << 10 * scale)
		must(err)
		y, err := d.Alloc(16 << 10 * scale)
		must(err)
		must(x.Free())
		z, err := d.Alloc(4 << 10 * scale)
		must(err)
		must(y.Free())
		must(z.Free())
	}
}
