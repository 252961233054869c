package web

import (
	"github.com/memtrack/memtrack"
)

// Category is one row of a device's categories
// ([memtrack.Device.CategoryStats]); the row memtrack.Uncategorised has no
// peak.
type Category struct {
	Name         string `json:"name"`
	Tracked      int64  `json:"tracked"`
	PeakTracked  int64  `json:"peakTracked"`
	Buffers      int64  `json:"buffers"`
	FailedAllocs int64  `json:"failedAllocs"`
	Limit        int64  `json:"limit"` // 0: none
}

// categories returns the rows of d's categories, nil without categories.
func categories(d memtrack.Device) []Category {
	var out []Category
	for _, c := range d.CategoryStats() {
		out = append(out, Category{Name: c.Category, Tracked: c.Tracked, PeakTracked: c.PeakTracked,
			Buffers: c.Buffers, FailedAllocs: c.FailedAllocs, Limit: c.Limit})
	}
	return out
}

// categorySeries returns each category's tracked bytes at each kept point,
// in the order the categories first appear, and last the rest of the
// device's tracked bytes as memtrack.Uncategorised; nil where no event is
// in a category. A category's figure is the one its latest event read
// (HistoryEvent.CategoryTracked): a category whose buffers predate the
// history counts as uncategorised until its first event.
func categorySeries(pts []memtrack.HistoryEvent, keep []int) []SiteSeries {
	index := map[string]int{}
	var names []string
	for _, e := range pts {
		if _, ok := index[e.Category]; e.Category != "" && !ok {
			index[e.Category] = len(names)
			names = append(names, e.Category)
		}
	}
	if len(names) == 0 {
		return nil
	}
	out := make([]SiteSeries, len(names)+1)
	for i := range out {
		out[i].Bytes = make([]int64, len(keep))
		if i < len(names) {
			out[i].Name = names[i]
		}
	}
	out[len(names)].Name = memtrack.Uncategorised
	cur := make([]int64, len(names))
	k := 0
	for i, e := range pts {
		if e.Category != "" {
			cur[index[e.Category]] = e.CategoryTracked
		}
		if k < len(keep) && keep[k] == i {
			rest := e.Tracked
			for c, v := range cur {
				out[c].Bytes[k] = v
				rest -= v
			}
			out[len(names)].Bytes[k] = max(rest, 0)
			k++
		}
	}
	return out
}
