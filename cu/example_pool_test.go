//go:build cuda

package cu_test

import (
	"fmt"
	"runtime"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/cu"
	mcu "github.com/mumax/3/cuda/cu"
)

// A buffer pool like mumax3's keeps what is recycled: that memory is not
// freed, so it stays tracked until the pool frees it. Here the pool
// allocates with mumax's cu and counts each buffer with Category.Track, so
// that its share is counted apart from what the drop-in's MemAlloc counts
// (outside every category). scripts/test-cuda.sh runs it on the fake
// driver.
func Example_pool() {
	cu.Init(0)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := cu.CtxGetCurrent()
	cu.CtxSetCurrent(cu.DevicePrimaryCtxRetain(cu.DeviceGet(0)))
	defer cu.CtxSetCurrent(prev)

	dev, err := memtrack.CUDA(0)
	if err != nil {
		panic(err)
	}
	pool, err := dev.Category("buffer_pool")
	if err != nil {
		panic(err)
	}
	const size = 16 << 10
	var idle []*memtrack.Tracked
	get := func() *memtrack.Tracked {
		if n := len(idle); n > 0 {
			t := idle[n-1]
			idle = idle[:n-1]
			return t
		}
		p := mcu.MemAlloc(size)
		t, err := pool.Track(size, uintptr(p))
		if err != nil {
			mcu.MemFree(p)
			panic(err)
		}
		return t
	}
	recycle := func(t *memtrack.Tracked) { idle = append(idle, t) }
	freeAll := func() {
		for _, t := range idle {
			t.FreeWith(func() error {
				mcu.MemFree(mcu.DevicePtr(t.DevicePtr()))
				return nil
			})
		}
		idle = nil
	}
	before := dev.MemoryAllocated()
	show := func(step string) {
		s := pool.Stats()
		fmt.Printf("%-9s device %6d, pool %5d in %d buffers, %d allocs\n", step+":", dev.MemoryAllocated()-before, s.Tracked, s.Buffers, s.Allocs)
	}

	weights := cu.MemAlloc(64 << 10)
	a, b := get(), get()
	show("in use")
	recycle(a)
	recycle(b)
	show("recycled")
	recycle(get())
	show("reused")
	freeAll()
	show("freed")
	weights.Free()
	show("weights")
	// Output:
	// in use:   device  98304, pool 32768 in 2 buffers, 2 allocs
	// recycled: device  98304, pool 32768 in 2 buffers, 2 allocs
	// reused:   device  98304, pool 32768 in 2 buffers, 2 allocs
	// freed:    device  65536, pool     0 in 0 buffers, 2 allocs
	// weights:  device      0, pool     0 in 0 buffers, 2 allocs
}
