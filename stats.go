package memtrack

import (
	"bytes"
	"fmt"
	"text/tabwriter"

	"github.com/memtrack/memtrack/tracker"
)

// Stats is a snapshot of one device's allocation statistics, the figures
// PyTorch's torch.cuda.memory_stats reports for its allocator. Current,
// Peak, Active and PeakActive are exact; the cumulative figures are exact
// whenever no Free is in progress on the device, and never decrease between
// snapshots except across [Device.ResetAccumulatedMemoryStats].
type Stats struct {
	Device                     Device
	Current, Peak              int64 // bytes held by live buffers (requested sizes), and its high-water mark
	AllocatedBytes, FreedBytes int64 // cumulative
	Active, PeakActive         int64 // live buffers
	Allocs, Frees              int64 // cumulative counts
	FailedAllocs               int64 // refused by the limit or by the backend
	Limit                      int64 // 0: none
}

func statsOf(d Device, s tracker.Stats) Stats {
	return Stats{
		Device:         d,
		Current:        s.Current,
		Peak:           s.Peak,
		AllocatedBytes: s.AllocatedBytes,
		FreedBytes:     s.FreedBytes,
		Active:         s.Active,
		PeakActive:     s.PeakActive,
		Allocs:         s.Allocs,
		Frees:          s.Frees,
		FailedAllocs:   s.Failed,
		Limit:          s.Limit,
	}
}

// MemorySummary returns a human-readable table of the device's statistics
// and of what its driver reports, in the manner of torch.cuda.memory_summary.
func (d Device) MemorySummary() string {
	s := d.MemoryStats()
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "memtrack memory summary: %v\n", d)
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\tcurrent\tpeak\tallocated\tfreed\t\n")
	fmt.Fprintf(w, "bytes\t%s\t%s\t%s\t%s\t\n", formatBytes(s.Current), formatBytes(s.Peak), formatBytes(s.AllocatedBytes), formatBytes(s.FreedBytes))
	fmt.Fprintf(w, "buffers\t%d\t%d\t%d\t%d\t\n", s.Active, s.PeakActive, s.Allocs, s.Frees)
	w.Flush()
	fmt.Fprintf(&buf, "failed allocations: %d\n", s.FailedAllocs)
	if s.Limit > 0 {
		fmt.Fprintf(&buf, "memory limit: %s (%d bytes)\n", formatBytes(s.Limit), s.Limit)
	} else {
		fmt.Fprintf(&buf, "memory limit: none\n")
	}
	if u, err := d.Usage(); err == nil {
		fmt.Fprintf(&buf, "device (reported): %s used of %s, %s free; tracked %s, untracked %s\n",
			formatBytes(u.Used), formatBytes(u.Total), formatBytes(u.Free), formatBytes(u.Tracked), formatBytes(u.Untracked))
	} else {
		fmt.Fprintf(&buf, "device (reported): unavailable: %v\n", err)
	}
	return buf.String()
}
