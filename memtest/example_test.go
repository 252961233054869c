package memtest_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/memtest"
)

// exampleTest stands for the *testing.T of a test named TestLoad, so that
// the example can show what a leaking test reports.
type exampleTest struct {
	testing.TB
	cleanups []func()
}

func (t *exampleTest) Name() string      { return "TestLoad" }
func (t *exampleTest) Helper()           {}
func (t *exampleTest) Cleanup(f func())  { t.cleanups = append(t.cleanups, f) }
func (t *exampleTest) Fatal(args ...any) { fmt.Println(args...) }
func (t *exampleTest) Setenv(k, v string) {
	os.Setenv(k, v)
	t.Cleanup(func() { os.Unsetenv(k) })
}

// Error prints the report without its stacks, which name the test runner's
// frames.
func (t *exampleTest) Error(args ...any) {
	for line := range strings.SplitSeq(fmt.Sprint(args...), "\n") {
		if !strings.HasPrefix(line, "\t\t") {
			fmt.Println(line)
		}
	}
}

// end runs the cleanups, as the testing package does when a test ends.
func (t *exampleTest) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

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
	// 	4096 bytes on cpu, buffer allocated at github.com/memtrack/memtrack/memtest_test.loadCache (example_test.go:51)
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

// A benchmark reports the device memory it allocates per operation and the
// peak, for each device it used; go test -bench prints them beside ns/op
// ("4096 cpu-B/op  1.000 cpu-allocs/op  4096 cpu-peak-B").
func ExampleReportMemory() {
	r := testing.Benchmark(func(b *testing.B) {
		memtest.ReportMemory(b)
		for b.Loop() {
			buf, err := memtrack.CPU().Alloc(4096)
			if err != nil {
				b.Fatal(err)
			}
			if err := buf.Free(); err != nil {
				b.Fatal(err)
			}
		}
	})
	fmt.Println(r.Extra["cpu-B/op"], "cpu-B/op")
	fmt.Println(r.Extra["cpu-allocs/op"], "cpu-allocs/op")
	fmt.Println(r.Extra["cpu-peak-B"], "cpu-peak-B")
	// Output:
	// 4096 cpu-B/op
	// 1 cpu-allocs/op
	// 4096 cpu-peak-B
}

// A whole package is checked from its TestMain: whatever its tests
// allocated and left live fails the run, parallel tests included.
func ExampleVerifyTestMain() {
	// func TestMain(m *testing.M) {
	//	memtest.VerifyTestMain(m)
	// }
}
