package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUsedDevices(t *testing.T) {
	CPU().MemoryAllocated() // uses the CPU
	_, err := CUDA(pastAnyOrdinal)
	require.Error(t, err, "no machine has that many GPUs")

	used := UsedDevices()
	assert.Contains(t, used, CPU())
	for _, d := range used {
		assert.Less(t, d.Ordinal(), pastAnyOrdinal, "a refused ordinal was listed")
		_, err := ParseDevice(d.String())
		assert.NoError(t, err, "a listed device does not exist: %v", d)
	}
}

// pastAnyOrdinal is an ordinal past any machine's devices.
const pastAnyOrdinal = 1000

// TestUsedDevicesCreatesNoTable hides the GPU kinds' tables, as in a
// process that never used a GPU, and checks that listing does not create
// them (which would initialise their drivers).
func TestUsedDevicesCreatesNoTable(t *testing.T) {
	for _, k := range []Kind{KindCUDA, KindMetal} {
		saved := tables[k].p.Swap(nil)
		t.Cleanup(func() { tables[k].p.Store(saved) })
	}
	CPU().MemoryAllocated()

	assert.Equal(t, []Device{CPU()}, UsedDevices())
	assert.Nil(t, tables[KindCUDA].p.Load(), "UsedDevices created the cuda table")
	assert.Nil(t, tables[KindMetal].p.Load(), "UsedDevices created the metal table")
}
