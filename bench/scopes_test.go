package bench

import (
	"fmt"
	"testing"

	"github.com/memtrack/memtrack/tracker"
)

// BenchmarkScopes measures the Alloc+Free pair of tracker.Record and
// tracker.Counter with peak scopes open (scopes=N): scopes=0 is the pair as
// every allocation pays it while no scope is open (one atomic load more
// than before scopes existed; scripts/bench-base.sh puts it beside the
// pair of a commit without them). With N scopes open, each pair loads N
// scope peaks; -rising frees one byte less than it allocates, so that the
// record's peak and every scope's rise on every pair (a compare-and-swap
// each), the worst case.
func BenchmarkScopes(b *testing.B) {
	type figure interface {
		Alloc(int64) error
		Free(int64) error
		OpenScope() *tracker.Scope
	}
	designs := []struct {
		name string
		make func() figure
		free int64
	}{
		{"Record", func() figure { return new(tracker.Record) }, size},
		{"Record-rising", func() figure { return new(tracker.Record) }, size - 1},
		{"Counter", func() figure { return new(tracker.Counter) }, size},
		{"Counter-rising", func() figure { return new(tracker.Counter) }, size - 1},
	}
	for _, d := range designs {
		for _, n := range []int{0, 1, 4, 16} {
			b.Run(fmt.Sprintf("design=%s/scopes=%d", d.name, n), func(b *testing.B) {
				b.ReportAllocs()
				f := d.make()
				for range n {
					sc := f.OpenScope()
					defer sc.Close()
				}
				for b.Loop() {
					must(f.Alloc(size))
					must(f.Free(d.free))
				}
			})
		}
	}
}
