package held

import (
	"fmt"
	"slices"
	"testing"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/require"
)

// model is the sequential model of a Figure on a fakeDevice, free by free:
// what the figure, its peak, the bytes and frees pending, the bound, the
// spares, the events destroyed and the queries must be after each
// operation, from what the device's streams have run. Each free keeps the
// bytes no allocation took over, and its event's position on its stream.
type model struct {
	d                 *fakeDevice
	cur, peak         int64
	scope             bool
	scopePeak         int64
	frees             map[uintptr][]*mfree // each stream's pending frees, in its order
	order             []uintptr            // the streams in the order they were first freed on
	last              map[uintptr]Order    // the newest free counted on each stream
	count             Order                // the frees counted
	npending, reapAt  int64
	spares, destroyed int
	queries           int
}

// mfree is a pending free of the model.
type mfree struct {
	stream  Stream
	pos     int // its event's position on its stream
	bytes   int64
	foreign bool
}

func (m *model) pending() (n int64) {
	for _, fs := range m.frees {
		for _, f := range fs {
			n += f.bytes
		}
	}
	return n
}

// freed counts a free of size bytes on s, its event at pos.
func (m *model) freed(s Stream, size int64, pos int, foreign bool) {
	if m.frees[s.Handle] == nil {
		m.order = append(m.order, s.Handle)
	}
	m.count++
	m.last[s.Handle] = m.count
	m.frees[s.Handle] = append(m.frees[s.Handle], &mfree{stream: s, pos: pos, bytes: size, foreign: foreign})
	if m.npending++; m.npending >= max(m.reapAt, PendingBound) {
		m.reap()
	}
}

// add is Figure.Add as the model has it: a stream-ordered allocation on s
// asked after at takes over the bytes of s's frees pending, the newest
// first, where none was counted after at.
func (m *model) add(size int64, pooled bool, s Stream, at Order) {
	add := size
	if fs := m.frees[s.Handle]; pooled && s.Ordered && m.last[s.Handle] <= at {
		for i := len(fs) - 1; i >= 0 && add > 0; i-- {
			t := min(add, fs[i].bytes)
			fs[i].bytes -= t
			add -= t
		}
	}
	if add == 0 {
		return
	}
	if add > m.peak-m.cur || m.scope {
		m.reap()
	}
	m.cur += add
	m.peak = max(m.peak, m.cur)
	if m.scope {
		m.scopePeak = max(m.scopePeak, m.cur)
	}
}

// reap is a reading as the model has it.
func (m *model) reap() {
	if m.npending == 0 {
		m.reapAt = 0
		return
	}
	asked := false
	for _, h := range m.order {
		fs, ds := m.frees[h], m.d.stream(h)
		if len(fs) == 0 {
			continue
		}
		asked = true
		gone := m.d.lost || ds.failing
		var kept []*mfree
		for i, f := range fs {
			reached := f.pos <= ds.ran
			if f.stream.Ordered && i > 0 && len(kept) > 0 {
				reached = false // the first not reached keeps every later one
			}
			if !gone && !reached {
				kept = append(kept, f)
				continue
			}
			m.cur -= f.bytes
			m.npending--
			switch {
			case f.foreign:
				m.destroyed++
			case !gone:
				m.spares++
			}
		}
		m.frees[h] = kept
	}
	if asked && !m.d.lost {
		m.queries++
	}
	m.reapAt = 2 * m.npending
}

