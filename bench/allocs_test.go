package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/tracker"
)

// TestTrackerPathsDoNotAllocate asserts 0 allocs/op on every successful
// tracker path: the allocation paths with and without a limit, the reads,
// the snapshot, the resets and the table lookups. (A refused operation
// returns an error that carries its figures, and that error is allocated.)
func TestTrackerPathsDoNotAllocate(t *testing.T) {
	var c tracker.Counter
	var r, limited, folded tracker.Record
	require.NoError(t, limited.SetLimit(limit))
	var tab tracker.Table
	_, err := tab.Record(3)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		runs int
		f    func()
	}{
		{"Counter.Alloc+Free", 100, func() { must(c.Alloc(size)); must(c.Free(size)) }},
		{"Counter.Alloc+Free, peak rising", 100, func() { must(c.Alloc(size)); must(c.Free(size - 1)) }},
		{"Counter.AllocWithin+Free", 100, func() { must(c.AllocWithin(size, limit)); must(c.Free(size)) }},
		{"Counter.Current+Peak+Load", 100, func() { _, _ = c.Load(); sinkInt = c.Current() + c.Peak() }},
		{"Counter.ResetPeak", 100, c.ResetPeak},
		{"Record.Alloc+Free", 100, func() { must(r.Alloc(size)); must(r.Free(size)) }},
		{"Record.Alloc+Free, limit set", 100, func() { must(limited.Alloc(size)); must(limited.Free(size)) }},
		// A run of 2^19 frees folds the packed cumulative figures.
		{"Record.Alloc+Free through a fold", 2, func() {
			for range 1 << 19 {
				must(folded.Alloc(size))
				must(folded.Free(size))
			}
		}},
		{"Record.RecordFailure", 100, r.RecordFailure},
		{"Record reads", 100, func() { sinkInt = r.Tracked() + r.PeakTracked() + r.Buffers() + r.Limit() }},
		{"Record.Snapshot", 100, func() { sinkInt = r.Snapshot().Allocs }},
		{"Record.ResetPeak", 100, r.ResetPeak},
		{"Record.ResetAccumulated", 100, r.ResetAccumulated},
		{"Record.SetLimit", 100, func() { must(limited.SetLimit(limit)) }},
		{"Table.Lookup", 100, func() { _ = tab.Lookup(3) }},
		{"Table.Record of an existing ordinal", 100, func() { _, _ = tab.Record(3) }},
		{"Table.Range", 100, func() { tab.Range(func(int, *tracker.Record) bool { return true }) }},
	} {
		assert.Zero(t, testing.AllocsPerRun(tc.runs, tc.f), tc.name)
	}
	// AllocsPerRun ran the fold case 3 times (once to warm up): the folds
	// kept every figure.
	s := folded.Snapshot()
	assert.Equal(t, [2]int64{3 << 19, 3 << 19}, [2]int64{s.Allocs, s.Frees})
}
