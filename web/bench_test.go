package web

import (
	"fmt"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/require"
)

// fillHistory records a full ring of n events on d: n/2 allocations and
// frees of 64 bytes (rising and falling, so that the plot has a shape).
func fillHistory(b *testing.B, d memtrack.Device, n int) {
	b.Helper()
	require.NoError(b, d.History().Enable(n))
	var held []*memtrack.Buffer
	for i := 0; i < n/2; i++ {
		buf, err := d.Alloc(64)
		require.NoError(b, err)
		held = append(held, buf)
		if i%1000 == 999 { // every 1000 pairs, the buffers go
			for _, h := range held {
				require.NoError(b, h.Free())
			}
			held = held[:0]
		}
	}
	for _, h := range held {
		require.NoError(b, h.Free())
	}
}

// BenchmarkPageRead reads one device's figures and plot, as data.json
// does, from full rings of 64 Ki, 1 Mi and 4 Mi events (the largest ring,
// memtrack.MaxHistoryEntries): read=inplace is the page's read, one pass
// over the ring in place (memtrack.HistoryRecorder.Range); read=copy
// copies the ring first (memtrack.HistoryRecorder.Snapshot) and plots the copy
// the same way, the read the page made before. sites=1 records every
// allocation's site (rate 1), so that every event has a site to walk
// back. points is what the plot sends.
func BenchmarkPageRead(b *testing.B) {
	d := memtrack.CPU()
	for _, tc := range []struct {
		events int
		sites  bool
		copy   bool
	}{
		{1 << 16, false, false},
		{1 << 20, false, false},
		{memtrack.MaxHistoryEntries, false, false},
		{memtrack.MaxHistoryEntries, false, true},
		{memtrack.MaxHistoryEntries, true, false},
		{memtrack.MaxHistoryEntries, true, true},
	} {
		read := "inplace"
		if tc.copy {
			read = "copy"
		}
		sites := 0
		if tc.sites {
			sites = 1
		}
		b.Run(fmt.Sprintf("events=%d/sites=%d/read=%s", tc.events, sites, read), func(b *testing.B) {
			if tc.sites {
				require.NoError(b, d.Sites().SetRate(1))
				require.NoError(b, d.Sites().Enable(8))
				defer d.Sites().SetRate(0)
				defer d.Sites().Disable()
			}
			fillHistory(b, d, tc.events)
			defer d.History().Disable()
			var out Device
			b.ResetTimer()
			for b.Loop() {
				if tc.copy {
					out = readDeviceCopy(d)
				} else {
					out = readDevice(d)
				}
			}
			require.NotNil(b, out.History)
			require.Equal(b, tc.events, out.History.Events)
			b.ReportMetric(float64(len(out.History.Bytes)), "points")
		})
	}
}

// readDeviceCopy is readDevice with the history copied first.
func readDeviceCopy(d memtrack.Device) Device {
	s := d.MemoryStats()
	out := Device{Name: d.String(), Tracked: s.Tracked, PeakTracked: s.PeakTracked, Limit: s.Limit, Buffers: s.Buffers, FailedAllocs: s.FailedAllocs}
	out.Free, out.Total, _ = d.MemGetInfo()
	out.Sites = d.Sites().Stats().Enabled
	h, err := d.History().Snapshot()
	if err != nil {
		return out
	}
	p := newPlotter(MaxPoints)
	for _, e := range h.Events {
		p.add(e)
	}
	out.History = p.finish(h, s.PeakTracked, liveSites(d, out.Sites))
	return out
}
