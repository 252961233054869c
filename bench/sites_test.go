package bench

import (
	"strconv"
	"testing"

	"github.com/memtrack/memtrack"
)

// stackDepth is the depth of the stack the sites benchmarks allocate from,
// counted from the benchmark's function: a framework's depth (a training
// loop, a model's layers, a tensor library, its allocator), so that a site
// of 32 frames has 32 frames to walk and one of 8 stops early.
const stackDepth = 36

// BenchmarkSitesAllocFree measures Device.Alloc + Buffer.Free of a 64-byte
// CPU buffer, called stackDepth frames deep, with the recording of
// allocation sites off and on (depth8, depth32: the frames kept), each at
// the default sampling rate (rate=default, memtrack.DefaultSiteRate) and
// recording every allocation (rate=1), serially and from every P.
//
// Recording on against off, as ratios side by side, alternated in time:
//
//	for i in 1 2 3 4 5 6 7 8; do
//		go test -run '^$' -bench SitesAllocFree -count 1 ./bench
//	done > sites.txt
//	benchstat -col /sites sites.txt
//
// With sites=off the hook costs one atomic load (a nil table) on Alloc and a
// nil check on Free, which every feature of the device shares
// (docs/performance.md).
func BenchmarkSitesAllocFree(b *testing.B) {
	const size = 64
	d := memtrack.CPU()
	type config struct {
		name  string
		depth int   // 0: off
		rate  int64 // 0: the default
	}
	configs := []config{{"off", 0, 0}}
	for _, depth := range []int{8, 32} {
		for _, rate := range []struct {
			name string
			rate int64
		}{{"default", 0}, {"1", 1}} {
			configs = append(configs, config{"depth" + strconv.Itoa(depth) + "/rate=" + rate.name, depth, rate.rate})
		}
	}
	for _, bc := range configs {
		run := func(b *testing.B, body func(b *testing.B)) {
			if bc.depth > 0 {
				if err := d.Sites().SetRate(bc.rate); err != nil {
					b.Skip(err)
				}
				defer d.Sites().SetRate(0)
				if err := d.Sites().Enable(bc.depth); err != nil {
					b.Skip(err)
				}
				defer d.Sites().Disable()
			}
			b.ReportAllocs()
			body(b)
		}
		b.Run("sites="+bc.name+"/mode=serial", func(b *testing.B) {
			run(b, func(b *testing.B) {
				atDepth(stackDepth, func() {
					for b.Loop() {
						allocFree(b, d, size)
					}
				})
			})
		})
		b.Run("sites="+bc.name+"/mode=parallel", func(b *testing.B) {
			run(b, func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					atDepth(stackDepth, func() {
						for pb.Next() {
							allocFree(b, d, size)
						}
					})
				})
			})
		})
	}
}

// atDepth calls f about n frames below its caller (the closure and the
// loop add two).
//
//go:noinline
func atDepth(n int, f func()) {
	if n <= 2 {
		f()
		return
	}
	atDepth(n-1, f)
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
