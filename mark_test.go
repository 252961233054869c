package memtrack

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// markStep is a mark event as the tests expect it.
type markStep struct {
	Action  HistoryAction
	Mark    string
	Span    uint64
	Size    int64
	Tracked int64
}

func markSteps(h History) []markStep {
	var out []markStep
	for _, e := range h.Events {
		out = append(out, markStep{e.Action, e.Mark, e.Span, e.Size, e.Tracked})
	}
	return out
}

func TestMarksInTheHistory(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	historyOn(t, d, 64)
	load, err := d.History().BeginSpan("load weights")
	require.NoError(t, err)
	w := allocOK(t)(d.Alloc(100))
	require.NoError(t, load.End())
	require.NoError(t, d.History().Mark("weights loaded"))
	pass, err := d.History().BeginSpan("pass")
	require.NoError(t, err)
	inner, err := d.History().BeginSpan("pass") // the same name again: another span
	require.NoError(t, err)
	require.NoError(t, w.Free())
	require.NoError(t, pass.End())
	require.NoError(t, inner.End())
	assert.Equal(t, "pass", inner.Name())

	h, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Equal(t, []markStep{
		{HistoryBegin, "load weights", 0, 0, 0},
		{HistoryAlloc, "", 0, 100, 100},
		{HistoryEnd, "load weights", 0, 0, 100},
		{HistoryMark, "weights loaded", 0, 0, 100},
		{HistoryBegin, "pass", 4, 0, 100},
		{HistoryBegin, "pass", 5, 0, 100},
		{HistoryFree, "", 0, 100, 0},
		{HistoryEnd, "pass", 4, 0, 0},
		{HistoryEnd, "pass", 5, 0, 0},
	}, markSteps(h), "a begin's Span is its Seq, its end's the same")
	for _, e := range h.Events {
		assert.Equal(t, e.Action.IsMark(), e.Mark != "", "%v", e.Action)
		assert.False(t, e.Action.Refused())
	}
	assert.Equal(t, "mark", HistoryMark.String())
	assert.Equal(t, "begin", HistoryBegin.String())
	assert.Equal(t, "end", HistoryEnd.String())
}

func TestMarksWithoutHistory(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	require.NoError(t, d.History().Mark("phase"))
	sp, err := d.History().BeginSpan("phase")
	require.NoError(t, err)
	assert.Nil(t, sp, "no history: no span")
	assert.NoError(t, sp.End(), "a nil span's End does nothing")
	assert.Equal(t, "", sp.Name())
	_, err = d.History().Snapshot()
	assert.ErrorIs(t, err, ErrHistoryNotRecorded)
	assert.Nil(t, tableOf(KindCUDA).historyOf(d.ordinal), "marks enable nothing")
}

// TestMarksAllocateNothing: without a history a mark and a span allocate
// nothing; with one, a mark whose name the history knows allocates
// nothing, and a span its Span.
func TestMarksAllocateNothing(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	mark := func() {
		if err := d.History().Mark("step"); err != nil {
			t.Fatal(err)
		}
	}
	span := func() {
		sp, err := d.History().BeginSpan("step")
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.End(); err != nil {
			t.Fatal(err)
		}
	}
	assert.Zero(t, testing.AllocsPerRun(100, mark), "Mark without a history")
	assert.Zero(t, testing.AllocsPerRun(100, span), "BeginSpan and End without a history")
	historyOn(t, d, 1024)
	mark() // the name's first use
	assert.Zero(t, testing.AllocsPerRun(100, mark), "Mark with a history")
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, span), "BeginSpan and End with a history: the Span")
}

