package memtrack_test

import (
	"bytes"
	"encoding/json"
	"expvar"
	"log/slog"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatsString(t *testing.T) {
	tests := []struct {
		name string
		s    memtrack.Stats
		want string
	}{
		{"zero", memtrack.Stats{Device: memtrack.CPU()},
			"cpu: tracked 0 B, peak tracked 0 B; 0 buffers (peak 0); 0 B in 0 allocs, 0 B freed in 0 frees; 0 failed allocs; no limit"},
		{"small sizes stay exact", memtrack.Stats{Device: memtrack.CPU(), Tracked: 512, PeakTracked: 1023, Held: 512, PeakHeld: 1023, Buffers: 1, PeakBuffers: 2, AllocBytes: 1000, FreedBytes: 488, Allocs: 2, Frees: 1},
			"cpu: tracked 512 B, peak tracked 1023 B; 1 buffers (peak 2); 1000 B in 2 allocs, 488 B freed in 1 frees; 0 failed allocs; no limit"},
		{"IEC units with exact bytes", memtrack.Stats{Device: memtrack.CPU(),
			Tracked: 3 << 29, PeakTracked: 2 << 30, Held: 3 << 29, PeakHeld: 2 << 30, Buffers: 3, PeakBuffers: 4,
			AllocBytes: 12 << 20, FreedBytes: 1536, Allocs: 10, Frees: 7, FailedAllocs: 1, Limit: 4 << 30,
		}, "cpu: tracked 1.50 GiB (1610612736 B), peak tracked 2.00 GiB (2147483648 B); 3 buffers (peak 4); " +
			"12.0 MiB (12582912 B) in 10 allocs, 1.50 KiB (1536 B) freed in 7 frees; 1 failed allocs; limit 4.00 GiB (4294967296 B)"},
		// Just under a unit: rounded up to the next unit, not to 1024 of the
		// smaller one; and three significant figures across a decade.
		{"just under a unit", memtrack.Stats{Device: memtrack.CPU(),
			Tracked: 1<<20 - 1, PeakTracked: 1<<30 - 1, Held: 1<<20 - 1, PeakHeld: 1<<30 - 1, Buffers: 1, PeakBuffers: 1,
			AllocBytes: 10239, FreedBytes: 102399, Allocs: 1, Frees: 1,
		}, "cpu: tracked 1.00 MiB (1048575 B), peak tracked 1.00 GiB (1073741823 B); 1 buffers (peak 1); " +
			"10.0 KiB (10239 B) in 1 allocs, 100 KiB (102399 B) freed in 1 frees; 0 failed allocs; no limit"},
		// Stream-ordered frees not yet executed: the device-side figures
		// differ from the tracked ones, and the line says by how much.
		{"device-side figures", memtrack.Stats{Device: memtrack.CPU(),
			Tracked: 1 << 20, PeakTracked: 3 << 20, Held: 2 << 20, PeakHeld: 4 << 20, Buffers: 1, PeakBuffers: 2,
			AllocBytes: 3 << 20, FreedBytes: 2 << 20, Allocs: 2, Frees: 1,
		}, "cpu: tracked 1.00 MiB (1048576 B), peak tracked 3.00 MiB (3145728 B); held 2.00 MiB (2097152 B), peak held 4.00 MiB (4194304 B); " +
			"1 buffers (peak 2); 3.00 MiB (3145728 B) in 2 allocs, 2.00 MiB (2097152 B) freed in 1 frees; 0 failed allocs; no limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.s.String())
		})
	}
}

func TestStatsLogValue(t *testing.T) {
	s := memtrack.Stats{Device: memtrack.CPU(),
		Tracked: 3 << 20, PeakTracked: 4 << 20, Held: 7 << 20, PeakHeld: 8 << 20, Buffers: 2, PeakBuffers: 3,
		AllocBytes: 5 << 20, FreedBytes: 2 << 20, Allocs: 4, Frees: 2, FailedAllocs: 1, Limit: 1 << 30,
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	logger.Info("memory", "stats", s)

	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	assert.Equal(t, map[string]any{
		"level": "INFO",
		"msg":   "memory",
		"stats": map[string]any{
			"device":        "cpu",
			"tracked":       float64(3 << 20),
			"peak_tracked":  float64(4 << 20),
			"held":          float64(7 << 20),
			"peak_held":     float64(8 << 20),
			"alloc_bytes":   float64(5 << 20),
			"freed_bytes":   float64(2 << 20),
			"buffers":       float64(2),
			"peak_buffers":  float64(3),
			"allocs":        float64(4),
			"frees":         float64(2),
			"failed_allocs": float64(1),
			"limit":         float64(1 << 30),
		},
	}, got)
}

// dropTime removes the time from slog's output, so that it can be compared.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

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
	assert.Equal(t, int64(3<<10), got["cpu"].Tracked)

	// The figures are read when the variable is, not when it was made.
	buf2, err := cpu.Alloc(1 << 10)
	require.NoError(t, err)
	defer buf2.Free()
	require.NoError(t, json.Unmarshal([]byte(v.String()), &got))
	assert.Equal(t, int64(4<<10), got["cpu"].Tracked)
}

func TestExpvarNotPublished(t *testing.T) {
	expvar.Do(func(kv expvar.KeyValue) {
		assert.NotContains(t, kv.Key, "memtrack", "published by the package: %s", kv.Key)
	})
}
