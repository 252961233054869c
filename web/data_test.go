package web

import (
	"bytes"
	"errors"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// feed gives the plotter the events, as History().Range would, and
// returns the history to finish with.
func feed(p *plotter, start time.Time, events []memtrack.HistoryEvent) memtrack.History {
	h := memtrack.History{MaxEntries: len(events), Start: start}
	for i, e := range events {
		if i > 0 && e.Seq != events[i-1].Seq+1 {
			a := events[i-1]
			h.Gaps = append(h.Gaps, memtrack.HistoryGap{After: a.Seq, Before: e.Seq, Missing: e.Seq - a.Seq - 1, From: a.Time, To: e.Time})
		}
		p.add(e)
	}
	return h
}

// TestPlotterKeepsPeakAndGaps thins a long history: the point count stays
// within the limit, and the peak, the ends and the events beside a gap stay.
func TestPlotterKeepsPeakAndGaps(t *testing.T) {
	start := time.Now()
	var events []memtrack.HistoryEvent
	for i := range 10001 {
		if i == 1235 {
			continue // lost
		}
		cur := int64(i % 97)
		if i == 6543 || i == 8000 {
			cur = 1000 // the highest, twice: the first is kept
		}
		events = append(events, memtrack.HistoryEvent{Seq: uint64(i), Time: start.Add(time.Duration(i) * time.Microsecond), Action: memtrack.HistoryAlloc, Tracked: cur})
	}
	p := newPlotter(400)
	out := p.finish(feed(p, start, events), 1000, nil)
	assert.LessOrEqual(t, len(out.Bytes), 400+5)
	assert.Equal(t, 10000, out.Events)
	require.IsIncreasing(t, out.T)
	seqs := map[float64]bool{}
	for _, v := range out.T {
		seqs[v*1e3] = true // 1 us per event: T in ms
	}
	for _, want := range []float64{0, 1234, 1236, 6543, 10000} {
		assert.True(t, seqs[want], "point %v kept", want)
	}
	assert.Equal(t, int64(1000), out.Max)
	assert.Equal(t, 6.543, out.MaxT, "the first of the equal highs")
	assert.True(t, out.MaxAtPeak)
	assert.Equal(t, []Gap{{From: 1.234, To: 1.236, Missing: 1}}, out.Gaps)
	assert.Equal(t, int64(0), slices.Min(out.Bytes))

	p = newPlotter(400)
	out = p.finish(feed(p, start, events[:300]), 1000, nil)
	assert.Len(t, out.Bytes, 300, "short histories are kept whole")
}

// The functions whose entries name the sites of FuzzPlotter's events.
func siteA() {}
func siteB() {}
func siteC() {}

// FuzzPlotter compares the plot of a history read one event at a time with
// a plain model over the whole history: every point plotted is an event,
// in order, with its figure; the first, the last, the highest (its first
// occurrence), the lowest, and the events beside a gap are among them; a
// short history is kept whole; the refusals are all marked; and each
// site's figure at each point is the live figure less what the events
// after the point added to it.
func FuzzPlotter(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, uint8(4))
	f.Add([]byte{0x10, 0x21, 0x33, 0x40, 0x55, 0x61, 0x72, 0x83, 0x94, 0xa5, 0xb6, 0xc7, 0xd8}, uint8(6))
	f.Add(bytes.Repeat([]byte{0x13, 0x27, 0x31, 0x4c, 0x58, 0x6e}, 40), uint8(8))
	stacks := [][]uintptr{
		{reflect.ValueOf(siteA).Pointer() + 1},
		{reflect.ValueOf(siteB).Pointer() + 1},
		{reflect.ValueOf(siteC).Pointer() + 1},
	}
	f.Fuzz(func(t *testing.T, ops []byte, limit uint8) {
		start := time.Unix(1, 0)
		var events []memtrack.HistoryEvent
		live := map[int][]int64{} // by site: the sizes live
		var cur int64
		seq := uint64(0)
		for i, op := range ops {
			if op&0x80 != 0 {
				seq += uint64(op>>4&3) + 1 // lost events
			}
			e := memtrack.HistoryEvent{Seq: seq, Time: start.Add(time.Duration(i) * time.Millisecond)}
			site := int(op>>2&3) % 4 // 3: none
			size := int64(op&3+1) << 10
			switch {
			case op&0x40 != 0 && op&3 == 3:
				e.Action, e.Size = memtrack.HistoryLimit, size
			case op&0x40 != 0 && len(live[site]) > 0:
				size = live[site][0]
				live[site] = live[site][1:]
				e.Action, e.Size = memtrack.HistoryFree, size
				cur -= size
			default:
				e.Action, e.Size = memtrack.HistoryAlloc, size
				live[site] = append(live[site], size)
				cur += size
			}
			e.Tracked = cur
			if site < 3 && !e.Action.Refused() {
				e.Stack, e.SiteBytes = stacks[site], e.Size*int64(site+1) // a scaled figure
			}
			events = append(events, e)
			seq++
		}
		now := map[string]int64{}
		for site, sizes := range live {
			if site < 3 {
				for _, n := range sizes {
					now[siteName(stacks[site])] += n * int64(site+1)
				}
			}
		}
		p := newPlotter(int(limit))
		h := feed(p, start, events)
		out := p.finish(h, 1<<40, now)

		ms := func(t time.Time) float64 { return float64(t.Sub(start).Microseconds()) / 1e3 }
		var pts []memtrack.HistoryEvent
		var marks []Refusal
		for _, e := range events {
			if e.Action.Refused() {
				marks = append(marks, Refusal{T: ms(e.Time), Kind: e.Action.String(), Size: e.Size})
			} else {
				pts = append(pts, e)
			}
		}
		assert.Equal(t, marks, out.Refusals)
		assert.Equal(t, len(events), out.Events)
		if len(pts) == 0 {
			assert.Empty(t, out.Bytes)
			return
		}
		// The plotted points, by their index in pts.
		byT := map[float64]int{}
		for i, e := range pts {
			byT[ms(e.Time)] = i
		}
		var kept []int
		for j, v := range out.T {
			i, ok := byT[v]
			require.True(t, ok, "point %d at %v is an event", j, v)
			require.Equal(t, pts[i].Tracked, out.Bytes[j])
			kept = append(kept, i)
		}
		require.IsIncreasing(t, kept)
		must := []int{0, len(pts) - 1}
		hi, lo := 0, 0
		for i, e := range pts {
			if e.Tracked > pts[hi].Tracked {
				hi = i
			}
			if e.Tracked < pts[lo].Tracked {
				lo = i
			}
			if i > 0 && e.Seq != pts[i-1].Seq+1 && slices.ContainsFunc(h.Gaps, func(g memtrack.HistoryGap) bool { return g.Before == e.Seq }) {
				must = append(must, i)
				if slices.ContainsFunc(h.Gaps, func(g memtrack.HistoryGap) bool { return g.After == pts[i-1].Seq }) {
					must = append(must, i-1)
				}
			}
		}
		must = append(must, hi)
		for _, i := range must {
			assert.Contains(t, kept, i)
		}
		assert.Equal(t, pts[lo].Tracked, slices.Min(out.Bytes), "the lowest figure")
		assert.Equal(t, pts[hi].Tracked, out.Max)
		assert.Equal(t, ms(pts[hi].Time), out.MaxT)
		if len(pts) <= max(int(limit), 4) {
			assert.Len(t, kept, len(pts), "a short history is kept whole")
		}
		assert.LessOrEqual(t, len(kept), max(int(limit), 4)+2+2*len(h.Gaps)+4)

		// The sites, walked back over the whole history.
		want := map[string][]int64{}
		names := maps.Clone(now) // and the sites of the history with nothing live now
		for _, e := range pts {
			if len(e.Stack) > 0 {
				names[siteName(e.Stack)] += 0
			}
		}
		for n, v := range names {
			want[n] = make([]int64, len(kept))
			for j, i := range kept {
				w := v
				for _, e := range pts[i+1:] {
					if len(e.Stack) > 0 && siteName(e.Stack) == n {
						if e.Action == memtrack.HistoryAlloc {
							w -= e.SiteBytes
						} else {
							w += e.SiteBytes
						}
					}
				}
				want[n][j] = max(w, 0)
			}
		}
		total := make([]int64, len(kept))
		for _, s := range out.Sites {
			if s.Name != "other sites" {
				assert.Equal(t, want[s.Name], s.Bytes, "site %s", s.Name)
			}
			for j, v := range s.Bytes {
				total[j] += v
			}
		}
		wantTotal := make([]int64, len(kept))
		for _, vs := range want {
			for j, v := range vs {
				wantTotal[j] += v
			}
		}
		assert.Equal(t, wantTotal, total, "the stacked sites")
	})
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 23 << 20: "23.0 MiB", 1 << 40: "1.00 TiB", 300 << 30: "300 GiB",
		1<<20 - 1: "1.00 MiB", 1<<30 - 1: "1.00 GiB", -(1<<20 - 1): "-1.00 MiB", 10239: "10.0 KiB", 102399: "100 KiB", 1<<60 + 1<<59: "1.50 EiB"} {
		assert.Equal(t, want, bytesize.Format(n), "%d", n)
	}
}