func TestMarkRefused(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	for _, history := range []bool{false, true} {
		if history {
			historyOn(t, d, 64)
		}
		for _, tc := range []struct {
			name, mark string
			err        error
		}{
			{"empty", "", ErrInvalidArgument},
			{"too long", strings.Repeat("x", MaxMarkName+1), ErrInvalidArgument},
			{"not UTF-8", "load\xff", ErrInvalidArgument},
			{"control character", "load\nweights", ErrInvalidArgument},
		} {
			t.Run(fmt.Sprintf("history=%v/%s", history, tc.name), func(t *testing.T) {
				err := d.History().Mark(tc.mark)
				assert.ErrorIs(t, err, tc.err)
				assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), err.Error())
				sp, err := d.History().BeginSpan(tc.mark)
				assert.ErrorIs(t, err, tc.err)
				assert.Nil(t, sp)
			})
		}
	}
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Empty(t, h.Events, "a refused mark records nothing")
	assert.NoError(t, d.History().Mark(strings.Repeat("x", MaxMarkName)), "the longest name")

	assert.ErrorIs(t, Device{}.History().Mark("x"), ErrInvalidDevice)
	sp, err := Device{}.History().BeginSpan("x")
	assert.ErrorIs(t, err, ErrInvalidDevice)
	assert.Nil(t, sp)
}

func TestSpanEnd(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	historyOn(t, d, 64)
	sp, err := d.History().BeginSpan("once")
	require.NoError(t, err)
	require.NoError(t, sp.End())
	assert.ErrorIs(t, sp.End(), ErrInvalidArgument, "ended twice")

	old, err := d.History().BeginSpan("old ring")
	require.NoError(t, err)
	require.NoError(t, d.History().Enable(32)) // another size: a new ring
	assert.NoError(t, old.End())
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Empty(t, h.Events, "a span's end goes to the ring it began in only")

	gone, err := d.History().BeginSpan("gone")
	require.NoError(t, err)
	d.History().Disable()
	assert.NoError(t, gone.End(), "the history is off: nothing to record")
	_, err = d.History().Snapshot()
	assert.ErrorIs(t, err, ErrHistoryNotRecorded)
}

// TestMarkSlotReused: an allocation that takes the slot of a mark in a
// ring that wrapped is no mark.
func TestMarkSlotReused(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	historyOn(t, d, 2)
	require.NoError(t, d.History().Mark("a"))
	require.NoError(t, d.History().Mark("b"))
	b := allocOK(t)(d.Alloc(10))
	require.NoError(t, b.Free())
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Equal(t, []markStep{{HistoryAlloc, "", 0, 10, 10}, {HistoryFree, "", 0, 10, 0}}, markSteps(h))
}

func TestTooManyMarkNames(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	historyOn(t, d, 16)
	for i := range MaxMarkNames {
		require.NoError(t, d.History().Mark(fmt.Sprint("phase ", i)))
	}
	err := d.History().Mark("one more")
	assert.ErrorIs(t, err, ErrTooManyMarkNames)
	assert.Contains(t, err.Error(), `"one more"`)
	sp, err := d.History().BeginSpan("one more")
	assert.ErrorIs(t, err, ErrTooManyMarkNames)
	assert.Nil(t, sp)
	assert.NoError(t, d.History().Mark("phase 7"), "a name the history has")
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	last := h.Events[len(h.Events)-1]
	assert.Equal(t, "phase 7", last.Mark)
	require.NoError(t, d.History().Enable(32))
	assert.NoError(t, d.History().Mark("one more"), "a new ring starts with no names")
}

