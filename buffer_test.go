package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDevicePtrCPU(t *testing.T) {
	for _, size := range []int64{1, 4 << 10, mmapThreshold, 4 << 20} {
		b, err := CPU().Alloc(size)
		require.NoError(t, err)
		assert.Zero(t, b.DevicePtr(), "CPU buffer of %d bytes", size)
		assert.Len(t, b.Bytes(), int(size))
		require.NoError(t, b.Free())
		assert.Zero(t, b.DevicePtr(), "freed")
	}
	var nilBuf *Buffer
	assert.Zero(t, nilBuf.DevicePtr())
}

func TestBufferReserved(t *testing.T) {
	for _, tc := range []struct {
		name string
		buf  *Buffer
		want int64
	}{
		{"nil buffer", nil, 0},
		{"backend reports no rounding", &Buffer{size: 100}, 100},
		{"backend rounds up", &Buffer{size: 100, mem: memory{reserved: 16 << 10}}, 16 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.buf.Reserved())
		})
	}
}

func TestBufferReservedCPU(t *testing.T) {
	for _, size := range []int64{1, 4097, mmapThreshold + 1} {
		b, err := CPU().Alloc(size)
		require.NoError(t, err)
		assert.Equal(t, size, b.Reserved(), "the CPU backend reports no rounding")
		require.NoError(t, b.Free())
		assert.Equal(t, size, b.Reserved(), "a freed buffer keeps its figures")
	}
}
