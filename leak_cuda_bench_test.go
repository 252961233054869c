//go:build cuda

package memtrack

import "testing"

// BenchmarkCUDALeakWatch measures what watching a device for leaks adds to
// a 1 MiB Alloc+Free pair on CUDA device 0 (cuMemAlloc and cuMemFree, on
// the fake driver in CI): watch=off, an unwatched device; watch=on, a
// watched one.
func BenchmarkCUDALeakWatch(b *testing.B) {
	d, err := CUDA(0)
	if err != nil {
		b.Skip(err)
	}
	for _, watch := range []bool{false, true} {
		name := "watch=off"
		if watch {
			name = "watch=on"
		}
		b.Run(name, func(b *testing.B) {
			if watch {
				if err := d.EnableLeakWatch(LeakWatch{Handler: func(Leak) {}}); err != nil {
					b.Fatal(err)
				}
				defer d.DisableLeakWatch()
			}
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
}