// TestMarksConcurrent: goroutines released at once mark and span with
// names new to the history; every event carries its own name.
func TestMarksConcurrent(t *testing.T) {
	const goroutines, rounds = 8, 200
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	historyOn(t, d, goroutines*rounds*3)
	var start, done sync.WaitGroup
	start.Add(1)
	for g := range goroutines {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			for i := range rounds {
				name := fmt.Sprintf("g%d/%d", g, i%10)
				if err := d.History().Mark(name); err != nil {
					t.Error(err)
					return
				}
				sp, err := d.History().BeginSpan(name)
				if err != nil {
					t.Error(err)
					return
				}
				if err := sp.End(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	start.Done()
	done.Wait()
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	require.Len(t, h.Events, goroutines*rounds*3)
	begins := map[uint64]string{}
	counts := map[string]int{}
	for _, e := range h.Events {
		require.True(t, e.Action.IsMark())
		counts[e.Mark]++
		switch e.Action {
		case HistoryBegin:
			begins[e.Seq] = e.Mark
		case HistoryEnd:
			assert.Equal(t, begins[e.Span], e.Mark, "an end pairs with the begin of its name")
		}
	}
	assert.Len(t, counts, goroutines*10)
	for name, n := range counts {
		assert.Equal(t, rounds/10*3, n, name)
	}
}

// BenchmarkMark measures a mark and a span (BeginSpan and End) on a device
// with and without a history (a ring of 1 Ki events).
func BenchmarkMark(b *testing.B) {
	_, ds := fakeCUDA(b, 1, 1<<20)
	d := ds[0]
	for _, history := range []bool{false, true} {
		if history {
			historyOn(b, d, 1<<10)
		}
		b.Run(fmt.Sprintf("history=%v/op=mark", history), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := d.History().Mark("prefill"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("history=%v/op=span", history), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sp, err := d.History().BeginSpan("prefill")
				if err != nil {
					b.Fatal(err)
				}
				if err := sp.End(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMarksTakeNoLock: without a history, marks complete while the locks
// of the device's tables are held; with one, a mark of a name the history
// knows completes while its names' lock is held too.
func TestMarksTakeNoLock(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	// finishes runs f on another goroutine and reports whether it returned
	// while the test holds its locks (a guard against a hang, not a wait
	// the test relies on: f takes no lock, so it returns at once).
	finishes := func(f func()) bool {
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	marks := func() {
		assert.NoError(t, d.History().Mark("phase"))
		sp, err := d.History().BeginSpan("phase")
		assert.NoError(t, err)
		assert.NoError(t, sp.End())
	}
	tab := &tables[KindCUDA]
	s := tab.p.Load()
	tab.mu.Lock()
	s.hooks.mu.Lock()
	ok := finishes(marks)
	s.hooks.mu.Unlock()
	tab.mu.Unlock()
	require.True(t, ok, "a mark without a history waited for a lock")

	historyOn(t, d, 64)
	marks() // the name's first use takes the names' lock
	h := s.historyOf(d.ordinal)
	h.marks.mu.Lock()
	tab.mu.Lock()
	s.hooks.mu.Lock()
	ok = finishes(marks)
	s.hooks.mu.Unlock()
	tab.mu.Unlock()
	h.marks.mu.Unlock()
	require.True(t, ok, "a mark with a history waited for a lock")
	got, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Len(t, got.Events, 6)
}

// FuzzMarkNames numbers the names of a sequence against a plain model: a
// name's number is one more than the names seen before it, the same every
// time, and past MaxMarkNames a new name is refused and changes nothing.
func FuzzMarkNames(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 3})
	f.Add([]byte{255, 255, 7})
	f.Add(append(bytes.Repeat([]byte{250}, MaxMarkNames+2), 3, 250)) // past MaxMarkNames
	f.Fuzz(func(t *testing.T, seq []byte) {
		var m markNames
		model := map[string]uint32{}
		for i, b := range seq {
			// Few names, so that repeats are common, and a name per
			// position past 200, so that long inputs pass MaxMarkNames.
			name := fmt.Sprint("n", b%16)
			if b >= 200 {
				name = fmt.Sprint("p", i, "/", b)
			}
			id, err := m.id(name, CPU())
			want, known := model[name]
			switch {
			case known:
				require.NoError(t, err)
				require.Equal(t, want, id)
			case len(model) == MaxMarkNames:
				require.ErrorIs(t, err, ErrTooManyMarkNames)
				require.Zero(t, id)
			default:
				require.NoError(t, err)
				want = uint32(len(model) + 1)
				require.Equal(t, want, id)
				model[name] = id
			}
			if err == nil {
				require.Equal(t, name, m.name(id))
			}
		}
		require.Equal(t, "", m.name(0))
		require.Equal(t, "", m.name(uint32(len(model)+1)))
	})
}
