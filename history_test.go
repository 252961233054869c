package memtrack

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// historyOn enables a history of n events on d for the test and disables it
// when the test ends.
func historyOn(t testing.TB, d Device, n int) {
	t.Helper()
	require.NoError(t, d.History().Enable(n))
	t.Cleanup(d.History().Disable)
}

// step is an event as the tests expect it: what the clock and the stacks
// leave out.
type step struct {
	Seq     uint64
	Action  HistoryAction
	Size    int64
	Current int64
}

func steps(h History) []step {
	out := make([]step, len(h.Events))
	for i, e := range h.Events {
		out[i] = step{e.Seq, e.Action, e.Size, e.Tracked}
	}
	return out
}

func TestEnableMemoryHistoryErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Device
		n    int
		err  error
	}{
		{"no entries", CPU(), 0, ErrInvalidArgument},
		{"negative", CPU(), -1, ErrInvalidArgument},
		{"past the maximum", CPU(), MaxHistoryEntries + 1, ErrInvalidArgument},
		{"bad kind", Device{kind: numKinds}, 8, ErrInvalidDevice},
		{"bad ordinal", Device{kind: KindCPU, ordinal: 3}, 8, ErrInvalidOrdinal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.d.History().Enable(tc.n), tc.err)
			assert.Nil(t, openTable(KindCPU).hooks.vals.Load(), "the CPU table stays off")
		})
	}
	_, err := CPU().History().Snapshot()
	assert.ErrorIs(t, err, ErrHistoryNotRecorded)
	_, err = Device{kind: numKinds}.History().Snapshot()
	assert.ErrorIs(t, err, ErrInvalidDevice)
}

func TestHistoryEnableDisable(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<20)
	tab := openTable(KindCUDA)
	require.Nil(t, tab.hooks.vals.Load(), "off before the test enables it")

	require.NoError(t, ds[1].History().Enable(4))
	t.Cleanup(ds[1].History().Disable)
	assert.Nil(t, tab.historyOf(0))
	h := tab.historyOf(1)
	require.NotNil(t, h)
	b := allocOK(t)(ds[1].Alloc(10))

	require.NoError(t, ds[1].History().Enable(4))
	assert.Same(t, h, tab.historyOf(1), "the same size keeps the ring")
	require.NoError(t, ds[1].History().Enable(5))
	assert.NotSame(t, h, tab.historyOf(1), "another size starts a new one")
	hist, err := ds[1].History().Snapshot()
	require.NoError(t, err)
	assert.Empty(t, hist.Events)
	assert.Equal(t, 5, hist.MaxEntries)

	ds[1].History().Disable()
	assert.Nil(t, tab.hooks.vals.Load(), "no device records: one nil load again")
	require.NoError(t, b.Free(), "a buffer allocated while recording frees after")
	ds[1].History().Disable() // off stays off
	_, err = ds[1].History().Snapshot()
	assert.ErrorIs(t, err, ErrHistoryNotRecorded)
}

func TestHistoryRecordsEveryEvent(t *testing.T) {
	f, ds := fakeCUDA(t, 2, 1000)
	d := ds[0]
	historyOn(t, d, 16)
	other := allocOK(t)(ds[1].Alloc(7)) // another device's events stay off d's history
	defer other.Free()

	before := time.Now()
	a := allocOK(t)(d.Alloc(100))
	b := allocOK(t)(d.Alloc(200))
	require.NoError(t, a.Free())
	require.NoError(t, d.SetMemoryLimit(500))
	_, err := d.Alloc(400) // over the limit: refused before the backend
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.NoError(t, d.SetMemoryLimit(0))
	_, err = d.Alloc(900) // past the fake device's capacity
	require.ErrorIs(t, err, ErrOutOfMemory)
	f.mu.Lock()
	f.allocErrs = []error{&BackendError{Op: "alloc", Err: errFakeDriver}}
	f.mu.Unlock()
	_, err = d.Alloc(5) // the driver fails otherwise
	require.ErrorIs(t, err, errFakeDriver)
	require.NoError(t, b.Free())
	after := time.Now()

	h, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Equal(t, []step{
		{0, HistoryAlloc, 100, 100},
		{1, HistoryAlloc, 200, 300},
		{2, HistoryFree, 100, 200},
		{3, HistoryLimit, 400, 200},
		{4, HistoryOutOfMemory, 900, 200},
		{5, HistoryFailed, 5, 200},
		{6, HistoryFree, 200, 0},
	}, steps(h))
	assert.Equal(t, d, h.Device)
	assert.Equal(t, 16, h.MaxEntries)
	assert.Empty(t, h.Gaps)
	assert.Zero(t, h.Overwritten)
	assert.Zero(t, h.Lost)
	last := h.Start
	for _, e := range h.Events {
		assert.False(t, e.Time.Before(before) || e.Time.After(after), "event %d at %v, outside [%v, %v]", e.Seq, e.Time, before, after)
		assert.False(t, e.Time.Before(last), "event %d goes back in time", e.Seq)
		last = e.Time
		assert.Nil(t, e.Stack, "sites are not recorded")
		assert.Zero(t, e.Stream)
	}
	assert.Equal(t, d.MemoryStats().FailedAllocs, int64(3), "each refusal is also counted")
}