// FuzzFigure runs a Figure on a fake device against the sequential model:
// allocations and frees in stream order on three ordered streams and one
// that is not, frees with events of another context, allocations that
// take frees over, one whose free of another goroutine is counted between
// its Order and its Add, allocations freed at once, frees known executed
// at once, streams running and failing, the device lost and found, peak
// resets and scopes, and readings; after each operation the figure, its
// peak, the bytes and frees pending, the bound, the spares, the events
// destroyed and the queries are the model's, and the figure is never below
// what the device holds. Each byte is an operation: its low three bits the
// kind, the next two the stream, the rest the size (or a choice).
//
//	go test -run '^$' -fuzz FuzzFigure -fuzztime 60s ./internal/held
func FuzzFigure(f *testing.F) {
	f.Add([]byte{0x00, 0x01, 0x00, 0x01, 0x03, 0x02, 0x03})             // a free taken over, then run
	f.Add([]byte{0x08, 0x01, 0x08, 0x01, 0x03, 0x22, 0x03, 0x07, 0x03}) // a failing stream, the device lost
	f.Add([]byte{0x18, 0x19, 0x18, 0x19, 0x03, 0x1a, 0x03})             // a stream not ordered
	f.Add([]byte{0x00, 0x05, 0x03, 0x06, 0x03, 0x26, 0x03, 0x26, 0x03}) // a racing free; another context's event; a scope
	f.Add([]byte{0x04, 0x24, 0x10, 0x16, 0x00, 0x01, 0x03})             // frees at once, a peak reset
	ops := make([]byte, 0, 400)
	for i := range 150 {
		ops = append(ops, 0x10, 0x09, byte(i%2)<<5|0x06) // frees past PendingBound, with peak resets between
	}
	f.Add(ops)
	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, ops []byte) {
	streams := [4]Stream{streamA, streamB, streamC, unordered}
	h := newFig(t)
	m := &model{d: h.d, frees: map[uintptr][]*mfree{}, last: map[uintptr]Order{}}
	type buf struct {
		size   int64
		pooled bool
	}
	var live []buf
	var scope *tracker.Scope
	check := func(msg string) {
		t.Helper()
		require.Equal(t, m.cur, h.f.held.Current(), "%s: the figure", msg)
		require.Equal(t, m.peak, h.f.held.Peak(), "%s: the peak", msg)
		require.Equal(t, m.pending(), h.f.Pending(), "%s: the bytes pending", msg)
		require.Equal(t, m.npending, h.f.npending.Load(), "%s: the frees pending", msg)
		require.Equal(t, m.reapAt, h.f.reapAt.Load(), "%s: the bound", msg)
		require.Equal(t, m.spares, h.spares(), "%s: the spares", msg)
		q, destroyed := h.q.reads()
		require.Equal(t, m.queries, q, "%s: the queries", msg)
		require.Len(t, destroyed, m.destroyed, "%s: the events destroyed", msg)
		require.GreaterOrEqual(t, m.cur, h.d.holds(), "%s: below what the device holds", msg)
	}
	// free frees the oldest live stream-ordered buffer on s, as the
	// adapter does, the model beside it.
	free := func(s Stream, foreign bool) bool {
		i := slices.IndexFunc(live, func(b buf) bool { return b.pooled })
		if i < 0 {
			return false
		}
		size := live[i].size
		live = slices.Delete(live, i, i+1)
		if m.spares > 0 && !foreign {
			m.spares--
		}
		e := h.free2(s, size, foreign)
		m.freed(s, size, h.d.events[e].pos, foreign)
		return true
	}
	for i, op := range ops {
		s := streams[op>>3&3]
		size := int64(op>>5+1) << 10
		switch op & 7 {
		case 0: // a stream-ordered allocation on s
			at := h.f.Order()
			h.alloc(s, size)
			m.add(size, true, s, at)
			live = append(live, buf{size, true})
		case 1: // the oldest stream-ordered buffer freed on s
			free(s, false)
		case 2: // s runs, or fails
			if op>>5&1 == 0 {
				h.d.run(s.Handle)
			} else {
				h.d.set(s.Handle, func(st *fakeStream) { st.failing = !st.failing })
			}
		case 3:
			cur, peak := h.f.Load()
			m.reap()
			require.Equal(t, [2]int64{m.cur, m.peak}, [2]int64{cur, peak}, "step %d: the reading", i)
		case 4: // allocated and freed at once
			if op>>5&1 == 0 {
				h.f.Add(size, false, 0, 0)
				h.d.allocNow(size)
				m.add(size, false, Stream{}, 0)
				live = append(live, buf{size, false})
			} else if j := slices.IndexFunc(live, func(b buf) bool { return !b.pooled }); j >= 0 {
				h.f.Drop(live[j].size, false)
				h.d.freeNow(live[j].size)
				m.cur -= live[j].size
				live = slices.Delete(live, j, j+1)
			}
		case 5: // an allocation on s whose Add comes after another's free on s
			at := h.f.Order()
			h.d.alloc(s.Handle, size)
			free(s, false)
			h.f.Add(size, true, s.Handle, at)
			m.add(size, true, s, at)
			live = append(live, buf{size, true})
		case 6:
			switch op >> 5 & 3 {
			case 0: // a free with an event of another context
				free(s, true)
			case 1:
				h.f.ResetPeak()
				m.reap()
				m.peak = m.cur
			case 2:
				if scope == nil {
					scope = h.f.OpenScope()
					m.reap()
					m.scope, m.scopePeak = true, m.cur
				} else {
					require.NoError(t, h.f.CloseScope(scope))
					m.reap()
					require.Equal(t, m.scopePeak, scope.Peak(), "step %d: the scope's peak", i)
					m.scope, scope = false, nil
				}
			case 3: // a free known executed at once, its event never recorded
				if j := slices.IndexFunc(live, func(b buf) bool { return b.pooled }); j >= 0 {
					h.f.Drop(live[j].size, true)
					h.d.freeNow(live[j].size)
					m.cur -= live[j].size
					live = slices.Delete(live, j, j+1)
				}
			}
		case 7:
			h.d.lost = !h.d.lost
		}
		check(fmt.Sprintf("step %d (op %#x)", i, op))
	}
	// Every stream run and its queries answered: one reading leaves the
	// live buffers alone.
	h.d.lost = false
	for _, s := range streams {
		h.d.set(s.Handle, func(st *fakeStream) { st.failing, st.ran = false, st.ops })
	}
	h.f.Load()
	m.reap()
	check("at the end")
	var held int64
	for _, b := range live {
		held += b.size
	}
	require.Equal(t, held, m.cur, "the live buffers alone")
	require.Zero(t, m.pending())
}
