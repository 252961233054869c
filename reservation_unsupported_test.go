package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReserveWithoutVMM: a backend without reservations (Metal's, here a
// fake in Metal's table) answers ErrNotSupported, and changes no figure.
func TestReserveWithoutVMM(t *testing.T) {
	tb := &tables[KindMetal]
	tb.mu.Lock()
	old := tb.p.Swap(newDeviceTable(KindMetal, newFakeBackend(1, 1<<30)))
	tb.mu.Unlock()
	t.Cleanup(func() { tb.mu.Lock(); tb.p.Store(old); tb.mu.Unlock() })
	d := Device{kind: KindMetal}
	before := d.MemoryStats()
	_, err := d.MapGranularity()
	require.ErrorIs(t, err, ErrNotSupported)
	assert.ErrorContains(t, err, "metal:0 reserves no address space")
	_, err = d.Reserve(1 << 20)
	assert.ErrorIs(t, err, ErrNotSupported)
	_, err = d.StartReturnCheck()
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.Equal(t, before, d.MemoryStats())
}
