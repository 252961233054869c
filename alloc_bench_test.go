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
		b.Run("op=alloc/size="+sz.name, func(b *testing.B) { benchAllocPairs(b, d.Alloc, sz.n) })
	}
	b.Run("op=category/size=4KiB", func(b *testing.B) { benchAllocPairs(b, benchCategory(b).Alloc, 4<<10) })
	b.Run("op=track/size=4KiB", func(b *testing.B) { benchTrackPairs(b, d, 4<<10, false) })
	b.Run("op=track-addressed/size=4KiB", func(b *testing.B) { benchTrackPairs(b, d, 4<<10, true) })
}

// The helpers of the pairs' loops are named bench..., so that
// scripts/bench-instructions.sh leaves them out of the library's own
// instructions, as it leaves out the Benchmark functions.

// benchAllocPairs allocates size bytes with alloc and frees them, b.N times.
func benchAllocPairs(b *testing.B, alloc func(int64) (*Buffer, error), size int64) {
	for b.Loop() {
		buf, err := alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		if err := buf.Free(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchTrackPairs tracks size bytes on d and releases them, b.N times, at an
// address of its own each time where addressed, else without one.
func benchTrackPairs(b *testing.B, d Device, size int64, addressed bool) {
	next, p := uintptr(0x10000000), uintptr(0)
	for b.Loop() {
		if addressed {
			next += uintptr(size)
			p = next
		}
		t, err := d.Track(size, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := t.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchCategory returns the CPU's category of the benchmarks.
func benchCategory(b *testing.B) Category {
	c, err := CPU().Category("bench-pair")
	if err != nil {
		b.Fatal(err)
	}
	return c
}
