package memtrack_test

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack"
)

// A category counts its own buffers beside the device's figures, and its
// limit refuses like the device's.
func ExampleDevice_Category() {
	dev := memtrack.CPU()
	kv, err := dev.Category(memtrack.CategoryKVCache)
	if err != nil {
		panic(err)
	}
	if err := kv.SetMemoryLimit(8 << 10); err != nil {
		panic(err)
	}
	defer kv.SetMemoryLimit(0)
	a, _ := kv.Alloc(4 << 10)
	b, _ := kv.Alloc(2 << 10)
	_, err = kv.Alloc(4 << 10)
	var oom *memtrack.OutOfMemoryError
	if errors.As(err, &oom) {
		fmt.Printf("refused in %s: %d requested, %d of %d tracked\n", oom.Category, oom.Requested, oom.Tracked, oom.Limit)
	}
	a.Free()
	s := kv.Stats()
	fmt.Printf("%s: tracked %d, peak %d, %d buffers, %d allocs, %d failed\n", s.Category, s.Tracked, s.PeakTracked, s.Buffers, s.Allocs, s.FailedAllocs)
	b.Free()
	// Output:
	// refused in kv_cache: 4096 requested, 6144 of 8192 tracked
	// kv_cache: tracked 2048, peak 6144, 1 buffers, 2 allocs, 1 failed
}
