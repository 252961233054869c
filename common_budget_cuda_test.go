//go:build cuda

package memtrack

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCUDACommonBudget: a tensor-parallel instance on two GPUs, each with
// its baseline, its weights (cuda:1 holds 256 MiB more, and has no more
// memory than cuda:0: on the fake driver 2 GiB beside 4), one pass
// measured on both at once, each device's budget by vLLM's formula, and the
// common budget, which cuda:1 limits. On the fake driver every figure is
// exact.
func TestCUDACommonBudget(t *testing.T) {
	ds := cudaDevices(t, 2)
	var bases []Usage
	for _, d := range ds {
		base, err := d.Baseline()
		require.NoError(t, err)
		bases = append(bases, base)
	}
	require.LessOrEqual(t, bases[1].Total, bases[0].Total, "cuda:1 has no more memory than cuda:0")
	weights := []int64{32 << 20, 288 << 20}
	for i, d := range ds {
		w, err := d.Alloc(weights[i])
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, w.Free()) })
	}

	// Each of 3 layers splits its 16 MiB of activations across the two
	// devices, both at once.
	const share = 8 << 20
	runs := 0
	ms, err := MeasureDevices(ds, func() error {
		runs++
		for range 3 {
			var wg sync.WaitGroup
			errs := make([]error, len(ds))
			for i, d := range ds {
				wg.Go(func() {
					b, err := d.Alloc(share)
					if err == nil {
						err = b.Free()
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 1, runs)

	const block = 16 << 20
	var budgets []Budget
	for i, m := range ms {
		assert.Equal(t, ds[i], m.Device)
		assert.Equal(t, int64(share), m.PeakTrackedIncrease, "%v", ds[i])
		b, err := m.Budget(bases[i], 0.25, block)
		require.NoError(t, err, "%v", ds[i])
		assert.Equal(t, ds[i], b.Device)
		assert.Equal(t, weights[i], b.Weights, "%v", ds[i])
		assert.Equal(t, int64(share), b.PeakIncrease, "%v", ds[i])
		if onFake() {
			assert.Zero(t, b.UntrackedIncrease, "%v: the fake allocates exactly what is asked", ds[i])
			want := requestedOf(0.25, m.Total) - weights[i] - share
			assert.Equal(t, want, b.Available, "%v", ds[i])
			assert.Equal(t, want/block, b.Blocks, "%v", ds[i])
		}
		budgets = append(budgets, b)
	}
	c, err := NewCommonBudget(budgets...)
	require.NoError(t, err)
	assert.Equal(t, 1, c.Limiting, "cuda:1, with more weights and no more memory, limits the cache")
	assert.Equal(t, ds[1], c.Budgets[c.Limiting].Device)
	assert.Equal(t, budgets[1].Blocks, c.Blocks)
	assert.Less(t, c.Blocks, budgets[0].Blocks)
	assert.Equal(t, c.Blocks*block, c.CacheSize)
	if onFake() && bases[0].Total == 4<<30 && bases[1].Total == 2<<30 { // TestMain's machine
		// 512 MiB requested on cuda:1, 296 MiB set aside: 216 MiB, 13 blocks.
		assert.Equal(t, int64(13), c.Blocks)
	}
}
