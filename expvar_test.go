package memtrack_test

import (
	"encoding/json"
	"expvar"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExpvar(t *testing.T) {
	cpu := memtrack.CPU()
	buf, err := cpu.Alloc(3 << 10)
	require.NoError(t, err)
	defer buf.Free()

	v := memtrack.Expvar()
	var got map[string]memtrack.Stats
	require.NoError(t, json.Unmarshal([]byte(v.String()), &got), "not JSON: %s", v.String())

	used := memtrack.UsedDevices()
	require.Contains(t, used, cpu)
	assert.Len(t, got, len(used))
	for _, d := range used {
		// Read with nothing allocating, the figures are exact.
		assert.Equal(t, d.MemoryStats(), got[d.String()], "%v", d)
	}
	assert.Equal(t, int64(3<<10), got["cpu"].Current)

	// The figures are read when the variable is, not when it was made.
	buf2, err := cpu.Alloc(1 << 10)
	require.NoError(t, err)
	defer buf2.Free()
	require.NoError(t, json.Unmarshal([]byte(v.String()), &got))
	assert.Equal(t, int64(4<<10), got["cpu"].Current)
}

func TestExpvarNotPublished(t *testing.T) {
	expvar.Do(func(kv expvar.KeyValue) {
		assert.NotContains(t, kv.Key, "memtrack", "published by the package: %s", kv.Key)
	})
}
