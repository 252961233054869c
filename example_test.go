package memtrack_test

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack"
)

// Profile the peak of a piece of work on a device: reset the peak, run, read.
func Example() {
	dev := memtrack.CPU()
	base := dev.MemoryAllocated()
	dev.ResetPeakMemoryStats()

	weights, _ := dev.Alloc(8 << 20)
	activations, _ := dev.Alloc(2 << 20)
	_ = activations.Free()
	scratch, _ := dev.Alloc(1 << 20)
	_ = scratch.Free()

	fmt.Println("held:", dev.MemoryAllocated()-base)
	fmt.Println("peak:", dev.MaxMemoryAllocated()-base)
	_ = weights.Free()
	// Output:
	// held: 8388608
	// peak: 10485760
}

func ExampleParseDevice() {
	d, err := memtrack.ParseDevice("cpu")
	fmt.Println(d, d.Kind(), d.Ordinal(), err)
	_, err = memtrack.ParseDevice("tpu:0")
	fmt.Println(errors.Is(err, memtrack.ErrInvalidDevice))
	// Output:
	// cpu cpu 0 <nil>
	// true
}

func ExampleDevice_SetMemoryLimit() {
	dev := memtrack.CPU()
	_ = dev.SetMemoryLimit(dev.MemoryAllocated() + 1<<20)
	defer dev.SetMemoryLimit(0)

	_, err := dev.Alloc(2 << 20)
	var oom *memtrack.OutOfMemoryError
	fmt.Println(errors.Is(err, memtrack.ErrOutOfMemory), errors.As(err, &oom), oom.Reason)
	// Output:
	// true true memory limit
}

func ExampleDevice_MemoryStats() {
	dev := memtrack.CPU()
	dev.ResetAccumulatedMemoryStats()
	a, _ := dev.Alloc(4096)
	b, _ := dev.Alloc(1024)
	_ = a.Free()
	s := dev.MemoryStats()
	fmt.Println(s.Allocs, s.Frees, s.AllocatedBytes, s.FreedBytes)
	_ = b.Free()
	// Output:
	// 2 1 5120 4096
}

func ExampleBuffer_Free() {
	b, _ := memtrack.CPU().Alloc(64)
	fmt.Println(b.Free())
	fmt.Println(errors.Is(b.Free(), memtrack.ErrDoubleFree))
	// Output:
	// <nil>
	// true
}
