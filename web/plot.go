package web

import (
	"cmp"
	"slices"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/spans"
)

// plotter turns a history, given one event at a time (the oldest first, as
// memtrack.HistoryRecorder.Range gives them), into the points of a plot,
// in one pass and in memory that grows with the points it keeps, not with
// the events it reads.
//
// The events are put in buckets of w consecutive sequence numbers; a bucket
// keeps its lowest and highest point, and points that must stay (the first,
// the last, those beside a gap) are pinned in it. While the lowest and
// highest points of the closed buckets are at most limit, w is 1 and every
// point is kept; whenever they are more, w doubles and neighbouring buckets
// merge, keeping the lower of their lowest and the higher of their highest
// points (the earlier of equals), so that the highest point of the
// history, its first occurrence, is always kept.
//
// The sites' figures at the kept points are walked back from the live
// figures at the end of the read: a point's figure for a site is the live
// figure less what the events after the point added to the site. The
// plotter keeps, per kept point, the sum of what the events up to it added
// to each site (its vec); a bucket logs the site events since it was
// opened, and computes the vecs of its points from the running sum when it
// closes, so that the sums are copied per kept point, not per event.
type plotter struct {
	limit int

	w        uint64 // the bucket width, in sequence numbers
	first    uint64 // the first event's Seq
	events   int    // events read
	buckets  []bucket
	extremes int // the lowest and highest points of the closed buckets
	open     bucket
	opened   bool
	log      []siteEvent // the open bucket's site events
	need     []*point    // close's, kept for the next
	work     []int64     // close's, kept for the next

	run    []int64          // by site id: what the events so far added
	ids    map[*uintptr]int // a site's id by its stack (events of a site share it)
	names  []string         // by site id
	nameID map[string]int

	// The categories' figures at the kept points, computed as the sites'
	// sums are (plotter.categoryEvent): cats holds each category's bytes
	// after its latest event, catLog the open bucket's changes to them.
	cats     []int64
	catLog   []siteEvent
	catNames []string
	catID    map[string]int

	prev      memtrack.HistoryEvent // the previous event
	prevPoint bool                  // it was a point (not a refusal)
	started   bool                  // an event was read
	plotted   bool                  // a point was read
	max       point                 // the highest point, the first of equals
	last      point                 // the newest point, in the open bucket
	refusals  []refusal

	pairs           spans.Pairer // the spans (plotter.mark)
	instants        []instant    // the marks that are no span, the newest (plotter.mark)
	instantsDropped int
	markEvents      int
}

// point is one plotted event.
type point struct {
	seq  uint64
	t    time.Time
	cur  int64
	vec  []int64 // by site id: what the events up to this one added; nil until the bucket closes
	cvec []int64 // by category id: the categories' bytes after this event; set with vec
}

// bucket is a run of events and the points it keeps: lo and hi once it
// has a point (a bucket is opened for a point, so every closed one has).
type bucket struct {
	idx    uint64 // (Seq - first) / w
	has    bool   // lo and hi are set
	lo, hi point
	pins   []point
}

// siteEvent is what one event added to a site.
type siteEvent struct {
	seq   uint64
	id    int
	bytes int64
}

// refusal is a refused allocation, as read.
type refusal struct {
	t    time.Time
	kind string
	size int64
}

func newPlotter(limit int) *plotter {
	return &plotter{limit: max(limit, 4), w: 1, ids: make(map[*uintptr]int), nameID: make(map[string]int), pairs: spans.Pairer{Max: MaxMarks}}
}

