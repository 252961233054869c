package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/memtrack/memtrack"
)

// BenchmarkSitesSampling measures a 64-byte CPU Device.Alloc + Buffer.Free
// called from 32 frames deep (a framework's depth), with allocation sites
// off, sampled at memtrack.DefaultSiteRate (on average one sample per
// 512 KiB), and recorded exactly (rate 1), 32 frames each. The target of the
// sampling is default/off <= 1.2; compare the designs in one run, alternated
// in time (-count 1, N times), as ratios:
//
//	for i in 1 2 3 4 5 6 7 8; do
//		go test -run '^$' -bench SitesSampling -count 1 ./bench
//	done > sampling.txt
//	benchstat -col /sites sampling.txt
func BenchmarkSitesSampling(b *testing.B) {
	const size, depth = 64, 32
	d := memtrack.CPU()
	for _, bc := range []struct {
		name string
		rate int64 // -1: off
	}{
		{"off", -1},
		{"default", 0},
		{"rate1", 1},
	} {
		b.Run("sites="+bc.name, func(b *testing.B) {
			if bc.rate >= 0 {
				if err := d.Sites().SetRate(bc.rate); err != nil {
					b.Skip(err)
				}
				defer d.Sites().SetRate(0)
				if err := d.Sites().Enable(depth); err != nil {
					b.Skip(err)
				}
				defer d.Sites().Disable()
			}
			b.ReportAllocs()
			samplingDepth(depth-2, func() {
				for b.Loop() {
					sampledPair(b, d, size)
				}
			})
		})
	}
}

// BenchmarkSitesSamplingRatio measures the cost of allocation sites as a
// paired ratio that holds on a loaded machine: each iteration times a block
// of 1000 64-byte pairs (32 frames deep) with sites off and a block with
// sites on (sampled at the default rate, or every allocation at rate 1),
// alternating which goes first, and the metric on/off is the median of the
// blocks' ratios, so that both see the same moments of the machine's load.
// The target of the default rate is on/off <= 1.2. (ns/op covers a pair of
// blocks and the toggling; ns/pair-off and ns/pair-on are the medians.)
//
//	go test -run '^$' -bench SitesSamplingRatio -count 8 ./bench
func BenchmarkSitesSamplingRatio(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate int64
	}{{"default", 0}, {"rate1", 1}} {
		b.Run("sites="+bc.name, func(b *testing.B) { samplingRatio(b, bc.rate) })
	}
}

func samplingRatio(b *testing.B, rate int64) {
	const size, depth, block = 64, 32, 1000
	d := memtrack.CPU()
	if err := d.Sites().SetRate(rate); err != nil {
		b.Skip(err)
	}
	defer d.Sites().SetRate(0)
	if err := d.Sites().Enable(depth); err != nil {
		b.Skip(err)
	}
	d.Sites().Disable()
	timed := func(on bool) time.Duration {
		if on {
			if err := d.Sites().Enable(depth); err != nil {
				b.Fatal(err)
			}
			defer d.Sites().Disable()
		}
		start := time.Now()
		for range block {
			sampledPair(b, d, size)
		}
		return time.Since(start)
	}
	var ratios, off, on []float64
	samplingDepth(depth-2, func() {
		for i := 0; b.Loop(); i++ {
			var tOff, tOn time.Duration
			if i%2 == 0 {
				tOff, tOn = timed(false), timed(true)
			} else {
				tOn, tOff = timed(true), timed(false)
			}
			ratios = append(ratios, float64(tOn)/float64(tOff))
			off = append(off, float64(tOff)/block)
			on = append(on, float64(tOn)/block)
		}
	})
	b.ReportMetric(samplingMedian(ratios), "on/off")
	b.ReportMetric(samplingMedian(off), "ns/pair-off")
	b.ReportMetric(samplingMedian(on), "ns/pair-on")
}

func samplingMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// samplingDepth calls f n frames below its caller.
//
//go:noinline
func samplingDepth(n int, f func()) {
	if n <= 0 {
		f()
		return
	}
	samplingDepth(n-1, f)
}

func sampledPair(b *testing.B, d memtrack.Device, size int64) {
	buf, err := d.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	if err := buf.Free(); err != nil {
		b.Fatal(err)
	}
}
