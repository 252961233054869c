// Package trace writes memtrack's allocation histories
// ([memtrack.HistoryRecorder.Snapshot]) as Chrome Trace Event Format JSON, the
// format Perfetto UI (ui.perfetto.dev) and chrome://tracing open.
//
// Each device is a process of the trace, named "memtrack <device>", with a
// counter track "allocated" (the device's tracked bytes after each event),
// instant events for refused allocations ("limit", "out of memory",
// "failed") and for the highest figure of the history ("highest in the
// history": the device's peak, [memtrack.Device.MaxMemoryAllocated], only
// where the peak happened within the history, which a reset of the peak or
// a ring that let older events go can rule out), and a slice on a "gaps"
// track over each run of events the history lost, so that the counter's
// line across it is not taken for data.
//
// A history with events in categories ([memtrack.Category]) has a second
// counter, "by category", with one series per category and one,
// "uncategorised", for the rest of the tracked bytes, which viewers stack:
// each category's series is its tracked bytes after its latest event
// ([memtrack.HistoryEvent].CategoryTracked), so a category whose buffers
// predate the history and have had no event since counts as
// uncategorised until its first event.
//
// The history's marks ([memtrack.HistoryRecorder.Mark],
// [memtrack.HistoryRecorder.BeginSpan]) are on the thread "marks": a mark is
// an instant event named for it, and a span a slice ("X") from its begin to
// its end, named for it, which Perfetto draws as a bar. A span still open
// when the history was read reaches the history's last event (argument
// "open"), and one whose begin the ring let go starts at the history's
// first event ("begin_lost"). Spans that overlap without nesting go on
// threads "marks 2", "marks 3", ..., so that each thread's slices nest, as
// the format requires.
//
//	h, _ := dev.History().Snapshot()
//	f, _ := os.Create("memtrack.json")
//	trace.Write(f, h)
//	f.Close()
//
// docs/timeline.md says how to open the file.
package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/memtrack/memtrack"
)

// The threads of a device's process.
const (
	tidEvents = 1 // refusals and the highest figure
	tidGaps   = 2 // the gaps
	tidMarks  = 3 // the marks, and the first lane of spans; lane i is tidMarks+i (markEvents)
)

// Event is one event of the Trace Event Format, as Write writes it.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`            // "C" counter, "i" instant, "X" complete, "M" metadata
	Ts   float64        `json:"ts"`            // microseconds since the earliest history began
	Dur  float64        `json:"dur,omitempty"` // microseconds, for "X" (written for every "X", 0 too)
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	S    string         `json:"s,omitempty"` // the scope of an instant event
	Args map[string]any `json:"args,omitempty"`
}

// MarshalJSON writes the event as the format has it: "dur" is written for
// every complete event ("X"), a duration of 0 included, and left out of
// the others.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	if e.Ph != "X" {
		return json.Marshal(plain(e))
	}
	return json.Marshal(struct {
		plain
		Dur float64 `json:"dur"`
	}{plain(e), e.Dur})
}

// File is the JSON object Write writes: the events and their display unit.
type File struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit"`
}

