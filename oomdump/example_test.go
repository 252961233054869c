package oomdump_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/oomdump"
)

// A dumper writes the report and the stats of the first refusal; the
// profiles and the trace join them where the device records sites and
// history.
func Example() {
	dir, err := os.MkdirTemp("", "oomdump")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	dev := memtrack.CPU()
	du, err := oomdump.Install(dev, dir, oomdump.Options{})
	if err != nil {
		panic(err)
	}
	defer du.Remove()
	dev.SetMemoryLimit(dev.MemoryAllocated() + 1<<20)
	defer dev.SetMemoryLimit(0)

	_, err = dev.Alloc(2 << 20)
	fmt.Println(errors.Is(err, memtrack.ErrOutOfMemory))
	for _, d := range du.Dumps() {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			fmt.Println(e.Name())
		}
	}
	// Output:
	// true
	// report.txt
	// stats.json
}
