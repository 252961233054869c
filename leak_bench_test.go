package memtrack

import (
	"strconv"
	"testing"
)

// BenchmarkLeakWatch measures what watching a device for leaks adds to an
// Alloc+Free pair on the CPU: watch=off is the path of an unwatched device,
// watch=on registers and cancels a cleanup, reads the clock and keeps the
// entry. The sizes are a buffer from the Go heap (64 B, allocated with its
// Buffer) and one mapped from the OS (1 MiB).
func BenchmarkLeakWatch(b *testing.B) {
	for _, size := range []int64{64, 1 << 20} {
		for _, watch := range []string{"off", "on"} {
			b.Run("size="+strconv.FormatInt(size, 10)+"/watch="+watch, func(b *testing.B) {
				benchWatchedPair(b, CPU(), size, watch == "on")
			})
		}
	}
}

// benchWatchedPair runs Alloc+Free pairs of size bytes on d, watched for
// leaks or not.
func benchWatchedPair(b *testing.B, d Device, size int64, watch bool) {
	if watch {
		if err := d.Leaks().Enable(LeakWatch{Handler: func(Leak) {}}); err != nil {
			b.Fatal(err)
		}
		defer d.Leaks().Disable()
	}
	b.ReportAllocs()
	for b.Loop() {
		buf, err := d.Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		if err := buf.Free(); err != nil {
			b.Fatal(err)
		}
	}
}
