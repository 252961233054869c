package memtrack_test

import (
	"context"
	"fmt"
	"time"

	"github.com/memtrack/memtrack"
)

// A cache that follows the device: the program runs the follower in a
// goroutine of its own, and resizes its cache to each target it sends.
func ExampleMeasurement_Follow() {
	d := memtrack.CPU()
	base, err := d.Baseline() // before the weights
	if err != nil {
		fmt.Println(err)
		return
	}
	weights, err := d.Alloc(8 << 20)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer weights.Free()
	m, err := d.Measure(func() error { // one forward pass
		act, err := d.Alloc(4 << 20)
		if err != nil {
			return err
		}
		return act.Free()
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	f, err := m.Follow(base, 0.5, 64<<20) // Budget's arguments
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan memtrack.Target)
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, time.Second, changes) }()

	t := <-changes // the first reading's target
	// Here the program grows its cache to t.Blocks, or shrinks it,
	// dropping the blocks it chooses: memtrack frees nothing on its own.
	fmt.Printf("changed from %d blocks: %v\n", t.Previous, t.Changed)
	fmt.Println("within Budget's blocks:", t.Blocks <= t.Common.Blocks)
	fmt.Println("per-process figures:", t.PerProcess, t.PerProcessErr)

	cancel()
	fmt.Println(<-done)
	// Output:
	// changed from 0 blocks: true
	// within Budget's blocks: true
	// per-process figures: false <nil>
	// context canceled
}
