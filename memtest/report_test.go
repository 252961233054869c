package memtest

import (
	"flag"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchtime sets testing.Benchmark's -test.benchtime for the test.
func benchtime(t *testing.T, v string) {
	f := flag.Lookup("test.benchtime")
	require.NotNil(t, f)
	old := f.Value.String()
	require.NoError(t, f.Value.Set(v))
	t.Cleanup(func() { require.NoError(t, f.Value.Set(old)) })
}

// pairs allocates and frees n buffers of size bytes at once on the CPU.
func pairs(b *testing.B, n int, size int64) {
	bufs := make([]*memtrack.Buffer, n)
	for i := range bufs {
		var err error
		if bufs[i], err = memtrack.CPU().Alloc(size); err != nil {
			b.Fatal(err)
		}
	}
	for _, x := range bufs {
		if err := x.Free(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReportMemory(t *testing.T) {
	benchtime(t, "50x") // two rounds: b.N = 1, then 50
	cpu := memtrack.CPU()
	require.Zero(t, cpu.MemoryAllocated(), "an earlier test left CPU buffers live")
	rounds := 0
	r := testing.Benchmark(func(b *testing.B) {
		rounds++
		setup, err := cpu.Alloc(5000) // before the call: in the peak only
		if err != nil {
			b.Fatal(err)
		}
		defer setup.Free()
		ReportMemory(b, cpu)
		for range b.N {
			pairs(b, 3, 1000)
		}
	})
	assert.Equal(t, 2, rounds)
	assert.Equal(t, 50, r.N)
	assert.Equal(t, map[string]float64{
		"cpu-B/op":           3000,
		"cpu-allocs/op":      3,
		"cpu-peak-tracked-B": 8000,
	}, r.Extra)
}

// TestReportMemoryTwiceInARound: the second call does nothing, so the
// figures run from the first.
func TestReportMemoryTwiceInARound(t *testing.T) {
	benchtime(t, "20x")
	cpu := memtrack.CPU()
	r := testing.Benchmark(func(b *testing.B) {
		ReportMemory(b, cpu)
		pairs(b, 1, 100) // between the calls: counted
		ReportMemory(b, cpu)
		for b.Loop() {
			pairs(b, 2, 10)
		}
	})
	require.Equal(t, 20, r.N)
	assert.Equal(t, (100+20*20)/20.0, r.Extra["cpu-B/op"])
	assert.Equal(t, (1+20*2)/20.0, r.Extra["cpu-allocs/op"])
	assert.Equal(t, float64(100), r.Extra["cpu-peak-tracked-B"])
}

// TestReportMemoryLeavesOutIdleDevices: a device without allocations in the
// round reports nothing.
func TestReportMemoryLeavesOutIdleDevices(t *testing.T) {
	benchtime(t, "5x")
	r := testing.Benchmark(func(b *testing.B) {
		ReportMemory(b, memtrack.CPU())
		for b.Loop() {
		}
	})
	assert.Empty(t, r.Extra)
}
