package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBudgetNamesItsDevice: every budget carries the device of the
// measurement it was computed from, which a common budget tells its
// devices apart by.
func TestBudgetNamesItsDevice(t *testing.T) {
	const gib = 1 << 30
	base, m := measuringExample(0)
	base.Device, m.Device = CPU(), CPU()
	base.PerProcess, base.ProcessUsed = true, gib

	b, err := m.Budget(base, 0.5, gib)
	require.NoError(t, err)
	assert.Equal(t, CPU(), b.Device)
	b, err = m.FootprintBudget(base, 0.5, gib)
	require.NoError(t, err)
	assert.Equal(t, CPU(), b.Device)
	b, err = m.SharedBudget(0.5, gib)
	require.NoError(t, err)
	assert.Equal(t, CPU(), b.Device)
}
