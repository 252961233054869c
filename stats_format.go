package memtrack

import (
	"fmt"
	"log/slog"
	"strconv"
)

// String describes the statistics on one line, each size in IEC units
// (KiB, MiB, GiB) followed by its exact figure in bytes.
func (s Stats) String() string {
	limit := "no limit"
	if s.Limit > 0 {
		limit = "limit " + exactBytes(s.Limit)
	}
	return fmt.Sprintf("%v: current %s, peak %s; %d live buffers (peak %d); allocated %s in %d allocs, freed %s in %d frees; %d failed; %s",
		s.Device, exactBytes(s.Current), exactBytes(s.Peak), s.Active, s.PeakActive,
		exactBytes(s.AllocatedBytes), s.Allocs, exactBytes(s.FreedBytes), s.Frees, s.FailedAllocs, limit)
}

// LogValue returns the statistics as a group, in bytes and counts, for
// [log/slog]: logger.Info("memory", "stats", dev.MemoryStats()).
func (s Stats) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("device", s.Device.String()),
		slog.Int64("current", s.Current),
		slog.Int64("peak", s.Peak),
		slog.Int64("allocated_bytes", s.AllocatedBytes),
		slog.Int64("freed_bytes", s.FreedBytes),
		slog.Int64("active", s.Active),
		slog.Int64("peak_active", s.PeakActive),
		slog.Int64("allocs", s.Allocs),
		slog.Int64("frees", s.Frees),
		slog.Int64("failed_allocs", s.FailedAllocs),
		slog.Int64("limit", s.Limit),
	)
}

// exactBytes writes n as formatBytes does, followed by the exact figure
// where the unit rounds it: "512 B", "1.50 MiB (1572864 B)".
func exactBytes(n int64) string {
	s := formatBytes(n)
	if n > -1024 && n < 1024 {
		return s
	}
	return s + " (" + strconv.FormatInt(n, 10) + " B)"
}
