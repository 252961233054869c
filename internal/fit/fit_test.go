package fit

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mib = 1 << 20

// h200 is the rules an NVIDIA H200 with driver 580.159.04 showed: 2 MiB
// granules, a pool reserving 32 MiB chunks.
var h200 = Rules{AllocUnit: 2 * mib, Granularity: 2 * mib, PoolChunk: 32 * mib}

func TestPredict(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rules  Rules
		before Before
		parts  []Part
		graphs int64
		want   Result
	}{
		{"nothing", h200, Before{}, nil, 0, Result{Parts: []int64{}}},
		// The H200's cuMemAlloc rows: the size rounded up to 2 MiB.
		{"alloc 1 B", h200, Before{}, []Part{{ViaAlloc, 1, 1, false}}, 0,
			Result{Parts: []int64{2 * mib}, Stays: 2 * mib, Need: 2 * mib}},
		{"alloc 2 MiB + 1 B", h200, Before{}, []Part{{ViaAlloc, 2*mib + 1, 1, false}}, 0,
			Result{Parts: []int64{4 * mib}, Stays: 4 * mib, Need: 4 * mib}},
		{"alloc 3 x 64 MiB", h200, Before{}, []Part{{ViaAlloc, 64 * mib, 3, false}}, 0,
			Result{Parts: []int64{192 * mib}, Stays: 192 * mib, Need: 192 * mib}},
		// The H200's default pool: 1 B to 32 MiB reserve 32 MiB, 33 MiB 64,
		// 65 MiB 96, 100 MiB 128.
		{"pool 1 B", h200, Before{}, []Part{{ViaAllocAsync, 1, 1, false}}, 0,
			Result{Parts: []int64{1}, PoolReserved: 32 * mib, PoolGrowth: 32 * mib, PeakPoolReserved: 32 * mib, Stays: 32 * mib, Need: 32 * mib}},
		{"pool 33 MiB", h200, Before{}, []Part{{ViaAllocAsync, 33 * mib, 1, false}}, 0,
			Result{Parts: []int64{33 * mib}, PoolReserved: 64 * mib, PoolGrowth: 64 * mib, PeakPoolReserved: 64 * mib, Stays: 64 * mib, Need: 64 * mib}},
		{"pool 65 MiB", h200, Before{}, []Part{{ViaAllocAsync, 65 * mib, 1, false}}, 0,
			Result{Parts: []int64{65 * mib}, PoolReserved: 96 * mib, PoolGrowth: 96 * mib, PeakPoolReserved: 96 * mib, Stays: 96 * mib, Need: 96 * mib}},
		{"pool 100 MiB", h200, Before{}, []Part{{ViaAllocAsync, 100 * mib, 1, false}}, 0,
			Result{Parts: []int64{100 * mib}, PoolReserved: 128 * mib, PoolGrowth: 128 * mib, PeakPoolReserved: 128 * mib, Stays: 128 * mib, Need: 128 * mib}},
		// A pool that reserves 32 MiB with 20 MiB used takes 12 more MiB
		// without growing.
		{"pool reuses its reservation", h200, Before{PoolUsed: 20 * mib, PoolReserved: 32 * mib}, []Part{{ViaAllocAsync, 12 * mib, 1, false}}, 0,
			Result{Parts: []int64{12 * mib}, PoolReserved: 32 * mib, PeakPoolReserved: 32 * mib}},
		{"pool grows past its reservation", h200, Before{PoolUsed: 20 * mib, PoolReserved: 32 * mib}, []Part{{ViaAllocAsync, 13 * mib, 1, false}}, 0,
			Result{Parts: []int64{13 * mib}, PoolReserved: 64 * mib, PoolGrowth: 32 * mib, PeakPoolReserved: 64 * mib, Stays: 32 * mib, Need: 32 * mib}},
		{"map 8 blocks of 16 MiB", h200, Before{}, []Part{{ViaMap, 16 * mib, 8, false}}, 0,
			Result{Parts: []int64{128 * mib}, Stays: 128 * mib, Need: 128 * mib}},
		{"graphs as given", h200, Before{}, nil, 96 * mib,
			Result{Parts: []int64{}, GraphGrowth: 96 * mib, Stays: 96 * mib, Need: 96 * mib}},
		// A pass's activations: freed by the end, taken at the peak.
		{"transient allocations", h200, Before{}, []Part{{ViaAlloc, 64 * mib, 1, false}, {ViaAlloc, 5*mib + 1, 4, true}}, 0,
			Result{Parts: []int64{64 * mib, 24 * mib}, Stays: 64 * mib, Transient: 24 * mib, Need: 88 * mib}},
		{"transient in the pool", h200, Before{}, []Part{{ViaAllocAsync, 20 * mib, 1, false}, {ViaAllocAsync, 20 * mib, 1, true}}, 0,
			Result{Parts: []int64{20 * mib, 20 * mib}, PoolReserved: 32 * mib, PoolGrowth: 32 * mib, PeakPoolReserved: 64 * mib,
				Stays: 32 * mib, Transient: 32 * mib, Need: 64 * mib}},
		// The CPU: buffers under 1 MiB from the Go heap, as asked; from 1
		// MiB mapped from the OS, in 4 KiB pages.
		{"cpu", Rules{AllocUnit: 4096, HeapBelow: mib, Granularity: 4096}, Before{}, []Part{{ViaAlloc, 1000, 3, false}, {ViaAlloc, mib + 1, 1, false}}, 0,
			Result{Parts: []int64{3000, mib + 4096}, Stays: 3000 + mib + 4096, Need: 3000 + mib + 4096}},
		// A device whose rounding is not known: as asked.
		{"no rounding known", Rules{AllocUnit: 1}, Before{}, []Part{{ViaAlloc, 3, 5, false}}, 0,
			Result{Parts: []int64{15}, Stays: 15, Need: 15}},
		{"saturates", h200, Before{}, []Part{{ViaAlloc, math.MaxInt64 - 1, 2, false}, {ViaAlloc, 1, 1, true}}, math.MaxInt64,
			Result{Parts: []int64{math.MaxInt64, 2 * mib}, GraphGrowth: math.MaxInt64, Stays: math.MaxInt64, Transient: 2 * mib, Need: math.MaxInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Predict(tc.rules, tc.before, tc.parts, tc.graphs)
			require.NoError(t, err)
			tc.want.GraphGrowth = tc.graphs
			if tc.want.PoolReserved == 0 && tc.want.PeakPoolReserved == 0 {
				tc.want.PoolReserved, tc.want.PeakPoolReserved = tc.before.PoolReserved, tc.before.PoolReserved
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPredictRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rules  Rules
		before Before
		parts  []Part
		graphs int64
		want   string
	}{
		{"allocation unit 0", Rules{}, Before{}, nil, 0, "an allocation unit of 0"},
		{"negative granularity", Rules{AllocUnit: 1, Granularity: -1}, Before{}, nil, 0, "a granularity of -1"},
		{"negative chunk", Rules{AllocUnit: 1, PoolChunk: -1}, Before{}, nil, 0, "pool chunk of -1"},
		{"negative heap", Rules{AllocUnit: 1, HeapBelow: -1}, Before{}, nil, 0, "heap below -1"},
		{"negative pool used", h200, Before{PoolUsed: -1}, nil, 0, "pool used -1"},
		{"negative pool reserved", h200, Before{PoolReserved: -1}, nil, 0, "pool reserved -1"},
		{"negative graphs", h200, Before{}, nil, -1, "graph growth -1"},
		{"size 0", h200, Before{}, []Part{{ViaAlloc, 0, 1, false}}, 0, "part 0: 1 buffers of 0 bytes"},
		{"negative size", h200, Before{}, []Part{{ViaAlloc, 1, 1, false}, {ViaAlloc, -5, 1, false}}, 0, "part 1: 1 buffers of -5 bytes"},
		{"count 0", h200, Before{}, []Part{{ViaMap, 2 * mib, 0, false}}, 0, "0 buffers"},
		{"unknown way", h200, Before{}, []Part{{Via(9), 1, 1, false}}, 0, "Via(9) is no way"},
		{"pool without a chunk", Rules{AllocUnit: 1}, Before{}, []Part{{ViaAllocAsync, 1, 1, false}}, 0, "whose chunk is not known"},
		{"map without a granularity", Rules{AllocUnit: 1}, Before{}, []Part{{ViaMap, 4096, 1, false}}, 0, "on a device that maps nothing"},
		{"map off the granularity", h200, Before{}, []Part{{ViaMap, 3 * mib, 1, false}}, 0, "not a multiple of the granularity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Predict(tc.rules, tc.before, tc.parts, tc.graphs)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, Result{}, got)
		})
	}
}

func TestRoundUp(t *testing.T) {
	for _, tc := range []struct{ n, unit, want int64 }{
		{0, 4, 0}, {1, 4, 4}, {4, 4, 4}, {5, 4, 8}, {7, 1, 7}, {7, 0, 7},
		{math.MaxInt64, 2, math.MaxInt64}, {math.MaxInt64 - 1, 2 * mib, math.MaxInt64},
	} {
		assert.Equal(t, tc.want, RoundUp(tc.n, tc.unit), "RoundUp(%d, %d)", tc.n, tc.unit)
	}
	assert.Equal(t, "Alloc", ViaAlloc.String())
	assert.Equal(t, "AllocAsync", ViaAllocAsync.String())
	assert.Equal(t, "Map", ViaMap.String())
}
