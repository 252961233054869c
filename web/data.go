package web

import (
	"cmp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/memtrack/memtrack"
)

// MaxPoints is the most points a device's plot gets: a longer history is
// thinned to the lowest and highest figure of each stretch of time (and the
// peak and the events beside a gap are always kept), so that the page
// stays light with a ring of a million events.
const MaxPoints = 4000

// TopSites is how many of the largest allocation sites at the peak the
// plot stacks one by one; the others are stacked as one.
const TopSites = 6

// Page is what the page shows, as the handler serves it at data.json.
type Page struct {
	Time    time.Time `json:"time"` // when it was read
	Devices []Device  `json:"devices"`
}

// Device is one used device's figures and history.
type Device struct {
	Name         string `json:"name"`
	Tracked      int64  `json:"tracked"`     // MemoryAllocated
	PeakTracked  int64  `json:"peakTracked"` // MaxMemoryAllocated
	Limit        int64  `json:"limit"`       // 0: none
	Buffers      int64  `json:"buffers"`
	FailedAllocs int64  `json:"failedAllocs"`
	// Free and Total are what the OS or driver reports for the device;
	// InfoError says why they are missing.
	Free      int64    `json:"free"`
	Total     int64    `json:"total"`
	InfoError string   `json:"infoError,omitempty"`
	Sites     bool     `json:"sites"` // allocation sites are recorded
	History   *History `json:"history,omitempty"`
	// Categories are the figures of the device's categories and of the
	// memory outside them (category.go); absent without categories.
	Categories []Category `json:"categories,omitempty"`
}

// History is a device's history as the plot draws it: times in
// milliseconds since the history began.
type History struct {
	MaxEntries  int    `json:"maxEntries"`
	Events      int    `json:"events"` // events read (before thinning)
	Overwritten uint64 `json:"overwritten"`
	Lost        uint64 `json:"lost"`
	// T and Bytes are the plotted points: the tracked figure after each
	// allocation and free.
	T     []float64 `json:"t"`
	Bytes []int64   `json:"bytes"`
	// Max is the highest point, with its time: the device's peak when
	// it happened within the history (MaxAtPeak).
	Max       int64   `json:"max"`
	MaxT      float64 `json:"maxT"`
	MaxAtPeak bool    `json:"maxAtPeak"`
	Gaps      []Gap   `json:"gaps,omitempty"`
	Refusals  []Mark  `json:"refusals,omitempty"`
	// Sites, when allocation sites are recorded, are the bytes live from
	// the largest sites at the peak (by the innermost function that
	// allocated), one value per point; the last is the rest.
	Sites []SiteSeries `json:"sites,omitempty"`
	// Categories, when the history has events in categories, are each
	// category's tracked bytes at each point, the last "uncategorised"
	// (category.go).
	Categories []SiteSeries `json:"categories,omitempty"`
}

// Gap is a run of lost events: no line is drawn across it.
type Gap struct {
	From    float64 `json:"from"`
	To      float64 `json:"to"`
	Missing uint64  `json:"missing"`
}

// Mark is a refused allocation.
type Mark struct {
	T    float64 `json:"t"`
	Kind string  `json:"kind"` // limit, oom or failed
	Size int64   `json:"size"`
}

// SiteSeries is the live bytes of one allocation site over the points.
type SiteSeries struct {
	Name  string  `json:"name"`
	Bytes []int64 `json:"bytes"`
}

// Read reads the page's figures for every used device.
func Read() Page {
	p := Page{Time: time.Now(), Devices: []Device{}}
	for _, d := range memtrack.UsedDevices() {
		p.Devices = append(p.Devices, readDevice(d))
	}
	return p
}

func readDevice(d memtrack.Device) Device {
	s := d.MemoryStats()
	out := Device{Name: d.String(), Tracked: s.Tracked, PeakTracked: s.PeakTracked, Limit: s.Limit, Buffers: s.Buffers, FailedAllocs: s.FailedAllocs}
	out.Categories = categories(d) // category.go
	var err error
	if out.Free, out.Total, err = d.MemGetInfo(); err != nil {
		out.InfoError = err.Error()
	}
	out.Sites = d.AllocationSiteStats().Enabled
	h, err := d.MemoryHistory()
	if err != nil {
		return out
	}
	var now map[string]int64
	if out.Sites {
		if snap, err := d.AllocationSites(); err == nil {
			now = make(map[string]int64)
			for _, st := range snap.Sites {
				now[siteName(st.Stack)] += st.Bytes
			}
		}
	}
	out.History = plot(h, s.PeakTracked, now)
	return out
}