func TestHistoryRefusalKinds(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1000)
	historyOn(t, ds[0], 8)
	tab := openTable(KindCUDA)
	_, rec, err := ds[0].lookup(use)
	require.NoError(t, err)
	for _, tc := range []struct {
		err  error
		want HistoryAction
	}{
		{nil, HistoryLimit},
		{&tracker.LimitError{Requested: 1, Tracked: 2, Limit: 2}, HistoryLimit},
		{fmt.Errorf("memtrack: %w", tracker.ErrCapacity), HistoryOutOfMemory},
		{&OutOfMemoryError{Reason: "device full"}, HistoryOutOfMemory},
		{&BackendError{Op: "alloc"}, HistoryFailed},
		{errors.New("anything else"), HistoryFailed},
	} {
		tab.historyOf(0).refused(request{size: 1}, ledger{rec: rec}, tc.err)
		h, err := ds[0].History().Snapshot()
		require.NoError(t, err)
		assert.Equal(t, tc.want, h.Events[len(h.Events)-1].Action, "%v", tc.err)
		assert.True(t, tc.want.Refused())
	}
	assert.False(t, HistoryAlloc.Refused())
	assert.False(t, HistoryFree.Refused())
	assert.Equal(t, "oom", HistoryOutOfMemory.String())
	assert.Equal(t, "action(9)", HistoryAction(9).String())
}

func TestHistoryWrapsAround(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	historyOn(t, d, 4)
	for i := range int64(5) { // 10 events: 0-5 go, 6-9 stay
		b := allocOK(t)(d.Alloc(i + 1))
		require.NoError(t, b.Free())
	}
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Equal(t, []step{
		{6, HistoryAlloc, 4, 4},
		{7, HistoryFree, 4, 0},
		{8, HistoryAlloc, 5, 5},
		{9, HistoryFree, 5, 0},
	}, steps(h))
	assert.Equal(t, uint64(6), h.Overwritten)
	assert.Zero(t, h.Lost)
	assert.Empty(t, h.Gaps)
}

func TestHistoryCarriesSites(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	require.NoError(t, d.Sites().SetRate(1)) // every allocation: exact stacks
	require.NoError(t, d.Sites().Enable(8))
	t.Cleanup(d.Sites().Disable)
	historyOn(t, d, 8)
	a := allocOK(t)(allocFromA(d, 10))
	b := allocOK(t)(allocFromB(d, 20))
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	require.Len(t, snap.Sites, 2)
	freeAll(t, a, b)

	h, err := d.History().Snapshot()
	require.NoError(t, err)
	require.Len(t, h.Events, 4)
	wantB, wantA := snap.Sites[0].Stack, snap.Sites[1].Stack // the largest first
	assert.Equal(t, []string{"allocFromA", "allocFromB", "allocFromA", "allocFromB"}, func() []string {
		var fs []string
		for _, e := range h.Events {
			switch {
			case slices.Equal(e.Stack, wantA):
				fs = append(fs, "allocFromA")
			case slices.Equal(e.Stack, wantB):
				fs = append(fs, "allocFromB")
			default:
				fs = append(fs, fmt.Sprint(e.Stack))
			}
		}
		return fs
	}())
	assert.Contains(t, frameOf(h.Events[0].Stack[0]), "allocFromA")
	for _, e := range h.Events {
		assert.Equal(t, e.Size, e.SiteBytes, "at rate 1 an event adds its size to its site")
	}

	// Sampled: an event adds its scaled bytes, what its site's figure gained.
	require.NoError(t, d.Sites().SetRate(1<<20))
	var c *Buffer
	for c == nil || siteOf(&c.allocation) == nil {
		if c != nil {
			require.NoError(t, c.Free())
		}
		c = allocOK(t)(allocFromA(d, 4096))
	}
	snap, err = d.Sites().Snapshot()
	require.NoError(t, err)
	require.NoError(t, c.Free())
	h, err = d.History().Snapshot()
	require.NoError(t, err)
	alloc, free := h.Events[len(h.Events)-2], h.Events[len(h.Events)-1]
	assert.Equal(t, snap.Sites[0].Bytes, alloc.SiteBytes, "the site's bytes are the one sampled buffer's")
	assert.Greater(t, alloc.SiteBytes, alloc.Size)
	assert.Equal(t, alloc.SiteBytes, free.SiteBytes, "the free takes back what the allocation added")
}

