package tracker_test

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack/tracker"
)

func ExampleCounter() {
	var c tracker.Counter
	_ = c.Alloc(300)
	_ = c.Alloc(200)
	_ = c.Free(400)
	fmt.Println(c.Current(), c.Peak())
	c.ResetPeak() // peak := current
	fmt.Println(c.Current(), c.Peak())
	fmt.Println(c.Free(1000))
	// Output:
	// 100 500
	// 100 100
	// memtrack: free exceeds the tracked figure: freeing 1000, tracking 100
}

func ExampleCounter_AllocWithin() {
	var c tracker.Counter
	const limit = 1 << 10
	fmt.Println(c.AllocWithin(768, limit))
	err := c.AllocWithin(512, limit)
	var le *tracker.LimitError
	fmt.Println(errors.As(err, &le), le.Tracked, errors.Is(err, tracker.ErrLimitExceeded))
	// Output:
	// <nil>
	// true 768 true
}

func ExampleRecord() {
	var r tracker.Record
	_ = r.Alloc(4096)
	_ = r.Alloc(1024)
	_ = r.Free(4096)
	s := r.Snapshot()
	fmt.Printf("current %d, peak %d, live %d (peak %d)\n", s.Tracked, s.PeakTracked, s.Buffers, s.PeakBuffers)
	fmt.Printf("allocated %d in %d, freed %d in %d\n", s.AllocBytes, s.Allocs, s.FreedBytes, s.Frees)
	// Output:
	// current 1024, peak 5120, live 1 (peak 2)
	// allocated 5120 in 2, freed 4096 in 1
}

func ExampleTable() {
	var t tracker.Table
	r, _ := t.Record(1)
	_ = r.Alloc(64)
	t.Range(func(ordinal int, r *tracker.Record) bool {
		fmt.Println(ordinal, r.Tracked())
		return true
	})
	// Output:
	// 1 64
}