// Events returns the trace events of the histories: for history i, process
// i+1. Times count from the earliest start of a recorded history; a
// history with no start (the one [memtrack.HistoryRecorder.Snapshot] returns
// with its error for a device that does not record) is an empty process.
func Events(hs ...memtrack.History) []Event {
	var origin time.Time
	for _, h := range hs {
		if !h.Start.IsZero() && (origin.IsZero() || h.Start.Before(origin)) {
			origin = h.Start
		}
	}
	us := func(t time.Time) float64 { return float64(t.Sub(origin).Nanoseconds()) / 1e3 }
	var evs []Event
	for i, h := range hs {
		pid := i + 1
		dev := h.Device.String()
		evs = append(evs,
			Event{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": "memtrack " + dev}},
			Event{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": pid}},
			Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tidEvents, Args: map[string]any{"name": "refusals and highest figure"}},
			Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tidGaps, Args: map[string]any{"name": "gaps"}},
		)
		high := -1 // the highest figure of the history
		byCat := categorised(h)
		evs = append(evs, markEvents(h, pid, us)...)
		for j, e := range h.Events {
			if e.Action.IsMark() {
				continue
			}
			if byCat != nil && e.Category != "" {
				byCat[e.Category] = e.CategoryTracked
			}
			if byCat != nil && !e.Action.Refused() {
				evs = append(evs, Event{Name: "by category", Ph: "C", Ts: us(e.Time), Pid: pid, Args: stacked(byCat, e.Tracked)})
			}
			if e.Action.Refused() {
				evs = append(evs, Event{Name: refusalName(e.Action), Cat: "memtrack", Ph: "i", S: "p", Ts: us(e.Time), Pid: pid, Tid: tidEvents,
					Args: map[string]any{"requested": e.Size, "allocated": e.Tracked, "seq": e.Seq}})
				continue
			}
			evs = append(evs, Event{Name: "allocated", Ph: "C", Ts: us(e.Time), Pid: pid, Args: map[string]any{"bytes": e.Tracked}})
			if high < 0 || e.Tracked > h.Events[high].Tracked {
				high = j
			}
		}
		if high >= 0 {
			e := h.Events[high]
			evs = append(evs, Event{Name: "highest in the history", Cat: "memtrack", Ph: "i", S: "t", Ts: us(e.Time), Pid: pid, Tid: tidEvents,
				Args: map[string]any{"allocated": e.Tracked, "seq": e.Seq}})
		}
		for _, g := range h.Gaps {
			// The events either side may share an instant, or be out of
			// order: their times are read before their numbers are taken.
			from, to := g.From, g.To
			if to.Before(from) {
				from, to = to, from
			}
			evs = append(evs, Event{Name: fmt.Sprintf("gap: %d events lost", g.Missing), Cat: "memtrack", Ph: "X", Ts: us(from), Dur: float64(to.Sub(from).Nanoseconds()) / 1e3,
				Pid: pid, Tid: tidGaps, Args: map[string]any{"missing": g.Missing, "after_seq": g.After, "before_seq": g.Before}})
		}
	}
	return evs
}

// categorised returns an empty map of the categories' bytes if any event of
// h is in a category, and nil if none is.
func categorised(h memtrack.History) map[string]int64 {
	for _, e := range h.Events {
		if e.Category != "" {
			return map[string]int64{}
		}
	}
	return nil
}

// stacked returns the series of the "by category" counter: each category's
// bytes, and the rest of tracked as uncategorised (at least 0).
func stacked(byCat map[string]int64, tracked int64) map[string]any {
	args := make(map[string]any, len(byCat)+1)
	rest := tracked
	for c, n := range byCat {
		args[c] = n
		rest -= n
	}
	args[memtrack.Uncategorised] = max(rest, 0)
	return args
}

func refusalName(a memtrack.HistoryAction) string {
	switch a {
	case memtrack.HistoryLimit:
		return "limit"
	case memtrack.HistoryOutOfMemory:
		return "out of memory"
	}
	return "failed"
}

// Write writes the histories to w as one Trace Event Format JSON object
// ([File]), for Perfetto UI or chrome://tracing.
func Write(w io.Writer, hs ...memtrack.History) error {
	bw := bufio.NewWriter(w)
	if _, err := io.WriteString(bw, `{"displayTimeUnit":"ms","traceEvents":[`); err != nil {
		return fmt.Errorf("memtrack: writing the trace: %w", err)
	}
	enc := json.NewEncoder(bw)
	for i, e := range Events(hs...) {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("memtrack: writing the trace: %w", err)
		}
	}
	bw.WriteString("]}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("memtrack: writing the trace: %w", err)
	}
	return nil
}