// TestHistoryConcurrentWriters starts writers together on a barrier and
// checks, once they are done, every event: in a ring large enough for all,
// none is lost; in a small one, exactly the newest fill it (or are counted
// lost).
func TestHistoryConcurrentWriters(t *testing.T) {
	const writers = 8
	pairs := 500
	if testing.Short() {
		pairs = 200
	}
	for _, tc := range []struct {
		name string
		n    int
	}{
		{"all fit", writers * pairs * 2},
		{"wraps", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ds := fakeCUDA(t, 1, 1<<40)
			d := ds[0]
			historyOn(t, d, tc.n)
			var start, done sync.WaitGroup
			start.Add(1)
			for w := range writers {
				done.Add(1)
				go func() {
					defer done.Done()
					start.Wait()
					for range pairs {
						b, err := d.Alloc(int64(w + 1))
						if !assert.NoError(t, err) {
							return
						}
						assert.NoError(t, b.Free())
					}
				}()
			}
			start.Done()
			done.Wait()

			h, err := d.History().Snapshot()
			require.NoError(t, err)
			total := uint64(writers * pairs * 2)
			first := total - min(total, uint64(tc.n))
			assert.Equal(t, first, h.Overwritten)
			// Each seq once, in order, within the ring's window; every
			// seq of the window missing is one lost event.
			missing := uint64(tc.n) - uint64(len(h.Events))
			assert.LessOrEqual(t, missing, h.Lost)
			count := map[step]int{}
			for i, e := range h.Events {
				require.GreaterOrEqual(t, e.Seq, first)
				require.Less(t, e.Seq, total)
				if i > 0 {
					require.Greater(t, e.Seq, h.Events[i-1].Seq)
				}
				require.Contains(t, []HistoryAction{HistoryAlloc, HistoryFree}, e.Action)
				require.True(t, e.Size >= 1 && e.Size <= writers, "size %d", e.Size)
				assert.True(t, e.Tracked >= 0 && e.Tracked <= writers*(writers+1)/2, "figure %d", e.Tracked)
				count[step{Action: e.Action, Size: e.Size}]++
			}
			if tc.n >= int(total) {
				assert.Zero(t, h.Lost)
				assert.Len(t, h.Events, int(total))
				assert.Empty(t, h.Gaps)
				for w := range writers {
					assert.Equal(t, pairs, count[step{Action: HistoryAlloc, Size: int64(w + 1)}])
					assert.Equal(t, pairs, count[step{Action: HistoryFree, Size: int64(w + 1)}])
				}
			}
			var gapped uint64
			for _, g := range h.Gaps {
				gapped += g.Missing
			}
			if len(h.Events) > 0 {
				assert.Equal(t, missing, gapped+(h.Events[0].Seq-first)+(total-1-h.Events[len(h.Events)-1].Seq))
			}
		})
	}
}

// TestHistoryReadWhileWriting reads the history over and over while
// writers run: every read is ordered and consistent, and once the writers
// are done a read finds every event of the last window.
func TestHistoryReadWhileWriting(t *testing.T) {
	const writers = 4
	pairs := 3000
	if testing.Short() {
		pairs = 300
	}
	_, ds := fakeCUDA(t, 1, 1<<40)
	d := ds[0]
	historyOn(t, d, 256)
	var start, done sync.WaitGroup
	start.Add(1)
	for w := range writers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			for range pairs {
				b, err := d.Alloc(int64(w + 1))
				if assert.NoError(t, err) {
					assert.NoError(t, b.Free())
				}
			}
		}()
	}
	stop := make(chan struct{})
	reads := make(chan int)
	go func() {
		n := 0
		defer func() { reads <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			h, err := d.History().Snapshot()
			if !assert.NoError(t, err) {
				return
			}
			n++
			for i := 1; i < len(h.Events); i++ {
				a, b := h.Events[i-1], h.Events[i]
				if !assert.Greater(t, b.Seq, a.Seq) {
					return
				}
				if b.Seq != a.Seq+1 && !assert.True(t, slices.ContainsFunc(h.Gaps, func(g HistoryGap) bool { return g.After == a.Seq && g.Before == b.Seq })) {
					return
				}
			}
			for _, e := range h.Events {
				if !assert.True(t, e.Action == HistoryAlloc || e.Action == HistoryFree) || !assert.True(t, e.Size >= 1 && e.Size <= writers) {
					return
				}
			}
		}
	}()
	start.Done()
	done.Wait()
	close(stop)
	t.Logf("%d reads while writing", <-reads)

	h, err := d.History().Snapshot()
	require.NoError(t, err)
	require.NotEmpty(t, h.Events)
	// A writer drops its event where the reader holds the slot it needs
	// (counted in Lost): the first or last events of the ring's window may
	// be among them, and are then neither events nor a gap, which lies
	// between two events.
	last := uint64(writers*pairs*2 - 1)
	leading := h.Events[0].Seq - (last - 255)
	trailing := last - h.Events[len(h.Events)-1].Seq
	assert.LessOrEqual(t, leading+trailing, h.Lost, "the events missing at the window's ends were dropped by their writers")
	assert.Equal(t, 256, len(h.Events)+int(countMissing(h)+leading+trailing))
	assert.Equal(t, int64(0), d.MemoryAllocated())
}

