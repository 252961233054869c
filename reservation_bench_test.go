package memtrack

import (
	"errors"
	"testing"
)

// BenchmarkCPUMapUnmap is a tracked map and unmap on the CPU
// (Reservation.Map and Reservation.Unmap: the reservation's checks, the
// one acquisition and release paths, an mprotect and an mmap), of one
// granule (a page) and of 1 MiB, whose pages are never written:
//
//	go test -run '^$' -bench CPUMapUnmap -count 10 .
func BenchmarkCPUMapUnmap(b *testing.B) {
	d := CPU()
	g, err := d.MapGranularity()
	if errors.Is(err, ErrNotSupported) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []struct {
		name string
		n    int64
	}{{"granule", g}, {"1MiB", max(1<<20/g, 1) * g}} {
		b.Run("size="+size.name, func(b *testing.B) {
			r, err := d.Reserve(2 * size.n)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Release()
			benchMapPairs(b, r, size.n)
		})
	}
}

// benchMapPairs maps size bytes at offset size of r and unmaps them, b.N
// times.
func benchMapPairs(b *testing.B, r *Reservation, size int64) {
	for b.Loop() {
		if err := r.Map(size, size); err != nil {
			b.Fatal(err)
		}
		if err := r.Unmap(size, size); err != nil {
			b.Fatal(err)
		}
	}
}
