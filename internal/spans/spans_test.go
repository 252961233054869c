package spans

import (
	"testing"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// FuzzPairer pairs begins and ends in the order the input gives them,
// with times that may repeat, and checks the spans against a plain model:
// one span per begin, ended by its own end where the input has one, one
// per end without its begin, and within each lane any two spans either
// nest or do not overlap.
func FuzzPairer(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 2, 3})
	f.Add([]byte{0, 4, 0, 1, 5, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		start := time.Now()
		var p Pairer
		var open []uint64             // begun, not ended, by Seq
		ended := map[uint64]uint64{}  // begin Seq -> end Seq
		lostEnds := map[uint64]bool{} // end Seq of an end without its begin
		begins := map[uint64]bool{}
		ms := 0
		for i, op := range ops {
			seq := uint64(i)
			ms += int(op>>4) % 3 // times repeat, and move on
			at := start.Add(time.Duration(ms) * time.Millisecond)
			switch op % 3 {
			case 0:
				begins[seq] = true
				open = append(open, seq)
				p.Add(memtrack.HistoryEvent{Seq: seq, Time: at, Action: memtrack.HistoryBegin, Mark: "s", Span: seq})
			case 1: // ends an open span, the one the input picks
				if len(open) == 0 {
					continue
				}
				k := int(op>>2) % len(open)
				b := open[k]
				open = append(open[:k], open[k+1:]...)
				ended[b] = seq
				p.Add(memtrack.HistoryEvent{Seq: seq, Time: at, Action: memtrack.HistoryEnd, Mark: "s", Span: b})
			case 2: // an end whose begin the ring let go
				lostEnds[seq] = true
				p.Add(memtrack.HistoryEvent{Seq: seq, Time: at, Action: memtrack.HistoryEnd, Mark: "s", Span: 1 << 40})
			}
		}
		got := p.Spans()
		require.Len(t, got, len(begins)+len(lostEnds))
		for _, s := range got {
			require.False(t, s.To.Before(s.From))
			switch {
			case s.BeginLost:
				require.True(t, lostEnds[s.End], "%+v", s)
			default:
				require.True(t, begins[s.Begin])
				end, ok := ended[s.Begin]
				require.Equal(t, !ok, s.Open)
				if ok {
					require.Equal(t, end, s.End)
				}
			}
		}
		for i, a := range got {
			for _, b := range got[i+1:] {
				if a.Lane != b.Lane {
					continue
				}
				disjoint := !a.To.After(b.From) || !b.To.After(a.From)
				nested := !a.From.After(b.From) && !a.To.Before(b.To) || !b.From.After(a.From) && !b.To.Before(a.To)
				require.True(t, disjoint || nested, "lane %d: %+v and %+v overlap", a.Lane, a, b)
			}
		}
	})
}

// TestPairerMax: a pairer with Max keeps the open spans and the Max ended
// spans begun last, however many it is given.
func TestPairerMax(t *testing.T) {
	start := time.Now()
	p := Pairer{Max: 10}
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Millisecond) }
	p.Add(memtrack.HistoryEvent{Seq: 0, Time: at(0), Action: memtrack.HistoryBegin, Mark: "long", Span: 0})
	seq := uint64(1)
	for i := range 1000 {
		p.Add(memtrack.HistoryEvent{Seq: seq, Time: at(i + 1), Action: memtrack.HistoryBegin, Mark: "step", Span: seq})
		p.Add(memtrack.HistoryEvent{Seq: seq + 1, Time: at(i + 1), Action: memtrack.HistoryEnd, Mark: "step", Span: seq})
		seq += 2
		assert.LessOrEqual(t, len(p.spans), 2*p.Max)
	}
	p.Add(memtrack.HistoryEvent{Seq: seq, Time: at(2000), Action: memtrack.HistoryEnd, Mark: "long", Span: 0})
	got := p.Spans()
	require.GreaterOrEqual(t, len(got), 11)
	assert.Equal(t, "long", got[0].Name, "the open span is kept, and ended by its end")
	assert.False(t, got[0].Open)
	assert.Equal(t, 1000-(len(got)-1), p.Dropped)
	last := got[len(got)-1]
	assert.Equal(t, seq-2, last.Begin, "the newest are kept")
}
