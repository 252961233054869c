// Command track shows memtrack counting memory that it does not allocate:
// a model whose tensors come from another binding, and a library's
// workspace that the program tracks by hand, measured and budgeted as
// examples/profile does, under a memory limit that covers both.
//
//	go run ./examples/track                 the CPU: Go memory, tracked with Device.Track
//	go run -tags cuda ./examples/track      CUDA device 0 through mumax's cu: tensors from
//	                                        the drop-in github.com/memtrack/memtrack/cu,
//	                                        cuBLAS-style workspaces from cu itself, tracked
//
// With -tags cuda it runs on any NVIDIA GPU, and on the fake driver of
// testdata/fakecuda (scripts/test-cuda.sh runs it there).
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/memtrack/memtrack"
)

// binding is where the example's memory comes from: code other than
// memtrack, which memtrack counts.
type binding interface {
	device() memtrack.Device
	// tensor allocates n bytes the way the program allocates its tensors
	// (counted by the binding itself) and returns their free.
	tensor(n int64) (free func())
	// workspace allocates n bytes the way a library allocates its own
	// workspace (not counted) and returns its address and free.
	workspace(n int64) (ptr uintptr, free func())
}

var (
	utilization = flag.Float64("utilization", 0.9, "fraction of the device's memory the program may use, in (0, 1]")
	blockSize   = flag.Int64("block-size", 16<<20, "bytes of one cache block in the budget")
	weights     = flag.Int64("weights", 64<<20, "bytes of the model's weights")
	activation  = flag.Int64("activation", 4<<20, "bytes of one layer's activations")
	workspaceN  = flag.Int64("workspace", 32<<20, "bytes of the library's workspace per layer")
	layers      = flag.Int("layers", 6, "layers of the model")
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("track: ")
	flag.Parse()
	if *utilization <= 0 || *utilization > 1 || *blockSize <= 0 || *weights <= 0 || *activation <= 0 || *workspaceN <= 0 || *layers < 1 {
		log.Fatal("every size and -layers must be positive, and -utilization in (0, 1]")
	}
	b, err := newBinding()
	check(err)
	dev := b.device()
	fmt.Printf("device %v (%s)\n", dev, bindingName)

	base, err := dev.Baseline() // before the weights, as vLLM takes it
	check(err)
	freeWeights := b.tensor(*weights)
	defer freeWeights()

	// Measure one forward pass: activations from the binding, a workspace
	// per layer from the library, tracked by hand.
	m, err := dev.Measure(func() error { return forward(b, dev, nil) })
	check(err)
	want := 2**activation + *workspaceN // the input, the output and the workspace
	fmt.Printf("peak above the weights: %d bytes (want %d: two activations and one workspace)\n", m.PeakTrackedIncrease, want)
	fmt.Printf("device: %d bytes in use before the pass, %d after; untracked growth %d\n", m.StartUsed, m.EndUsed, m.Untracked)
	if vllm, err := m.Budget(base, *utilization, *blockSize); err != nil {
		fmt.Printf("budget (vLLM's formula): %v\n", err) // the device had too little free at the baseline
	} else {
		fmt.Printf("budget (vLLM's formula): %d of %d bytes requested, %d set aside: %d blocks of %d bytes\n",
			vllm.Requested, m.Total, vllm.SetAside, vllm.Blocks, vllm.BlockSize)
	}
	shared, err := m.SharedBudget(*utilization, *blockSize)
	check(err)
	fmt.Printf("budget (shared device):  %d of %d bytes requested, %d set aside: %d blocks of %d bytes\n",
		shared.Requested, m.Total, shared.SetAside, shared.Blocks, shared.BlockSize)

	// A limit just under the measured peak: the library's workspace, which
	// Track counts, is what the limit refuses.
	limit := dev.MemoryAllocated() + want - 1
	check(dev.SetMemoryLimit(limit))
	var refused error
	err = forward(b, dev, &refused)
	check(dev.SetMemoryLimit(0))
	if err != nil || !errors.Is(refused, memtrack.ErrOutOfMemory) {
		log.Fatalf("under a limit of %d bytes the pass should have its workspace refused: %v, %v", limit, err, refused)
	}
	fmt.Printf("limit %d bytes: the workspace was refused: %v\n", limit, refused)

	fmt.Print(dev.MemorySummary())
	if m.PeakTrackedIncrease != want {
		fmt.Fprintf(os.Stderr, "track: the tracked peak is %d bytes, not %d\n", m.PeakTrackedIncrease, want)
		os.Exit(1)
	}
}

// forward runs the layers. Each layer allocates its output, borrows a
// workspace from the library and tracks it, then frees the workspace and
// its input. If refused is not nil, a workspace that Track refuses is
// freed, recorded there, and the layer skipped.
func forward(b binding, dev memtrack.Device, refused *error) error {
	freeIn := b.tensor(*activation)
	for range *layers {
		freeOut := b.tensor(*activation)
		ptr, freeWS := b.workspace(*workspaceN)
		ws, err := dev.Track(*workspaceN, ptr)
		if err != nil {
			freeWS()
			if refused == nil {
				freeOut()
				freeIn()
				return err
			}
			*refused = err
		} else {
			// ... the library runs here ...
			freeWS()
			if err := ws.Release(); err != nil {
				return err
			}
		}
		freeIn()
		freeIn = freeOut
	}
	freeIn()
	return nil
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
