package memtrack

import (
	"fmt"
	"testing"
)

// BenchmarkCategoryPair measures an Alloc+Free through a category over the
// backend that does nothing, and nothing else in its loop, so that
// instruction counts (scripts/bench-instructions.sh, OVERLAY=category_bench_test.go) give the categorised
// pair's own cost: through the first category of the device
// (category=first) and, where the device has MaxCategories, through the
// last (category=last), which costs the same.
func BenchmarkCategoryPair(b *testing.B) {
	useBackend(b, KindCUDA, noopBackend{})
	d := Device{kind: KindCUDA}
	first, err := d.Category("bench")
	if err != nil {
		b.Fatal(err)
	}
	last := first
	for i := 1; i < MaxCategories; i++ {
		if last, err = d.Category(fmt.Sprint("bench", i)); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		c    Category
	}{{"first", first}, {"last", last}} {
		b.Run("category="+tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf, err := tc.c.Alloc(1 << 20)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
