package memtrack

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCPUBuffers(t *testing.T) {
	cpu := CPU()
	base := cpu.MemoryStats()
	for _, size := range []int64{1, 4095, mmapThreshold - 1, mmapThreshold, 3*mmapThreshold + 5} {
		b, err := cpu.Alloc(size)
		require.NoError(t, err, "size %d", size)
		p := b.Bytes()
		require.Len(t, p, int(size))
		for i := range p {
			if p[i] != 0 {
				t.Fatalf("size %d: byte %d is %d, want zeroed memory", size, i, p[i])
			}
		}
		p[0], p[len(p)-1] = 1, 2 // writable
		assert.Equal(t, base.Current+size, cpu.MemoryAllocated())
		require.NoError(t, b.Free())
		assert.Nil(t, b.Bytes(), "no view once freed")
	}
	s := cpu.MemoryStats()
	assert.Equal(t, base.Current, s.Current)
	assert.Equal(t, base.Allocs+5, s.Allocs)
	assert.Equal(t, base.Frees+5, s.Frees)
}

// TestCPUHugeRequests asks for more than any machine has: refused with
// ErrOutOfMemory, never a crash, counted as failures and nothing else.
func TestCPUHugeRequests(t *testing.T) {
	cpu := CPU()
	_, total, err := cpu.MemGetInfo()
	require.NoError(t, err)
	for _, size := range []int64{total + 1, 1 << 50, math.MaxInt64} {
		before := cpu.MemoryStats()
		b, err := cpu.Alloc(size)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, ErrOutOfMemory, "size %d", size)
		var oom *OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		assert.Equal(t, size, oom.Requested)
		assert.Equal(t, cpu, oom.Device)
		before.FailedAllocs++
		assert.Equal(t, before, cpu.MemoryStats())
	}
}

func TestCPUMemGetInfo(t *testing.T) {
	free, total, err := CPU().MemGetInfo()
	require.NoError(t, err)
	assert.Positive(t, total)
	assert.Positive(t, free)
	assert.LessOrEqual(t, free, total)
}