// add takes the next event.
func (p *plotter) add(e memtrack.HistoryEvent) bool {
	p.events++
	p.pairs.Add(e)
	if e.Action.IsMark() {
		p.mark(e)
		return true
	}
	gap := p.started && e.Seq != p.prev.Seq+1
	if gap && p.prevPoint {
		p.pin(p.last)
	}
	if !p.started {
		p.started, p.first = true, e.Seq
	}
	p.prev, p.prevPoint = e, false
	if e.Action.Refused() {
		p.refusals = append(p.refusals, refusal{t: e.Time, kind: e.Action.String(), size: e.Size})
		return true
	}
	p.prevPoint = true
	idx := (e.Seq - p.first) / p.w
	if !p.opened || idx != p.open.idx {
		p.enter(idx)
	}
	if id, ok := p.siteOf(e); ok {
		d := e.SiteBytes
		if e.Action == memtrack.HistoryFree {
			d = -d
		}
		p.run[id] += d
		p.log = append(p.log, siteEvent{seq: e.Seq, id: id, bytes: d})
	}
	if e.Category != "" {
		p.categoryEvent(e)
	}
	pt := point{seq: e.Seq, t: e.Time, cur: e.Tracked}
	p.last = pt
	b := &p.open
	if !b.has || pt.cur < b.lo.cur {
		b.lo = pt
	}
	if !b.has || pt.cur > b.hi.cur {
		b.hi = pt
	}
	b.has = true
	if !p.plotted || pt.cur > p.max.cur {
		p.max = pt
	}
	if gap || !p.plotted {
		p.pin(pt) // the first point, and a point after a gap
	}
	p.plotted = true
	return true
}

// pin keeps pt, a point of the open bucket, whatever the thinning does.
func (p *plotter) pin(pt point) {
	for _, q := range p.open.pins {
		if q.seq == pt.seq {
			return
		}
	}
	p.open.pins = append(p.open.pins, pt)
}

// enter closes the open bucket and opens the one of idx: the last closed
// bucket again where a doubling merged the open one into it.
func (p *plotter) enter(idx uint64) {
	if p.opened {
		p.close()
		for p.extremes > p.limit {
			p.double()
		}
	}
	p.opened = true
	if n := len(p.buckets); n > 0 && p.buckets[n-1].idx == idx {
		p.open = p.buckets[n-1]
		p.buckets = p.buckets[:n-1]
		p.extremes -= p.open.extremes()
		return
	}
	p.open = bucket{idx: idx}
}

// close computes the sums of the open bucket's new points from the
// running sums and the bucket's log, and files the bucket.
func (p *plotter) close() {
	p.buckets = append(p.buckets, p.open)
	b := &p.buckets[len(p.buckets)-1]
	p.extremes += b.extremes()
	need := append(p.need[:0], &b.lo, &b.hi)
	for i := range b.pins {
		need = append(need, &b.pins[i])
	}
	need = slices.DeleteFunc(need, func(q *point) bool { return q.vec != nil })
	slices.SortFunc(need, func(a, b *point) int { return cmp.Compare(b.seq, a.seq) }) // the newest first
	work := append(p.work[:0], p.run...)
	i := len(p.log) - 1
	for _, q := range need {
		for ; i >= 0 && p.log[i].seq > q.seq; i-- {
			work[p.log[i].id] -= p.log[i].bytes
		}
		q.vec = noSites
		if len(work) > 0 {
			q.vec = slices.Clone(work)
		}
	}
	p.closeCategories(need)
	p.need, p.work, p.log = need[:0], work[:0], p.log[:0]
}

// noSites is the sums of a point before any site: empty, not nil.
var noSites = []int64{}

// extremes counts the bucket's lowest and highest points: one if they are
// one point.
func (b *bucket) extremes() int {
	if b.lo.seq == b.hi.seq {
		return 1
	}
	return 2
}

// double doubles the bucket width and merges the buckets that now share
// an index.
func (p *plotter) double() {
	p.w *= 2
	p.extremes = 0
	out := p.buckets[:0]
	for _, b := range p.buckets {
		b.idx /= 2
		if n := len(out); n > 0 && out[n-1].idx == b.idx {
			m := &out[n-1]
			if b.lo.cur < m.lo.cur {
				m.lo = b.lo
			}
			if b.hi.cur > m.hi.cur {
				m.hi = b.hi
			}
			m.pins = append(m.pins, b.pins...)
			continue
		}
		out = append(out, b)
	}
	p.buckets = out
	for i := range out {
		p.extremes += out[i].extremes()
	}
}

