package spans

import (
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
)

// laid is a span as the tests expect it: times in ms from the start.
type laid struct {
	Name            string
	From, To        int
	Lane            int
	Open, BeginLost bool
}

func TestPairer(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	begin := func(seq uint64, ms int, name string) memtrack.HistoryEvent {
		return memtrack.HistoryEvent{Seq: seq, Time: at(ms), Action: memtrack.HistoryBegin, Mark: name, Span: seq}
	}
	end := func(seq uint64, ms int, name string, span uint64) memtrack.HistoryEvent {
		return memtrack.HistoryEvent{Seq: seq, Time: at(ms), Action: memtrack.HistoryEnd, Mark: name, Span: span}
	}
	alloc := func(seq uint64, ms int) memtrack.HistoryEvent {
		return memtrack.HistoryEvent{Seq: seq, Time: at(ms), Action: memtrack.HistoryAlloc, Size: 1}
	}
	for _, tc := range []struct {
		name   string
		events []memtrack.HistoryEvent
		want   []laid
	}{
		{"none", []memtrack.HistoryEvent{alloc(0, 1)}, nil},
		{"nested", []memtrack.HistoryEvent{begin(0, 1, "a"), begin(1, 2, "b"), end(2, 3, "b", 1), end(3, 4, "a", 0)},
			[]laid{{"a", 1, 4, 0, false, false}, {"b", 2, 3, 0, false, false}}},
		{"one after the other", []memtrack.HistoryEvent{begin(0, 1, "a"), end(1, 2, "a", 0), begin(2, 2, "b"), end(3, 3, "b", 2)},
			[]laid{{"a", 1, 2, 0, false, false}, {"b", 2, 3, 0, false, false}}},
		{"overlapping", []memtrack.HistoryEvent{begin(0, 1, "a"), begin(1, 2, "b"), end(2, 3, "a", 0), end(3, 4, "b", 1)},
			[]laid{{"a", 1, 3, 0, false, false}, {"b", 2, 4, 1, false, false}}},
		{"open", []memtrack.HistoryEvent{begin(0, 1, "a"), alloc(1, 5)},
			[]laid{{"a", 1, 5, 0, true, false}}},
		{"begin lost", []memtrack.HistoryEvent{alloc(7, 2), end(8, 3, "a", 1)},
			[]laid{{"a", 2, 3, 0, false, true}}},
		{"same name twice at once", []memtrack.HistoryEvent{begin(0, 1, "a"), begin(1, 1, "a"), end(2, 2, "a", 1), end(3, 3, "a", 0)},
			[]laid{{"a", 1, 3, 0, false, false}, {"a", 1, 2, 0, false, false}}},
		{"end before begin in time", []memtrack.HistoryEvent{begin(0, 2, "a"), end(1, 1, "a", 0)},
			[]laid{{"a", 2, 2, 0, false, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Pairer
			for _, e := range tc.events {
				p.Add(e)
			}
			var got []laid
			for _, s := range p.Spans() {
				got = append(got, laid{s.Name, int(s.From.Sub(start) / time.Millisecond), int(s.To.Sub(start) / time.Millisecond), s.Lane, s.Open, s.BeginLost})
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