// plot turns a history into points; now, if not nil, is the live bytes by
// site name at the moment of reading, from which the sites' figures are
// walked back through the events.
func plot(h memtrack.History, peak int64, now map[string]int64) *History {
	ms := func(t time.Time) float64 { return float64(t.Sub(h.Start).Microseconds()) / 1e3 }
	out := &History{MaxEntries: h.MaxEntries, Events: len(h.Events), Overwritten: h.Overwritten, Lost: h.Lost, T: []float64{}, Bytes: []int64{}}
	var pts []memtrack.HistoryEvent
	for _, e := range h.Events {
		if e.Action.Refused() {
			out.Refusals = append(out.Refusals, Mark{T: ms(e.Time), Kind: e.Action.String(), Size: e.Size})
			continue
		}
		pts = append(pts, e)
	}
	for _, g := range h.Gaps {
		out.Gaps = append(out.Gaps, Gap{From: ms(g.From), To: ms(g.To), Missing: g.Missing})
	}
	if len(pts) == 0 {
		return out
	}
	maxAt := 0
	for i, e := range pts {
		if e.Tracked > pts[maxAt].Tracked {
			maxAt = i
		}
	}
	out.Max, out.MaxT, out.MaxAtPeak = pts[maxAt].Tracked, ms(pts[maxAt].Time), pts[maxAt].Tracked == peak

	keep := thin(pts, h.Gaps, maxAt, MaxPoints)
	for _, i := range keep {
		out.T = append(out.T, ms(pts[i].Time))
		out.Bytes = append(out.Bytes, pts[i].Tracked)
	}
	out.Categories = categorySeries(pts, keep) // category.go
	if now == nil {
		return out
	}
	sites := walkBack(pts, keep, now)
	atMax, _ := slices.BinarySearch(keep, maxAt)
	names := make([]string, 0, len(sites))
	for n := range sites {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(sites[b][atMax], sites[a][atMax]), cmp.Compare(a, b))
	})
	rest := make([]int64, len(keep))
	for k, n := range names {
		if k < TopSites && sites[n][atMax] > 0 {
			out.Sites = append(out.Sites, SiteSeries{Name: n, Bytes: sites[n]})
			continue
		}
		for j, v := range sites[n] {
			rest[j] += v
		}
	}
	if slices.ContainsFunc(rest, func(b int64) bool { return b != 0 }) {
		out.Sites = append(out.Sites, SiteSeries{Name: "other sites", Bytes: rest})
	}
	return out
}

// walkBack returns each site's live bytes after each kept point, from the
// live bytes now, undoing the events from the newest. Events of buffers
// whose site was not recorded change no site.
func walkBack(pts []memtrack.HistoryEvent, keep []int, now map[string]int64) map[string][]int64 {
	cur := make(map[string]int64, len(now))
	for n, b := range now {
		cur[n] = b
	}
	names := make([]string, len(pts))
	byStack := make(map[*uintptr]string) // the events of a site share its stack
	for i, e := range pts {
		if len(e.Stack) > 0 {
			n, ok := byStack[&e.Stack[0]]
			if !ok {
				n = siteName(e.Stack)
				byStack[&e.Stack[0]] = n
			}
			names[i] = n
			if _, ok := cur[names[i]]; !ok {
				cur[names[i]] = 0 // a site of the history with no live bytes now
			}
		}
	}
	out := make(map[string][]int64, len(cur))
	for n := range cur {
		out[n] = make([]int64, len(keep))
	}
	k := len(keep) - 1
	for i := len(pts) - 1; i >= 0 && k >= 0; i-- {
		if keep[k] == i {
			for n, v := range cur {
				out[n][k] = max(v, 0)
			}
			k--
		}
		if n := names[i]; n != "" {
			if pts[i].Action == memtrack.HistoryAlloc {
				cur[n] -= pts[i].Size
			} else {
				cur[n] += pts[i].Size
			}
		}
	}
	return out
}

// thin returns the indices of the points to plot: all if there are at most
// limit, else the lowest and highest of each of limit/2 stretches of time,
// the maximum at maxAt, and the points either side of each gap.
func thin(pts []memtrack.HistoryEvent, gaps []memtrack.HistoryGap, maxAt, limit int) []int {
	if len(pts) <= limit {
		idx := make([]int, len(pts))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	keep := map[int]bool{0: true, len(pts) - 1: true, maxAt: true}
	edge := make(map[uint64]bool, 2*len(gaps))
	for _, g := range gaps {
		edge[g.After], edge[g.Before] = true, true
	}
	t0, t1 := pts[0].Time, pts[len(pts)-1].Time
	buckets := limit / 2
	span := t1.Sub(t0) + 1
	lo, hi := -1, -1
	bucket := 0
	for i, e := range pts {
		if edge[e.Seq] {
			keep[i] = true
		}
		b := int(int64(e.Time.Sub(t0)) * int64(buckets) / int64(span))
		if b != bucket {
			keep[lo], keep[hi] = lo >= 0, hi >= 0
			lo, hi, bucket = -1, -1, b
		}
		if lo < 0 || e.Tracked < pts[lo].Tracked {
			lo = i
		}
		if hi < 0 || e.Tracked > pts[hi].Tracked {
			hi = i
		}
	}
	keep[lo], keep[hi] = true, true
	delete(keep, -1)
	idx := make([]int, 0, len(keep))
	for i, k := range keep {
		if k {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return idx
}

// siteName names an allocation site by its two innermost functions, the
// one that called Alloc and its caller: "model.alloc ← model.loadWeights".
func siteName(stack []uintptr) string {
	if len(stack) == 0 {
		return memtrack.OtherSite
	}
	frames := runtime.CallersFrames(stack)
	var name string
	for i := 0; i < 2; i++ {
		f, more := frames.Next()
		fn := f.Function
		if fn == "" {
			fn = "unknown"
		}
		fn = fn[strings.LastIndexByte(fn, '/')+1:]
		if i == 0 {
			name = fn
		} else {
			name += " ← " + fn
		}
		if !more {
			break
		}
	}
	return name
}