// TestPageReadMemoryFollowsPoints: a page read of a ring sixteen times
// longer holds about as much memory: the ring is read in place, and only
// the points sent are kept.
func TestPageReadMemoryFollowsPoints(t *testing.T) {
	d := memtrack.CPU()
	measure := func(events int) uint64 {
		require.NoError(t, d.History().Enable(events))
		defer d.History().Disable()
		for range events / 2 {
			b, err := d.Alloc(64)
			require.NoError(t, err)
			require.NoError(t, b.Free())
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out := readDevice(d)
		runtime.ReadMemStats(&after)
		require.NotNil(t, out.History)
		require.Equal(t, events, out.History.Events)
		return after.TotalAlloc - before.TotalAlloc
	}
	small, large := measure(1<<14), measure(1<<18)
	t.Logf("a read of 16 Ki events allocates %d B, of 256 Ki events %d B", small, large)
	assert.Less(t, large, 2*small, "the read of the longer ring allocates for its events")
}

// TestReadAddressSpace checks that the page carries the address space a
// reservation holds, and drops it once released.
func TestReadAddressSpace(t *testing.T) {
	cpu := memtrack.CPU()
	g, err := cpu.MapGranularity()
	if errors.Is(err, memtrack.ErrNotSupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	r, err := cpu.Reserve(8 * g)
	require.NoError(t, err)
	find := func() Device {
		for _, d := range Read().Devices {
			if d.Name == "cpu" {
				return d
			}
		}
		t.Fatal("no cpu on the page")
		return Device{}
	}
	d := find()
	assert.Equal(t, 8*g, d.AddressSpace)
	assert.Equal(t, int64(1), d.Reservations)
	require.NoError(t, r.Release())
	d = find()
	assert.Zero(t, d.AddressSpace)
	assert.Zero(t, d.Reservations)
}
