package web

import (
	"cmp"
	"slices"

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

// categoryEvent takes the category's bytes after an event of it.
func (p *plotter) categoryEvent(e memtrack.HistoryEvent) {
	id, ok := p.catID[e.Category]
	if !ok {
		if p.catID == nil {
			p.catID = make(map[string]int)
		}
		id = len(p.catNames)
		p.catID[e.Category] = id
		p.catNames = append(p.catNames, e.Category)
		p.cats = append(p.cats, 0)
	}
	p.catLog = append(p.catLog, siteEvent{seq: e.Seq, id: id, bytes: e.CategoryTracked - p.cats[id]})
	p.cats[id] = e.CategoryTracked
}

// closeCategories sets the categories' figures of the closing bucket's new
// points, need, the newest first: the figures now, less the changes the
// bucket's later events made.
func (p *plotter) closeCategories(need []*point) {
	work := slices.Clone(p.cats)
	i := len(p.catLog) - 1
	for _, q := range need {
		for ; i >= 0 && p.catLog[i].seq > q.seq; i-- {
			work[p.catLog[i].id] -= p.catLog[i].bytes
		}
		q.cvec = slices.Clone(work)
	}
	p.catLog = p.catLog[:0]
}

// TopCategories is how many categories the plot stacks one by one: past
// them, those that track the most at the highest point, and the others as
// one series, OtherCategories.
const TopCategories = 9

// OtherCategories names the series of the categories past TopCategories:
// memtrack.OtherCategories, which no category may take.
const OtherCategories = memtrack.OtherCategories

// categorySeries returns each category's tracked bytes at the points, in
// the order the categories first appear in the history (past
// TopCategories, the TopCategories that track the most at point atMax,
// and then the others as OtherCategories), and last the rest of the
// device's tracked bytes as memtrack.Uncategorised; nil where no event is
// in a category. A category's figure is the one its latest event read
// (memtrack.HistoryEvent.CategoryTracked): a category whose buffers
// predate the history counts as uncategorised until its first event.
func (p *plotter) categorySeries(pts []*point, atMax int) []SiteSeries {
	if len(p.catNames) == 0 {
		return nil
	}
	// slot[id]: the series of category id.
	slot := make([]int, len(p.catNames))
	names := slices.Clone(p.catNames)
	if len(p.catNames) > TopCategories {
		at := func(id int) int64 {
			if v := pts[atMax].cvec; id < len(v) {
				return v[id]
			}
			return 0
		}
		order := make([]int, len(p.catNames))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(at(b), at(a)) })
		top := slices.Clone(order[:TopCategories])
		slices.Sort(top) // in the order they appear
		names = names[:0]
		for i := range slot {
			slot[i] = TopCategories
		}
		for k, id := range top {
			slot[id] = k
			names = append(names, p.catNames[id])
		}
		names = append(names, OtherCategories)
	} else {
		for i := range slot {
			slot[i] = i
		}
	}
	out := make([]SiteSeries, len(names)+1)
	for i := range out {
		out[i].Bytes = make([]int64, len(pts))
		if i < len(names) {
			out[i].Name = names[i]
		}
	}
	rest := &out[len(names)]
	rest.Name = memtrack.Uncategorised
	for j, q := range pts {
		left := q.cur
		for id, v := range q.cvec {
			out[slot[id]].Bytes[j] += v
			left -= v
		}
		rest.Bytes[j] = max(left, 0)
	}
	return out
}
