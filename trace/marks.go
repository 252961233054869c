package trace

import (
	"fmt"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/spans"
)

// markEvents returns the trace events of the history's marks and spans,
// on the marks threads of process pid; us converts a time.
func markEvents(h memtrack.History, pid int, us func(time.Time) float64) []Event {
	var evs []Event
	var pairs spans.Pairer
	threads := 0
	for _, e := range h.Events {
		pairs.Add(e)
		if e.Action == memtrack.HistoryMark {
			threads = 1
			evs = append(evs, Event{Name: e.Mark, Cat: "memtrack.mark", Ph: "i", S: "t", Ts: us(e.Time), Pid: pid, Tid: tidMarks,
				Args: map[string]any{"allocated": e.Tracked, "seq": e.Seq}})
		}
	}
	for _, s := range pairs.Spans() {
		args := map[string]any{"begin_seq": s.Begin}
		if s.Open {
			args["open"] = true
		} else {
			args["end_seq"] = s.End
		}
		if s.BeginLost {
			args["begin_lost"] = true
		}
		evs = append(evs, Event{Name: s.Name, Cat: "memtrack.span", Ph: "X", Ts: us(s.From), Dur: float64(s.To.Sub(s.From).Nanoseconds()) / 1e3,
			Pid: pid, Tid: tidMarks + s.Lane, Args: args})
		threads = max(threads, s.Lane+1)
	}
	meta := make([]Event, 0, threads+len(evs))
	for l := range threads {
		name := "marks"
		if l > 0 {
			name = fmt.Sprintf("marks %d", l+1)
		}
		meta = append(meta, Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tidMarks + l, Args: map[string]any{"name": name}})
	}
	return append(meta, evs...)
}
