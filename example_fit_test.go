package memtrack_test

import (
	"bytes"
	"fmt"

	"github.com/memtrack/memtrack"
)

// A load planned on the CPU before it is made: 64 MiB of weights and a
// cache of four 16 MiB blocks, which the OS maps in whole pages, and a
// pass's activations of 32 MiB at their peak.
func ExamplePlan_Predict() {
	plan := memtrack.Plan{
		Device: memtrack.CPU(),
		Parts: []memtrack.PlanPart{
			{Category: memtrack.CategoryWeights, Size: 64 << 20, Count: 1},
			{Category: memtrack.CategoryKVCache, Size: 16 << 20, Count: 4},
		},
		Transient: 32 << 20,
	}
	p, err := plan.Predict()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d bytes more once loaded, %d at the most; fits: %v\n", p.Source, p.Predicted, p.Need, p.Fits)
	// Output: os: 134217728 bytes more once loaded, 167772160 at the most; fits: true
}

// A measurement written to a file and read back, as a later run on
// another machine reads it to plan from.
func ExampleReadMeasurement() {
	m := memtrack.Measurement{Device: memtrack.CPU(), Total: 1 << 30,
		StartTracked: 64 << 20, PeakTracked: 116 << 20, EndTracked: 64 << 20, PeakTrackedIncrease: 52 << 20,
		StartHeld: 64 << 20, PeakHeld: 116 << 20, EndHeld: 64 << 20, PeakHeldIncrease: 52 << 20}
	var file bytes.Buffer
	if err := memtrack.WriteMeasurement(&file, m); err != nil {
		fmt.Println(err)
		return
	}
	read, err := memtrack.ReadMeasurement(&file)
	if err != nil {
		fmt.Println(err)
		return
	}
	plan, err := memtrack.Plan{Device: memtrack.CPU()}.WithMeasurement(read)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(read.Device, plan.Transient)

	_, err = memtrack.ReadMeasurement(bytes.NewReader([]byte(`{"Format": "memtrack.Measurement", "Version": 2}`)))
	fmt.Println(err)
	// Output:
	// cpu 54525952
	// memtrack: unreadable measurement file: version 2, and this build reads version 1: write it again with this build (WriteMeasurement)
}
