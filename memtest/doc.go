// Package memtest finds device memory that tests and benchmarks leave
// behind, in the manner of go.uber.org/goleak for goroutines, and reports
// the device memory benchmarks allocate.
//
// A test that calls [VerifyNone] first fails, when it ends, if buffers (or
// tracked handles) that were allocated during the test on any device are
// still live, listing each with its size and allocation site:
//
//	func TestLoad(t *testing.T) {
//		memtest.VerifyNone(t)
//		...
//	}
//
// The check runs in the test's cleanup, after every cleanup the test
// registered later (which may free buffers). While the test runs, every
// device records the allocation site of every buffer and is watched for
// leaks ([memtrack.LeakCheck]); both go back as they were after it. That
// costs each allocation a few microseconds (docs/leaks.md and
// docs/performance.md have the figures): allocation-heavy tests run slower
// under a check.
//
// [VerifyTestMain] checks a whole package instead: whatever its tests
// allocated and left live by the end of m.Run fails the run.
//
//	func TestMain(m *testing.M) { memtest.VerifyTestMain(m) }
//
// # Parallel tests
//
// A device's figures are process-wide, so a check sees the buffers of every
// goroutine: in a test running in parallel with others it would blame the
// test for their buffers. VerifyNone therefore holds the test as
// [testing.T.Setenv] does: in a parallel test (or one with a parallel
// ancestor) it fails the test at once, and a t.Parallel call after it
// panics with testing's message about t.Setenv. Packages whose tests run in
// parallel use [VerifyTestMain]. A test whose earlier tests left goroutines
// allocating is blamed for their buffers too; a check inside another (a
// subtest's inside its parent's) lists each buffer once, in the check that
// ends first. A second VerifyNone in the same test does nothing: the test
// is checked once.
//
// # Benchmarks
//
// [ReportMemory], called at the start of a benchmark, reports with
// [testing.B.ReportMetric], for each device the benchmark allocated on, the
// device's AllocBytes per operation ("cuda:0-B/op"), its Allocs per
// operation ("cuda:0-allocs/op") and its PeakTracked during the benchmark
// ("cuda:0-peak-tracked-B"), in units that benchstat groups and scales as
// it does B/op.
package memtest
