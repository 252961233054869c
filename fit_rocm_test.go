//go:build rocm

package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On an AMD GPU a plan is predicted at the sizes asked: AMD's reference
// states no rounding of hipMalloc's (docs/rocm.md), and the fake runtime
// takes exactly the size, so that the check is exact there; the pool's
// chunk is not learned, and a plan from the pool is refused, as are
// mappings, which memtrack's HIP backend does not make.
func TestROCmFit(t *testing.T) {
	d := rocmDevices(t, 1)[0]
	plan := Plan{Device: d, Parts: []PlanPart{{Category: CategoryWeights, Size: 3<<20 + 5, Count: 2}, {Size: 4096, Count: 3}}}
	p, err := plan.Predict()
	require.NoError(t, err)
	assert.Equal(t, int64(1), p.AllocUnit)
	assert.Equal(t, int64(2*(3<<20+5)+3*4096), p.Predicted)
	assert.Contains(t, []string{SourceROCmSMI, SourceHIPUsed}, p.Source)
	var bufs []*Buffer
	for _, part := range plan.Parts {
		c := d
		for range part.Count {
			var b *Buffer
			if part.Category != "" {
				cat, err := c.Category(part.Category)
				require.NoError(t, err)
				b, err = cat.Alloc(part.Size)
				require.NoError(t, err)
			} else {
				b, err = c.Alloc(part.Size)
				require.NoError(t, err)
			}
			bufs = append(bufs, b)
		}
	}
	defer func() {
		for _, b := range bufs {
			assert.NoError(t, b.Free())
		}
	}()
	chk, err := p.Check()
	require.NoError(t, err)
	t.Logf("rocm:0 (%s): predicted %d, measured %d", p.Source, p.Predicted, chk.Measured)
	if onFakeHIP() {
		assert.Equal(t, p.Predicted, chk.Measured, "the fake runtime takes the size asked")
		assert.Empty(t, chk.Why)
	}
	for _, bad := range []PlanPart{{Via: ViaAllocAsync, Size: 1, Count: 1}, {Via: ViaMap, Size: 2 << 20, Count: 1}} {
		_, err := Plan{Device: d, Parts: []PlanPart{bad}}.Predict()
		assert.ErrorIs(t, err, ErrNotSupported, "%v on an AMD GPU", bad.Via)
	}
}
