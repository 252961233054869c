package memtrack

import "testing"

// noopBackend hands out no memory at all, so that a benchmark over it
// measures only the Device layer: the checks, the counters and the Buffer.
type noopBackend struct{}

func (noopBackend) devices() (int, error)                      { return 1, nil }
func (noopBackend) alloc(int, int64) (memory, error)           { return memory{}, nil }
func (noopBackend) free(int, memory) error                     { return nil }
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
