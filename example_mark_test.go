package memtrack_test

import (
	"fmt"

	"github.com/memtrack/memtrack"
)

// A program names its phases in the device's history: a span around
// loading the weights and a mark once they are loaded. Package trace and
// the page draw them on the timeline; without a history they do nothing.
func ExampleHistoryRecorder_BeginSpan() {
	dev := memtrack.CPU()
	if err := dev.History().Enable(64); err != nil {
		fmt.Println(err)
		return
	}
	defer dev.History().Disable()

	load, err := dev.History().BeginSpan("load weights")
	if err != nil {
		fmt.Println(err)
		return
	}
	weights, err := dev.Alloc(1 << 20)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer weights.Free()
	load.End()
	dev.History().Mark("weights loaded")

	h, err := dev.History().Snapshot()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range h.Events {
		fmt.Printf("%-5v %-16q size %d, span %d\n", e.Action, e.Mark, e.Size, e.Span)
	}
	// Output:
	// begin "load weights"   size 0, span 0
	// alloc ""               size 1048576, span 0
	// end   "load weights"   size 0, span 0
	// mark  "weights loaded" size 0, span 0
}
