package spans

import (
	"slices"
	"time"

	"github.com/memtrack/memtrack"
)

// Span is one span of a history.
type Span struct {
	Name     string
	From, To time.Time
	Begin    uint64 // the Seq of its begin
	End      uint64 // the Seq of its end, where it ended
	// Open: the history holds no end of it (it was not ended when the
	// history was read); To is then the history's last event.
	Open bool
	// BeginLost: the history holds its end but not its begin (the ring let
	// it go); From is then the history's first event.
	BeginLost bool
	Lane      int // its lane (see Pairer.Spans)
}

// Pairer pairs the begins and ends of a history's spans, given the
// history's events one at a time, the oldest first. With Max set it keeps
// at most about 2*Max spans whatever the history's length: the spans still
// open, and of the others the Max begun last (Dropped counts the others).
type Pairer struct {
	Max     int
	Dropped int

	spans       []Span
	at          map[uint64]int // by the begin's Seq: the open spans
	first, last time.Time
	started     bool
}

// Add takes the next event of the history; events that are not a span's
// begin or end only set the history's first and last times.
func (p *Pairer) Add(e memtrack.HistoryEvent) {
	if !p.started {
		p.first, p.started = e.Time, true
	}
	p.last = e.Time
	switch e.Action {
	case memtrack.HistoryBegin:
		if p.at == nil {
			p.at = make(map[uint64]int)
		}
		p.at[e.Span] = len(p.spans)
		p.spans = append(p.spans, Span{Name: e.Mark, From: e.Time, Begin: e.Span, Open: true})
		p.trim()
	case memtrack.HistoryEnd:
		if i, ok := p.at[e.Span]; ok {
			s := &p.spans[i]
			s.To, s.End, s.Open = e.Time, e.Seq, false
			delete(p.at, e.Span)
			return
		}
		p.spans = append(p.spans, Span{Name: e.Mark, From: p.first, To: e.Time, Begin: e.Span, End: e.Seq, BeginLost: true})
		p.trim()
	}
}

// trim drops, once there are 2*Max spans, the ended spans begun before the
// Max begun last.
func (p *Pairer) trim() {
	if p.Max <= 0 || len(p.spans) < 2*p.Max {
		return
	}
	cut := len(p.spans) - p.Max
	kept := p.spans[:0]
	for i, s := range p.spans {
		if i < cut && !s.Open {
			p.Dropped++
			continue
		}
		if s.Open {
			p.at[s.Begin] = len(kept)
		}
		kept = append(kept, s)
	}
	clear(p.spans[len(kept):])
	p.spans = kept
}

// Spans returns the spans, sorted by their start (those of one start in
// the order of their begins), each with its lane: the first lane whose
// spans still open at its start all contain it, so that the spans of a
// lane nest. An open span reaches the last event given.
func (p *Pairer) Spans() []Span {
	out := slices.Clone(p.spans)
	for i := range out {
		s := &out[i]
		if s.Open {
			s.To = p.last
		}
		if s.To.Before(s.From) { // an event's time is read before its number is taken
			s.To = s.From
		}
	}
	slices.SortStableFunc(out, func(a, b Span) int { return a.From.Compare(b.From) })
	var open [][]time.Time // per lane, the ends of its open spans, the innermost last
	for i := range out {
		s := &out[i]
		s.Lane = -1
		for l, st := range open {
			for len(st) > 0 && !st[len(st)-1].After(s.From) {
				st = st[:len(st)-1]
			}
			open[l] = st
			if s.Lane < 0 && (len(st) == 0 || !st[len(st)-1].Before(s.To)) {
				s.Lane = l
			}
		}
		if s.Lane < 0 {
			s.Lane = len(open)
			open = append(open, nil)
		}
		open[s.Lane] = append(open[s.Lane], s.To)
	}
	return out
}
