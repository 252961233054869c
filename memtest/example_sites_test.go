package memtest_test

// The examples that read allocation sites.

import (
	"fmt"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/memtest"
)

// cache is a package-level holder that loadCache fills and forgets.
var cache *memtrack.Buffer

//go:noinline
func loadCache(d memtrack.Device) {
	cache, _ = d.Alloc(4096)
}

// A test that leaves a buffer live fails when it ends, with the buffer's
// size and allocation site:
//
//	func TestLoad(t *testing.T) {
//		memtest.VerifyNone(t)
//		loadCache(memtrack.CPU())
//	}
func ExampleVerifyNone() {
	t := &exampleTest{}
	memtest.VerifyNone(t, memtest.Devices(memtrack.CPU()))
	loadCache(memtrack.CPU())
	t.end()
	cache.Free()
	// Output:
	// memtest: 1 buffer (4096 bytes) allocated during the test and not freed:
	// 	4096 bytes on cpu, buffer allocated at github.com/memtrack/memtrack/memtest_test.loadCache (example_sites_test.go:17)
}

// A known holder is ignored by the function that allocates its memory.
func ExampleIgnoreFunction() {
	t := &exampleTest{}
	memtest.VerifyNone(t, memtest.Devices(memtrack.CPU()),
		memtest.IgnoreFunction("github.com/memtrack/memtrack/memtest_test.loadCache"))
	loadCache(memtrack.CPU())
	t.end()
	cache.Free()
	fmt.Println("passed")
	// Output: passed
}
