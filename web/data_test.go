package web

import (
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestThinKeepsPeakAndGaps thins a long history: the point count stays
// within the limit, and the peak, the ends and the events beside a gap stay.
func TestThinKeepsPeakAndGaps(t *testing.T) {
	start := time.Now()
	var pts []memtrack.HistoryEvent
	for i := range 10000 {
		cur := int64(i % 97)
		if i == 6543 {
			cur = 1000
		}
		pts = append(pts, memtrack.HistoryEvent{Seq: uint64(i), Time: start.Add(time.Duration(i) * time.Microsecond), Action: memtrack.HistoryAlloc, Tracked: cur})
	}
	gaps := []memtrack.HistoryGap{{After: 1234, Before: 1235}}
	keep := thin(pts, gaps, 6543, 400)
	assert.LessOrEqual(t, len(keep), 400+5)
	for _, want := range []int{0, 1234, 1235, 6543, 9999} {
		assert.Contains(t, keep, want)
	}
	require.IsIncreasing(t, keep)
	// Every stretch keeps its lowest and highest figure.
	var lo, hi int64 = 1 << 62, -1
	for _, i := range keep {
		lo, hi = min(lo, pts[i].Tracked), max(hi, pts[i].Tracked)
	}
	assert.Equal(t, int64(0), lo)
	assert.Equal(t, int64(1000), hi)
	assert.Len(t, thin(pts[:300], nil, 0, 400), 300, "short histories are kept whole")
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 23 << 20: "23.0 MiB", 1 << 40: "1.00 TiB", 300 << 30: "300 GiB"} {
		assert.Equal(t, want, formatBytes(n), "%d", n)
	}
}
