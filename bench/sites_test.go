package bench

import (
	"testing"

	"github.com/memtrack/memtrack"
)

// BenchmarkSitesAllocFree measures Device.Alloc + Buffer.Free of a small CPU
// buffer with the recording of allocation sites off and on, serially and
// from every P.
//
// Recording on against off, as ratios side by side:
//
//	go test -run '^$' -bench SitesAllocFree -count 10 ./bench > sites.txt
//	benchstat -col /sites sites.txt
//
// With sites=off the hook costs one atomic load (a nil table) on Alloc and a
// nil check on Free. The build-equivalent path is the same benchmark built
// with -tags memtrack_nosites, where the hook is compiled out (and the
// sites=depth cases are skipped):
//
//	go test -run '^$' -bench 'SitesAllocFree/sites=off' -count 10 -tags memtrack_nosites ./bench > nosites.txt
//	benchstat nosites.txt sites.txt
func BenchmarkSitesAllocFree(b *testing.B) {
	const size = 64
	d := memtrack.CPU()
	for _, bc := range []struct {
		name  string
		depth int // 0: off
	}{
		{"off", 0},
		{"depth8", 8},
		{"depth32", 32},
	} {
		run := func(b *testing.B, body func(b *testing.B)) {
			if bc.depth > 0 {
				if err := d.EnableAllocationSites(bc.depth); err != nil {
					b.Skip(err)
				}
				defer d.DisableAllocationSites()
			}
			b.ReportAllocs()
			body(b)
		}
		b.Run("sites="+bc.name+"/mode=serial", func(b *testing.B) {
			run(b, func(b *testing.B) {
				for b.Loop() {
					allocFree(b, d, size)
				}
			})
		})
		b.Run("sites="+bc.name+"/mode=parallel", func(b *testing.B) {
			run(b, func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						allocFree(b, d, size)
					}
				})
			})
		})
	}
}

func allocFree(b *testing.B, d memtrack.Device, size int64) {
	buf, err := d.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	if err := buf.Free(); err != nil {
		b.Fatal(err)
	}
}
