package memtrack_test

import (
	"encoding/json"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeviceText(t *testing.T) {
	text, err := memtrack.CPU().MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "cpu", string(text))

	var d memtrack.Device
	require.NoError(t, d.UnmarshalText([]byte("cpu")))
	assert.Equal(t, memtrack.CPU(), d)

	out, err := json.Marshal(memtrack.Stats{Current: 7})
	require.NoError(t, err)
	assert.Contains(t, string(out), `"Device":"cpu"`)

	for _, bad := range []string{"", "tpu:0", "cpu:-1", "cpu:1"} {
		d := memtrack.CPU()
		assert.Error(t, d.UnmarshalText([]byte(bad)), "%q", bad)
		assert.Equal(t, memtrack.CPU(), d, "a failed UnmarshalText changed the device")
	}
}
