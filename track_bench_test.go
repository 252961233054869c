package memtrack

import "testing"

// BenchmarkTrack measures the bookkeeping of a tracked pair, by itself:
// Track with an address, the lookup by address, and FreeWith; TrackAddr and
// UntrackAddr, as the cu drop-in runs them around its two driver calls; and
// Track without an address and Release (no index).
func BenchmarkTrack(b *testing.B) {
	d := freshCPU(b)
	b.Run("pair=addressed", func(b *testing.B) {
		b.ReportAllocs()
		p := uintptr(0x10000000)
		for b.Loop() {
			p += 256
			if _, err := d.Track(1024, p); err != nil {
				b.Fatal(err)
			}
			if err := KindCPU.TrackedAt(p).FreeWith(func() error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pair=addr", func(b *testing.B) {
		b.ReportAllocs()
		p := uintptr(0x10000000)
		free := func() error { return nil }
		for b.Loop() {
			p += 256
			if err := d.TrackAddr(1024, p); err != nil {
				b.Fatal(err)
			}
			if ok, err := KindCPU.UntrackAddr(p, free); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("pair=plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h, err := d.Track(1024, 0)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Release(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
