package rendertest

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SetCPU puts the CPU's figures in a known state: 3 KiB allocated in two
// buffers, one freed, one refused by a 2560-byte limit, then the given
// limit, left in place (with the live buffer) until the test ends. It
// fails the test if an earlier one left CPU buffers live.
func SetCPU(t *testing.T, limit int64) {
	t.Helper()
	cpu := memtrack.CPU()
	require.Zero(t, cpu.MemoryAllocated(), "an earlier test left CPU buffers live")
	require.NoError(t, cpu.SetMemoryLimit(0))
	cpu.ResetPeakMemoryStats()
	cpu.ResetAccumulatedMemoryStats()

	a, err := cpu.Alloc(1024)
	require.NoError(t, err)
	b, err := cpu.Alloc(2048)
	require.NoError(t, err)
	require.NoError(t, a.Free())
	require.NoError(t, cpu.SetMemoryLimit(2560))
	_, err = cpu.Alloc(1024)
	require.ErrorIs(t, err, memtrack.ErrOutOfMemory)
	require.NoError(t, cpu.SetMemoryLimit(limit))
	t.Cleanup(func() {
		assert.NoError(t, b.Free())
		assert.NoError(t, cpu.SetMemoryLimit(0))
	})
}
