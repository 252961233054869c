package memtrack_test

// The examples that record allocation sites.

import (
	"fmt"
	"log"
	"runtime"
	"strings"

	"github.com/memtrack/memtrack"
)

// Record allocation sites, then read who held the memory at the peak: each
// site's innermost frame is the function that called Alloc. Package
// github.com/memtrack/memtrack/pprof writes the same figures for go tool
// pprof.
func ExampleSiteRecorder_PeakSnapshot() {
	d := memtrack.CPU()
	// Record every allocation, for exact figures; the default rate samples
	// (on average one sample per 512 KiB) and scales its figures.
	if err := d.Sites().SetRate(1); err != nil {
		log.Fatal(err)
	}
	defer d.Sites().SetRate(0)
	if err := d.Sites().Enable(32); err != nil {
		log.Fatal(err)
	}
	defer d.Sites().Disable()

	w := loadWeights(d)
	defer w.Free()
	scratch(d)

	snap, err := d.Sites().PeakSnapshot()
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range snap.Sites { // the largest first
		f, _ := runtime.CallersFrames(s.Stack).Next()
		fmt.Printf("%s: %d buffer, %d MiB\n", f.Function[strings.LastIndexByte(f.Function, '.')+1:], s.Buffers, s.Bytes>>20)
	}
	// Output:
	// scratch: 1 buffer, 5 MiB
	// loadWeights: 1 buffer, 3 MiB
}
