package memtest

import (
	"os"
	"testing"

	"github.com/memtrack/memtrack"
)

// benchEnvKey is the environment variable ReportMemory sets, through
// testing.B.Setenv, to the benchmark's name for the round: finding it set
// marks a second call in the round.
const benchEnvKey = "MEMTRACK_MEMTEST_BENCH"

// ReportMemory reports, when the benchmark's round ends, the device memory
// it allocated, for each checked device (every device of this build and
// machine, or those given) on which it allocated:
//
//	<device>-B/op             AllocBytes per operation (the sizes asked for)
//	<device>-allocs/op        Allocs per operation
//	<device>-peak-tracked-B   the device's PeakTracked during the round: the
//	                          most bytes its buffers held, the benchmark's
//	                          setup included
//
// for instance "cuda:0-B/op". benchstat reads a unit's "B" as bytes, so it
// scales these as it scales B/op (KiB, MiB), and puts each unit in a table
// of its own. Call it at the start of the benchmark function, after the
// setup whose allocations are not to be counted; the benchmark function
// runs once per round (b.N grows from round to round) and the figures are
// those of the last round, divided by its b.N. A second call in the same
// round does nothing.
//
// It resets each checked device's peak ([memtrack.Device.ResetPeakMemoryStats])
// at the start of the round: a [memtrack.Device.Measure] must not run
// beside it. The figures are process-wide: run the benchmark without other
// work allocating on its devices.
func ReportMemory(b *testing.B, devices ...memtrack.Device) {
	b.Helper()
	if v, ok := os.LookupEnv(benchEnvKey); ok && v == b.Name() {
		return
	}
	b.Setenv(benchEnvKey, b.Name())
	if len(devices) == 0 {
		// A backend that cannot start holds nothing to report.
		devices, _ = memtrack.Devices()
	}
	start := make([]memtrack.Stats, len(devices))
	for i, d := range devices {
		d.ResetPeakMemoryStats()
		start[i] = d.MemoryStats()
	}
	b.Cleanup(func() {
		for i, d := range devices {
			reportDevice(b, start[i], d.MemoryStats())
		}
	})
}

// reportDevice reports the figures of one device between two snapshots,
// if it allocated in between.
func reportDevice(b *testing.B, start, end memtrack.Stats) {
	allocs := end.Allocs - start.Allocs
	if allocs <= 0 || b.N <= 0 {
		// Nothing allocated (or the cumulative figures were reset).
		return
	}
	n := float64(b.N)
	dev := end.Device.String()
	b.ReportMetric(float64(end.AllocBytes-start.AllocBytes)/n, dev+"-B/op")
	b.ReportMetric(float64(allocs)/n, dev+"-allocs/op")
	b.ReportMetric(float64(end.PeakTracked), dev+"-peak-tracked-B")
}
