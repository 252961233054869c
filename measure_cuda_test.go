//go:build cuda

package memtrack

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCUDAStreamChildMeasureLag measures a pass that allocates and frees
// in stream order twice, a pool step each (the fake's 32 MiB), on one
// stream that holds its work (the gate is shut): the second allocation
// takes the first's block, freed before it on the stream, and at the end
// the second free is still in flight, so the device holds one step that
// the tracked figure has let go. It is the device-side peak's rise, as it
// is the pool's, and nothing of it is untracked: the budgets set one step
// aside for the pass, not two (one per buffer).
func TestCUDAStreamChildMeasureLag(t *testing.T) {
	d := streamChild(t)
	s := newStream(t, d)
	base, err := d.Baseline()
	require.NoError(t, err)
	size := fakePoolReserves(1)
	p, err := d.Measure(func() error {
		for range 2 {
			b, err := d.AllocAsync(size, s)
			if err != nil {
				return err
			}
			if err := b.FreeAsync(s); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, os.WriteFile(os.Getenv("MEMTRACK_GATE"), nil, 0o600))
		syncStream(t, d, s)
	})
	require.Equal(t, size, d.MemoryStats().Held-d.MemoryAllocated(), "the second free is in flight, the first's block the second buffer's")

	assert.Equal(t, size, p.PeakTrackedIncrease)
	assert.Equal(t, size, p.PeakHeldIncrease)
	assert.Equal(t, size, p.UsedIncrease, "the pool holds one step, the second buffer in the first's block")
	assert.Zero(t, p.Untracked, "the in-flight free is held, not untracked")

	b, err := p.Budget(base, 0.5, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, size, b.PeakIncrease)
	assert.Zero(t, b.UntrackedIncrease)
	assert.Equal(t, size, b.SetAside)

	sb, err := p.SharedBudget(0.5, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, size, sb.PeakIncrease)
	assert.Zero(t, sb.UntrackedIncrease)
	assert.Equal(t, p.StartUsed+size, sb.SetAside)
}