// countMissing counts the events of the window that a history lacks.
func countMissing(h History) uint64 {
	var n uint64
	for _, g := range h.Gaps {
		n += g.Missing
	}
	if len(h.Events) > 0 {
		n += h.Events[0].Seq - h.Overwritten
	}
	return n
}

// BenchmarkHistoryRecord measures the recording of one event alone (a
// pair records two), in a ring of 1 Ki events (in cache) and of 1 Mi
// events (64 MiB: a cache miss an event), serially and from every P.
func BenchmarkHistoryRecord(b *testing.B) {
	var rec tracker.Record
	l, a := ledger{rec: &rec}, &allocation{size: 64}
	for _, n := range []int{1 << 10, 1 << 20} {
		h := newHistory(n)
		b.Run(fmt.Sprintf("ring=%d/mode=serial", n), func(b *testing.B) {
			for b.Loop() {
				h.allocated(a, l, DefaultStream, 0, true)
			}
		})
		b.Run(fmt.Sprintf("ring=%d/mode=parallel", n), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					h.allocated(a, l, DefaultStream, 0, true)
				}
			})
		})
	}
}

// TestHistoryConcurrentReaders: readers of a history that no writer
// touches all read every event, whatever the other readers do at the same
// moment: a slot another reader is copying is not a gap.
func TestHistoryConcurrentReaders(t *testing.T) {
	const events, readers, reads = 20000, 4, 10
	_, ds := fakeCUDA(t, 1, 1<<40)
	d := ds[0]
	historyOn(t, d, 1<<15)
	for range events / 2 {
		b, err := d.Alloc(1)
		require.NoError(t, err)
		require.NoError(t, b.Free())
	}
	var start, done sync.WaitGroup
	start.Add(1)
	for range readers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			for range reads {
				h, err := d.History().Snapshot()
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, events, len(h.Events), "events read")
				assert.Equal(t, 0, len(h.Gaps), "gaps reported")
				assert.Zero(t, h.Lost)
			}
		}()
	}
	start.Done()
	done.Wait()
}

// TestRangeMemoryHistory: History().Range gives the events
// History().Snapshot returns, with the same gaps and counts, stops where f
// says, and allocates nothing for the events it reads.
func TestRangeMemoryHistory(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<40)
	d := ds[0]
	_, err := d.History().Range(func(HistoryEvent) bool { return true })
	assert.ErrorIs(t, err, ErrHistoryNotRecorded)
	historyOn(t, d, 4096)
	_, err = d.History().Range(nil)
	assert.ErrorIs(t, err, ErrInvalidArgument)

	for i := range 3000 {
		b, err := d.Alloc(int64(i%7 + 1))
		require.NoError(t, err)
		require.NoError(t, b.Free())
	}
	// The gaps a read leaves where a reader held a slot are the ring's
	// (internal/histring: TestHistoryDroppedWriterIsAGap); Snapshot and
	// Range both read through history.each, which converts them.
	want, err := d.History().Snapshot()
	require.NoError(t, err)
	var events []HistoryEvent
	got, err := d.History().Range(func(e HistoryEvent) bool { events = append(events, e); return true })
	require.NoError(t, err)
	assert.Nil(t, got.Events)
	got.Events = events
	assert.Equal(t, want, got)

	var n int
	part, err := d.History().Range(func(HistoryEvent) bool { n++; return n < 10 })
	require.NoError(t, err)
	assert.Equal(t, 10, n, "stops where f says")
	assert.Empty(t, part.Gaps)

	var sum int64
	allocs := testing.AllocsPerRun(5, func() {
		d.History().Range(func(e HistoryEvent) bool { sum += e.Size; return true })
	})
	assert.LessOrEqual(t, allocs, 8.0, "a read of 4096 events allocates for the read, not for the events")
}
