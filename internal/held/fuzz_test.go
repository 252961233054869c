package held

import (
	"fmt"
	"testing"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/require"
)

// model is the sequential model of a Figure on a fakeDevice: what the
// figure, its peak, the frees pending, the spares, the events destroyed
// and the queries must be after each operation, from what the device has
// reached.
type model struct {
	d                 *fakeDevice
	cur, peak         int64
	scope             bool
	scopePeak         int64
	pending           map[Stream][]Free[int] // each stream's, in its order
	npending, reapAt  int64
	spares, destroyed int
	queries           int
}

// reap is Figure.reap as the model has it: the frees each stream has
// reached, or whose query failed (all of them where the device is lost),
// leave: an ordered stream's from the oldest on, its answer a success
// where none of them failed (as fakeQuerier answers), and those of a stream
// not ordered one by one.
func (m *model) reap() {
	if m.npending == 0 {
		m.reapAt = 0
		return
	}
	if !m.d.lost {
		m.queries++
	}
	answer := func(e int) (reached, failed bool) {
		if m.d.lost {
			return true, false
		}
		return m.d.answered(e)
	}
	for s, list := range m.pending {
		if s.Ordered {
			k, ok := 0, true
			for _, n := range list {
				reached, failed := answer(n.Event)
				if !reached {
					break
				}
				k++
				ok = ok && !failed
			}
			for _, n := range list[:k] {
				m.retire(n, ok)
			}
			m.pending[s] = list[k:]
			continue
		}
		var kept []Free[int]
		for _, n := range list {
			if reached, failed := answer(n.Event); reached {
				m.retire(n, !failed)
			} else {
				kept = append(kept, n)
			}
		}
		m.pending[s] = kept
	}
	m.reapAt = 2 * m.npending
}

// retire retires n, whose stream's answer was a success where ok.
func (m *model) retire(n Free[int], ok bool) {
	m.cur -= n.Size
	m.npending--
	switch {
	case n.Foreign:
		m.destroyed++
	case ok:
		m.spares++
	}
}

func (m *model) add(size int64) {
	if size > m.peak-m.cur || m.scope {
		m.reap()
	}
	m.cur += size
	m.peak = max(m.peak, m.cur)
	if m.scope {
		m.scopePeak = max(m.scopePeak, m.cur)
	}
}

// FuzzFigure runs a Figure on a fake device against the sequential model:
// allocations and frees in stream order on three ordered streams and one
// that is not, frees of another context's events, frees known executed at
// once, allocations freed at once, streams reaching their events, queries
// that fail, the device lost and found, peak resets and scopes, and
// readings; after each operation the figure, the frees pending, the
// bound, the spares, the events destroyed and the queries are the model's.
// Each byte is an operation: its low three bits the kind, the next two the
// stream, the rest the size.
//
//	go test -run '^$' -fuzz FuzzFigure -fuzztime 60s ./internal/held
func FuzzFigure(f *testing.F) {
	f.Add([]byte{0x00, 0x08, 0x02, 0x03, 0x0a, 0x03})
	f.Add([]byte{0x00, 0x00, 0x00, 0x22, 0x03, 0x02, 0x03})                   // a failed query among reached frees
	f.Add([]byte{0x18, 0x18, 0x1a, 0x18, 0x03, 0x0f, 0x03, 0x1f, 0x03})       // a stream not ordered, a peak reset, the device lost
	f.Add([]byte{0x04, 0x06, 0x0e, 0x07, 0x17, 0x00, 0x08, 0x03, 0x17, 0x03}) // another context's event, an executed free, a scope
	ops := make([]byte, 0, 300)
	for i := range 150 {
		ops = append(ops, byte(i%2)<<3, 0x0f) // frees past PendingBound, with peak resets between
	}
	f.Add(ops)
	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, ops []byte) {
	streams := [4]Stream{streamA, streamB, streamC, unordered}
	h := newFig(t)
	m := &model{d: h.d, pending: map[Stream][]Free[int]{}}
	var live []int64
	var scope *tracker.Scope
	check := func(msg string) {
		t.Helper()
		require.Equal(t, m.cur, h.f.held.Current(), "%s: the figure", msg)
		require.Equal(t, m.peak, h.f.held.Peak(), "%s: the peak", msg)
		require.Equal(t, m.npending, h.f.npending.Load(), "%s: the frees pending", msg)
		require.Equal(t, m.reapAt, h.f.reapAt.Load(), "%s: the bound", msg)
		require.Equal(t, m.spares, h.spares(), "%s: the spares", msg)
		q, destroyed := h.q.reads()
		require.Equal(t, m.queries, q, "%s: the queries", msg)
		require.Len(t, destroyed, m.destroyed, "%s: the events destroyed", msg)
	}
	// free frees size bytes in stream order on s as the adapter does,
	// the model beside it.
	free := func(s Stream, size int64, foreign bool) {
		h.f.Add(size, true)
		m.add(size)
		if m.spares > 0 && !foreign {
			m.spares--
		}
		e := h.free(s, size, foreign)
		m.pending[s] = append(m.pending[s], Free[int]{Event: e, Stream: s, Size: size, Foreign: foreign})
		m.npending++
		if m.npending >= max(m.reapAt, PendingBound) {
			m.reap()
		}
	}
	for i, op := range ops {
		s := streams[op>>3&3]
		size := int64(op>>5+1) << 10
		switch op & 7 {
		case 0, 1:
			free(s, size, false)
		case 2:
			if op>>5&1 == 0 {
				h.d.run(s)
			} else if list := m.pending[s]; len(list) > 0 {
				h.d.fail(list[len(list)-1].Event) // the newest pending free's query fails
			}
		case 3:
			cur, peak := h.f.Load()
			m.reap()
			require.Equal(t, [2]int64{m.cur, m.peak}, [2]int64{cur, peak}, "step %d: the reading", i)
		case 4:
			h.f.Add(size, false)
			m.add(size)
			live = append(live, size)
		case 5:
			if len(live) > 0 {
				h.f.Drop(live[0], false)
				m.cur -= live[0]
				live = live[1:]
			}
		case 6:
			free(s, size, true)
		case 7:
			switch op >> 3 & 3 {
			case 0: // a free known executed at once, its event never recorded
				h.f.Add(size, true)
				m.add(size)
				n := h.f.TakeSpare()
				if n == nil {
					n = &Free[int]{Event: h.d.newEvent()}
				} else {
					m.spares--
				}
				*n = Free[int]{Event: n.Event, Stream: s, Size: size}
				h.f.Executed(n)
				m.cur -= size
				m.spares++
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
			case 3:
				h.d.lost = !h.d.lost
			}
		}
		check(fmt.Sprintf("step %d (op %#x)", i, op))
	}
	h.d.lost = false
	for _, s := range streams {
		h.d.run(s)
	}
	h.f.Load()
	m.reap()
	check("at the end")
	require.Zero(t, m.npending)
	var held int64
	for _, n := range live {
		held += n
	}
	require.Equal(t, held, m.cur, "the live buffers alone")
}
