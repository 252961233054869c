package memtrack_test

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack"
)

// Peak scopes nest: the inner one sees only its own part, the outer one
// the whole, and a reset of the device's peak moves neither.
func ExampleDevice_OpenPeakScope() {
	dev := memtrack.CPU()
	base := dev.MemoryAllocated()
	outer, err := dev.OpenPeakScope()
	if err != nil {
		panic(err)
	}
	a, _ := dev.Alloc(4 << 20)
	a.Free()

	inner, _ := dev.OpenPeakScope()
	b, _ := dev.Alloc(1 << 20)
	dev.ResetPeakMemoryStats()
	b.Free()
	inner.Close()
	outer.Close()

	fmt.Println("outer:", outer.PeakTracked()-base)
	fmt.Println("inner:", inner.PeakTracked()-base)
	fmt.Println("closed again:", errors.Is(inner.Close(), memtrack.ErrScopeClosed))
	// Output:
	// outer: 4194304
	// inner: 1048576
	// closed again: true
}

// An observer runs on every refusal of the device, with the report.
func ExampleDevice_OnOutOfMemory() {
	dev := memtrack.CPU()
	obs, err := dev.OnOutOfMemory(func(e *memtrack.OutOfMemoryError) {
		fmt.Printf("observed: %d bytes refused by the %s\n", e.Requested, e.Reason)
	})
	if err != nil {
		panic(err)
	}
	defer obs.Remove()
	dev.SetMemoryLimit(dev.MemoryAllocated() + 4096)
	defer dev.SetMemoryLimit(0)

	_, err = dev.Alloc(8192)
	var oom *memtrack.OutOfMemoryError
	fmt.Println(errors.As(err, &oom), oom.Limit-oom.Tracked)
	// Output:
	// observed: 8192 bytes refused by the memory limit
	// true 4096
}
