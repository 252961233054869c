package trace

import (
	"fmt"
	"slices"
	"time"

	"github.com/memtrack/memtrack"
)

// span is one span of a history, as markEvents draws it.
type span struct {
	name      string
	from, to  time.Time
	begin     uint64 // the Seq of its begin
	end       uint64 // the Seq of its end, where it ended
	open      bool   // no end in the history
	beginLost bool   // its begin is not in the history
}

// spans pairs the begins and ends of the history's spans: one span per
// begin, in the order of the begins, then one per end whose begin the
// history does not hold (those first, in the order of their ends).
func spans(h memtrack.History) []span {
	if len(h.Events) == 0 {
		return nil
	}
	first, last := h.Events[0].Time, h.Events[len(h.Events)-1].Time
	var out []span
	at := map[uint64]int{} // by the begin's Seq
	for _, e := range h.Events {
		switch e.Action {
		case memtrack.HistoryBegin:
			at[e.Span] = len(out)
			out = append(out, span{name: e.Mark, from: e.Time, to: last, begin: e.Span, open: true})
		case memtrack.HistoryEnd:
			if i, ok := at[e.Span]; ok {
				out[i].to, out[i].end, out[i].open = e.Time, e.Seq, false
				continue
			}
			out = append(out, span{name: e.Mark, from: first, to: e.Time, begin: e.Span, end: e.Seq, beginLost: true})
		}
	}
	for i := range out {
		if out[i].to.Before(out[i].from) { // times are read before numbers are taken
			out[i].to = out[i].from
		}
	}
	slices.SortStableFunc(out, func(a, b span) int { return a.from.Compare(b.from) })
	return out
}

// lanes gives each span (sorted by start) a lane where it nests within
// the spans before it: the first lane whose spans still open at its start
// all contain it.
func lanes(ss []span) []int {
	var open [][]time.Time // per lane, the ends of its open spans, innermost last
	out := make([]int, len(ss))
	for i, s := range ss {
		lane := -1
		for l := range open {
			st := open[l]
			for len(st) > 0 && !st[len(st)-1].After(s.from) {
				st = st[:len(st)-1]
			}
			open[l] = st
			if lane < 0 && (len(st) == 0 || !st[len(st)-1].Before(s.to)) {
				lane = l
			}
		}
		if lane < 0 {
			lane = len(open)
			open = append(open, nil)
		}
		open[lane] = append(open[lane], s.to)
		out[i] = lane
	}
	return out
}

// markEvents returns the trace events of the history's marks and spans,
// on the marks threads of process pid; us converts a time.
func markEvents(h memtrack.History, pid int, us func(time.Time) float64) []Event {
	var evs []Event
	marks := false
	for _, e := range h.Events {
		if e.Action == memtrack.HistoryMark {
			marks = true
			evs = append(evs, Event{Name: e.Mark, Cat: "memtrack.mark", Ph: "i", S: "t", Ts: us(e.Time), Pid: pid, Tid: tidMarks,
				Args: map[string]any{"allocated": e.Tracked, "seq": e.Seq}})
		}
	}
	ss := spans(h)
	ls := lanes(ss)
	threads := 0
	for i, s := range ss {
		args := map[string]any{"begin_seq": s.begin}
		if !s.open {
			args["end_seq"] = s.end
		}
		if s.open {
			args["open"] = true
		}
		if s.beginLost {
			args["begin_lost"] = true
		}
		evs = append(evs, Event{Name: s.name, Cat: "memtrack.span", Ph: "X", Ts: us(s.from), Dur: float64(s.to.Sub(s.from).Nanoseconds()) / 1e3,
			Pid: pid, Tid: tidMarks + ls[i], Args: args})
		threads = max(threads, ls[i]+1)
	}
	if marks {
		threads = max(threads, 1)
	}
	var meta []Event
	for l := range threads {
		name := "marks"
		if l > 0 {
			name = fmt.Sprintf("marks %d", l+1)
		}
		meta = append(meta, Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tidMarks + l, Args: map[string]any{"name": name}})
	}
	return append(meta, evs...)
}
