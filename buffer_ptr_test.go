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