// siteOf returns the id of the event's site, if it has one.
func (p *plotter) siteOf(e memtrack.HistoryEvent) (int, bool) {
	var name string
	switch {
	case len(e.Stack) > 0:
		if id, ok := p.ids[&e.Stack[0]]; ok {
			return id, true
		}
		name = siteName(e.Stack)
	case e.SiteBytes != 0:
		name = memtrack.OtherSite
	default:
		return 0, false
	}
	id, ok := p.nameID[name]
	if !ok {
		id = len(p.names)
		p.names = append(p.names, name)
		p.nameID[name] = id
		p.run = append(p.run, 0)
	}
	if len(e.Stack) > 0 {
		p.ids[&e.Stack[0]] = id
	}
	return id, true
}

// finish returns the plot of the history h (read without its events); peak
// is the device's peak, and now, if not nil, the live bytes by site name,
// from which the sites' figures are walked back.
func (p *plotter) finish(h memtrack.History, peak int64, now map[string]int64) *History {
	ms := func(t time.Time) float64 { return float64(t.Sub(h.Start).Microseconds()) / 1e3 }
	out := &History{MaxEntries: h.MaxEntries, Events: p.events, Overwritten: h.Overwritten, Lost: h.Lost, T: []float64{}, Bytes: []int64{}}
	for _, r := range p.refusals {
		out.Refusals = append(out.Refusals, Refusal{T: ms(r.t), Kind: r.kind, Size: r.size})
	}
	for _, g := range h.Gaps {
		out.Gaps = append(out.Gaps, Gap{From: ms(g.From), To: ms(g.To), Missing: g.Missing})
	}
	out.Marks, out.MarksLeftOut = p.markList(ms)
	out.MarkEvents = p.markEvents
	if !p.plotted {
		return out
	}
	p.pin(p.last)
	p.close()
	var pts []*point
	for i := range p.buckets {
		b := &p.buckets[i]
		pts = append(pts, &b.lo, &b.hi)
		for j := range b.pins {
			pts = append(pts, &b.pins[j])
		}
	}
	slices.SortFunc(pts, func(a, b *point) int { return cmp.Compare(a.seq, b.seq) })
	pts = slices.CompactFunc(pts, func(a, b *point) bool { return a.seq == b.seq })
	atMax := 0
	for i, q := range pts {
		out.T = append(out.T, ms(q.t))
		out.Bytes = append(out.Bytes, q.cur)
		if q.seq == p.max.seq {
			atMax = i
		}
	}
	out.Max, out.MaxT, out.MaxAtPeak = p.max.cur, ms(p.max.t), p.max.cur == peak
	out.Categories = p.categorySeries(pts, atMax)
	if now == nil {
		return out
	}
	p.stack(out, pts, atMax, now)
	return out
}

// stack fills out.Sites: each site's live bytes at each point, the
// largest at the highest point one by one, the others as one.
func (p *plotter) stack(out *History, pts []*point, atMax int, now map[string]int64) {
	names := slices.Clone(p.names)
	for n := range now {
		if _, ok := p.nameID[n]; !ok {
			names = append(names, n)
		}
	}
	at := func(n string, q *point) int64 {
		v := now[n]
		if id, ok := p.nameID[n]; ok {
			var upTo int64
			if id < len(q.vec) {
				upTo = q.vec[id]
			}
			v -= p.run[id] - upTo // what the events after q added
		}
		return max(v, 0)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(at(b, pts[atMax]), at(a, pts[atMax])), cmp.Compare(a, b))
	})
	rest := make([]int64, len(pts))
	for k, n := range names {
		if k < TopSites && at(n, pts[atMax]) > 0 {
			s := SiteSeries{Name: n, Bytes: make([]int64, len(pts))}
			for j, q := range pts {
				s.Bytes[j] = at(n, q)
			}
			out.Sites = append(out.Sites, s)
			continue
		}
		for j, q := range pts {
			rest[j] += at(n, q)
		}
	}
	if slices.ContainsFunc(rest, func(b int64) bool { return b != 0 }) {
		out.Sites = append(out.Sites, SiteSeries{Name: "other sites", Bytes: rest})
	}
}
