package memtrack

import "testing"

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
			if err := d.EnableAllocationSites(8); err != nil {
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
	d.DisableAllocationSites()
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
