package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetalBackendInfo names each Metal device through Device.Info, over the fake
// bridge: device handle h (ordinal h-1) has the registry ID 0x1000003f0+h.
func TestMetalBackendInfo(t *testing.T) {
	useBackend(t, KindMetal, newMetalBackendOver(newFakeMetal(2)))
	for _, want := range []DeviceInfo{
		{Device: Device{kind: KindMetal, ordinal: 0}, Name: "Fake Metal GPU 1", UUID: "0x1000003f1"},
		{Device: Device{kind: KindMetal, ordinal: 1}, Name: "Fake Metal GPU 2", UUID: "0x1000003f2"},
	} {
		got, err := want.Device.Info()
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := Device{kind: KindMetal, ordinal: 2}.Info()
	assert.ErrorIs(t, err, ErrInvalidOrdinal)
}

// TestMetalBackendInfoNoDevice: a backend without devices names none.
func TestMetalBackendInfoNoDevice(t *testing.T) {
	m := newMetalBackendOver(newFakeMetal(0))
	_, _, err := m.info(0)
	assert.ErrorIs(t, err, ErrBackendUnavailable)
}
