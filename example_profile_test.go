package memtrack_test

import (
	"fmt"
	"log"

	"github.com/memtrack/memtrack"
)

func ExampleDevice_Profile() {
	dev := memtrack.CPU() // or a GPU: memtrack.ParseDevice("cuda:0")
	weights, err := dev.Alloc(64 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer weights.Free()

	// One dummy forward pass: activations come and go.
	p, err := dev.Profile(func() error {
		hidden, err := dev.Alloc(16 << 20)
		if err != nil {
			return err
		}
		scores, err := dev.Alloc(32 << 20)
		if err != nil {
			return err
		}
		if err := scores.Free(); err != nil {
			return err
		}
		return hidden.Free()
	})
	if err != nil {
		log.Fatal(err)
	}
	// The tracked figures are exact; p.UsedIncrease and p.Untracked come
	// from the OS or driver and vary from run to run.
	fmt.Println("peak above the weights:", p.TrackedPeakIncrease>>20, "MiB")
	fmt.Println("held after the pass:", (p.EndTracked-p.BaselineTracked)>>20, "MiB")
	// Output:
	// peak above the weights: 48 MiB
	// held after the pass: 0 MiB
}

func ExampleProfile_Budget() {
	// The figures a profile of an 80 GiB GPU might give.
	p := memtrack.Profile{
		Total:               80 << 30,
		BaselineUsed:        20 << 30, // the context, the weights, other processes
		TrackedPeakIncrease: 6 << 30,  // the forward pass's activations
		Untracked:           1 << 30,  // what libraries allocated on their own
	}
	b, err := p.Budget(0.9, 16<<20)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d GiB may be used, %d GiB is taken at the peak: %d GiB for the cache, %d blocks of %d MiB\n",
		b.Usable>>30, b.Reserved>>30, b.Available>>30, b.Blocks, b.BlockSize>>20)

	_, err = p.Budget(90, 16<<20)
	fmt.Println(err)
	// Output:
	// 72 GiB may be used, 27 GiB is taken at the peak: 45 GiB for the cache, 2880 blocks of 16 MiB
	// memtrack: invalid argument: 90: want a fraction of the device's memory in (0, 1]
}
