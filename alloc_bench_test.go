package memtrack

import "testing"

// BenchmarkPair measures, with every feature off, the pairs whose cost the
// allocation path must keep: a CPU Alloc+Free at 64 B, 4 KiB and 1 MiB, the
// same 4 KiB pair through a category, and a Track+Release of 4 KiB with an
// address and without one. It uses only the exported API, so that
// scripts/bench-base.sh and scripts/bench-instructions.sh can run it at a
// base commit that lacks it (OVERLAY=alloc_bench_test.go).
func BenchmarkPair(b *testing.B) {
	d := CPU()
	for _, sz := range []struct {
		name string
		n    int64
	}{{"64B", 64}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		b.Run("op=alloc/size="+sz.name, func(b *testing.B) {
			for b.Loop() {
				buf, err := d.Alloc(sz.n)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("op=category/size=4KiB", func(b *testing.B) {
		c, err := d.Category("bench-pair")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			buf, err := c.Alloc(4 << 10)
			if err != nil {
				b.Fatal(err)
			}
			if err := buf.Free(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=track/size=4KiB", func(b *testing.B) {
		for b.Loop() {
			t, err := d.Track(4<<10, 0)
			if err != nil {
				b.Fatal(err)
			}
			if err := t.Release(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=track-addressed/size=4KiB", func(b *testing.B) {
		p := uintptr(0x10000000)
		for b.Loop() {
			p += 4 << 10
			t, err := d.Track(4<<10, p)
			if err != nil {
				b.Fatal(err)
			}
			if err := t.Release(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
