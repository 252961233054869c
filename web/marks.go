package web

import (
	"time"

	"github.com/memtrack/memtrack"
)

// MaxMarks is the most marks and spans a device's plot gets: the newest
// (and the spans still open). A read keeps about twice as many of each, the
// spans still open besides, however many the history holds.
const MaxMarks = 1000

// Mark is one of the history's marks (memtrack.HistoryRecorder.Mark), drawn as a
// labelled line, or one of its spans (memtrack.HistoryRecorder.BeginSpan), drawn as
// a labelled band from T to End. The spans of one Lane nest; a span whose
// begin the ring let go (BeginLost) starts at the history's first event,
// and one not ended when the history was read (Open) reaches its last.
type Mark struct {
	Name      string  `json:"name"`
	T         float64 `json:"t"`
	Span      bool    `json:"span"`
	End       float64 `json:"end,omitempty"`
	Lane      int     `json:"lane,omitempty"`
	Open      bool    `json:"open,omitempty"`
	BeginLost bool    `json:"beginLost,omitempty"`
}

// instant is a mark that is no span, as read.
type instant struct {
	t    time.Time
	name string
}

// mark takes a mark event: a span's begin and end go to the pairer (add
// gave it every event), an instant is kept. A mark is no point: where it
// follows the previous event without a gap, the next event follows it.
func (p *plotter) mark(e memtrack.HistoryEvent) {
	p.markEvents++
	if e.Action == memtrack.HistoryMark {
		p.instants = append(p.instants, instant{t: e.Time, name: e.Mark})
		if len(p.instants) >= 2*MaxMarks { // keep the newest: memory for what is sent
			n := copy(p.instants, p.instants[len(p.instants)-MaxMarks:])
			p.instantsDropped += len(p.instants) - n
			p.instants = p.instants[:n]
		}
	}
	if p.started && e.Seq == p.prev.Seq+1 {
		p.prev.Seq = e.Seq
	}
}

// markList returns the marks and spans, the oldest first (by their start),
// at most MaxMarks of them, the newest, and how many it left out; ms
// converts a time.
func (p *plotter) markList(ms func(time.Time) float64) ([]Mark, int) {
	ss := p.pairs.Spans()
	out := make([]Mark, 0, len(ss)+len(p.instants))
	i := 0
	for _, s := range ss {
		for ; i < len(p.instants) && p.instants[i].t.Before(s.From); i++ {
			out = append(out, Mark{Name: p.instants[i].name, T: ms(p.instants[i].t)})
		}
		out = append(out, Mark{Name: s.Name, T: ms(s.From), Span: true, End: ms(s.To), Lane: s.Lane, Open: s.Open, BeginLost: s.BeginLost})
	}
	for ; i < len(p.instants); i++ {
		out = append(out, Mark{Name: p.instants[i].name, T: ms(p.instants[i].t)})
	}
	dropped := p.pairs.Dropped + p.instantsDropped
	if len(out) == 0 {
		return nil, dropped
	}
	left := max(len(out)-MaxMarks, 0)
	return out[left:], left + dropped
}
