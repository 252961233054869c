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

// A benchmark reports the device memory it allocates per operation and the
// peak, for each device it used; go test -bench prints them beside ns/op
// ("4096 cpu-B/op  1.000 cpu-allocs/op  4096 cpu-peak-tracked-B").
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
	fmt.Println(r.Extra["cpu-peak-tracked-B"], "cpu-peak-tracked-B")
	// Output:
	// 4096 cpu-B/op
	// 1 cpu-allocs/op
	// 4096 cpu-peak-tracked-B
}

// A whole package is checked from its TestMain: whatever its tests
// allocated and left live fails the run, parallel tests included.
func ExampleVerifyTestMain() {
	// func TestMain(m *testing.M) {
	//	memtest.VerifyTestMain(m)
	// }
}
