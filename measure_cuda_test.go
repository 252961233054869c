//go:build cuda

package memtrack

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCUDAStreamChildMeasureLag measures a pass that allocates and frees
// in stream order twice, half a pool step each (16 MiB of the fake's
// 32 MiB), while its stream holds its work (the gate is shut): at the end
// both frees are still in flight, so the device holds a whole step that
// the tracked figure has let go. It is the device-side peak's rise, and
// nothing of it is untracked: the budgets set one step aside for the
// pass, not two.
func TestCUDAStreamChildMeasureLag(t *testing.T) {
	d := streamChild(t)
	s := newStream(t, d)
	base, err := d.Baseline()
	require.NoError(t, err)
	size := fakePoolReserves(1) / 2
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
	require.Equal(t, 2*size, d.MemoryStats().Held-d.MemoryAllocated(), "both frees are in flight")

	assert.Equal(t, size, p.PeakTrackedIncrease)
	assert.Equal(t, 2*size, p.PeakHeldIncrease)
	assert.Equal(t, 2*size, p.UsedIncrease, "the pool holds both buffers")
	assert.Zero(t, p.Untracked, "the in-flight frees are held, not untracked")

	b, err := p.Budget(base, 0.5, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, 2*size, b.PeakIncrease)
	assert.Zero(t, b.UntrackedIncrease)
	assert.Equal(t, 2*size, b.SetAside)

	sb, err := p.SharedBudget(0.5, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, 2*size, sb.PeakIncrease)
	assert.Zero(t, sb.UntrackedIncrease)
	assert.Equal(t, p.StartUsed+2*size, sb.SetAside)
}
