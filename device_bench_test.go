package memtrack

import (
	"testing"

	"github.com/memtrack/memtrack/internal/interleave"
	"github.com/memtrack/memtrack/tracker"
)

// noopBackend hands out no memory at all, so that a benchmark over it
// measures only the Device layer: the checks, the counters and the Buffer.
type noopBackend struct{}

func (noopBackend) devices() (int, error)                      { return 1, nil }
func (noopBackend) alloc(int, int64, *memory) error            { return nil }
func (noopBackend) free(int, int64, *memory) error             { return nil }
func (noopBackend) memInfo(int) (free, total int64, err error) { return 0, 0, nil }

// BenchmarkDeviceLayer measures the fixed cost that tracking adds to every
// Alloc+Free pair, whatever the backend: an allocation over a backend that
// does nothing.
func BenchmarkDeviceLayer(b *testing.B) {
	useBackend(b, KindCUDA, noopBackend{})
	d := Device{kind: KindCUDA}
	for _, sites := range []bool{false, true} {
		name := "sites=off"
		if sites {
			name = "sites=on"
			if err := d.Sites().Enable(8); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf, err := d.Alloc(1 << 20)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	d.Sites().Disable()
}

// sinkBytes keeps the baseline's slice escaping to the heap, as a tracked
// buffer's memory does.
var sinkBytes []byte

// BenchmarkCPUPair measures a 64-byte CPU Alloc+Free through the Device
// layer (design=tracked) against a bare make([]byte, 64) that escapes
// (design=make): the ratio of the two is the Device layer's cost on the
// smallest buffers, where it is largest.
func BenchmarkCPUPair(b *testing.B) {
	const size = 64
	b.Run("design=tracked", func(b *testing.B) {
		b.ReportAllocs()
		d := CPU()
		for b.Loop() {
			buf, err := d.Alloc(size)
			if err != nil {
				b.Fatal(err)
			}
			if err := buf.Free(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("design=make", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkBytes = make([]byte, size)
		}
	})
}

// BenchmarkCategoryLayer measures, over the backend that does nothing, an
// Alloc+Free through a category against the same pair on the device
// without one, in alternating blocks of one run, and a third block: the
// device's pair followed by a bare tracker.Record Alloc+Free, which is
// "one more record update" by construction. It reports the three pairs' ns
// and the ratios category/device and onemore/device.
func BenchmarkCategoryLayer(b *testing.B) {
	useBackend(b, KindCUDA, noopBackend{})
	d := Device{kind: KindCUDA}
	c, err := d.Category("bench")
	if err != nil {
		b.Fatal(err)
	}
	const block = 64
	pair := func(alloc func(int64) (*Buffer, error)) {
		for range block {
			buf, err := alloc(1 << 20)
			if err != nil {
				b.Fatal(err)
			}
			if err := buf.Free(); err != nil {
				b.Fatal(err)
			}
		}
	}
	var extra tracker.Record
	oneMore := func(n int64) (*Buffer, error) {
		buf, err := d.Alloc(n)
		if err == nil {
			err = extra.Alloc(n)
		}
		if err == nil {
			err = extra.Free(n)
		}
		return buf, err
	}
	took, n := interleave.Run(b, block, func() { pair(d.Alloc) }, func() { pair(c.Alloc) }, func() { pair(oneMore) })
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(n), "device-ns/pair")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(n), "category-ns/pair")
	b.ReportMetric(float64(took[2].Nanoseconds())/float64(n), "onemore-ns/pair")
	b.ReportMetric(float64(took[1])/float64(took[0]), "category/device")
	b.ReportMetric(float64(took[2])/float64(took[0]), "onemore/device")
}
