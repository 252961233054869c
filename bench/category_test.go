package bench

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/interleave"
)

// BenchmarkCategoryAllocFree measures a CPU Alloc+Free through a category
// (Category.Alloc, which updates the category's record beside the
// device's) against the same pair without one (Device.Alloc, the pair
// every program makes), in alternating blocks of one run
// (internal/interleave), at 64 B, where the fixed costs weigh most, and at
// 1 MiB. It reports both pairs' ns and their ratio, category/device.
func BenchmarkCategoryAllocFree(b *testing.B) {
	d := memtrack.CPU()
	c, err := d.Category("bench")
	if err != nil {
		b.Fatal(err)
	}
	pair := func(alloc func(int64) (*memtrack.Buffer, error), n int64) {
		buf, err := alloc(n)
		must(err)
		must(buf.Free())
	}
	for _, s := range []struct {
		name string
		n    int64
	}{{"64B", 64}, {"1MiB", 1 << 20}} {
		b.Run("size="+s.name, func(b *testing.B) {
			const block = 64
			took, n := interleave.Run(b, block,
				func() {
					for range block {
						pair(d.Alloc, s.n)
					}
				},
				func() {
					for range block {
						pair(c.Alloc, s.n)
					}
				},
			)
			device, category := took[0], took[1]
			b.ReportMetric(float64(device.Nanoseconds())/float64(n), "device-ns/pair")
			b.ReportMetric(float64(category.Nanoseconds())/float64(n), "category-ns/pair")
			b.ReportMetric(float64(category)/float64(device), "category/device")
		})
	}
}
