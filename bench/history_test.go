package bench

import (
	"testing"

	"github.com/memtrack/memtrack"
)

// BenchmarkHistoryAllocFree measures Device.Alloc + Buffer.Free of a small
// CPU buffer with the memory history off and on, serially and from every P.
// On, each pair writes two events into a ring of 1 Mi entries (which wraps
// during the run, as a long-running program's does).
//
// With history=off the hook costs one atomic load (a nil table) and a
// branch on Alloc and on Free. The cost of having the hook at all is the
// same benchmark's sites=off case built from the commit before the hook,
// run alternately with this one (see docs/timeline.md):
//
//	go test -c -o new.test ./bench && (cd $BASE && go test -c -o old.test ./bench)
//	for i in $(seq 10); do old.test -test.run '^$' -test.bench 'SitesAllocFree/sites=off' >> old.txt; new.test ... >> new.txt; done
//	benchstat old.txt new.txt
func BenchmarkHistoryAllocFree(b *testing.B) {
	const size = 64
	d := memtrack.CPU()
	for _, on := range []bool{false, true} {
		name := "history=off"
		if on {
			name = "history=on"
		}
		run := func(b *testing.B, body func(b *testing.B)) {
			if on {
				if err := d.History().Enable(benchRing); err != nil {
					b.Fatal(err)
				}
				defer d.History().Disable()
				b.ResetTimer() // the ring's 64 MiB are not the pairs'
			}
			b.ReportAllocs()
			body(b)
		}
		b.Run(name+"/mode=serial", func(b *testing.B) {
			run(b, func(b *testing.B) {
				for b.Loop() {
					allocFree(b, d, size)
				}
			})
		})
		b.Run(name+"/mode=parallel", func(b *testing.B) {
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

// benchRing is the size of the ring the benchmark records into.
var benchRing = 1 << 20
