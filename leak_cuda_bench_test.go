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
	for _, watch := range []string{"off", "on"} {
		b.Run("watch="+watch, func(b *testing.B) { benchWatchedPair(b, d, 1<<20, watch == "on") })
	}
}
