package held

import (
	"fmt"
	"slices"
	"testing"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/require"
)

// model is the sequential model of a Figure on a fakeDevice, free by free
// where the Figure keeps bytes by stream: what the figure, its peak, the
// bytes pending and the queries must be after each operation, from what
// the device's streams have run. Each free keeps the bytes no allocation
// took over; a reading seals a stream's frees since the last one into a
// group, asks each stream as the Figure does, answered from the device
// (without recording anything there: the Figure's reading does that), and
// uncounts what the answers show executed. It reads after the Figure has,
// and takes the positions of the events the Figure's reading recorded
// from the querier's log, where it would record one itself.
type model struct {
	t         testing.TB
	d         *fakeDevice
	q         *fakeQuerier
	cur, peak int64
	scope     bool
	scopePeak int64
	streams   map[uintptr]*mstream
	order     []uintptr // the streams in the order they were first freed on
	unordered int64     // frees of streams not Ordered pending
	queries   int
	last      Order // the frees counted
}

// mstream is the model of one stream's frees pending.
type mstream struct {
	ordered bool
	last    Order    // the newest free counted on it
	open    []*int64 // the bytes of each free since the last reading sealed them, in order
	groups  []mgroup // sealed, oldest first: with an event (pos > 0), then at most one without
}

// mgroup is frees sealed together, and the device position of the event
// recorded after them (0: none yet). A free of a stream not Ordered is a
// group of its own with its event.
type mgroup struct {
	pos   int
	frees []*int64
}

func bytesOf(frees []*int64) (n int64) {
	for _, f := range frees {
		n += *f
	}
	return n
}

func (m *model) pending() (n int64) {
	for _, s := range m.streams {
		n += bytesOf(s.open)
		for _, g := range s.groups {
			n += bytesOf(g.frees)
		}
	}
	return n
}

func (m *model) stream(s Stream) *mstream {
	ms := m.streams[s.Handle]
	if ms == nil {
		ms = &mstream{ordered: s.Ordered}
		m.streams[s.Handle] = ms
		m.order = append(m.order, s.Handle)
	}
	return ms
}

// freed counts a free of size bytes on s; pos is the position of its
// event on a stream not Ordered.
func (m *model) freed(s Stream, size int64, pos int) {
	ms := m.stream(s)
	n := size
	if !s.Ordered {
		ms.groups = append(ms.groups, mgroup{pos: pos, frees: []*int64{&n}})
		if m.unordered++; m.unordered >= PendingBound {
			m.reap()
		}
		return
	}
	m.last++
	ms.last = m.last
	ms.open = append(ms.open, &n)
}

// add is Figure.Add as the model has it: a stream-ordered allocation on s
// asked after at takes over the bytes of s's frees pending, the newest
// first, where none was counted after at.
func (m *model) add(size int64, pooled bool, s Stream, at Order) {
	add := size
	if ms := m.streams[s.Handle]; pooled && ms != nil && ms.ordered && ms.last <= at {
		// The frees, oldest first: the groups', then the open ones.
		var frees []*int64
		for _, g := range ms.groups {
			frees = append(frees, g.frees...)
		}
		frees = append(frees, ms.open...)
		for i := len(frees) - 1; i >= 0 && add > 0; i-- {
			t := min(add, *frees[i])
			*frees[i] -= t
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
	if m.pending() == 0 {
		return
	}
	var none []*int64
	retire := func(frees []*int64) {
		for _, f := range frees {
			m.cur -= *f
			*f = 0
		}
	}
	asked := false
	for _, h := range m.order {
		ms, ds := m.streams[h], m.d.stream(h)
		if !ms.ordered {
			kept := ms.groups[:0]
			for _, g := range ms.groups {
				asked = true
				if m.d.lost || ds.failing || g.pos <= ds.ran {
					retire(g.frees)
					m.unordered--
					continue
				}
				kept = append(kept, g)
			}
			ms.groups = kept
			continue
		}
		marked := len(ms.groups)
		if marked > 0 && ms.groups[marked-1].pos == 0 {
			marked--
		}
		if bytesOf(ms.open) > 0 {
			if marked == len(ms.groups) {
				ms.groups = append(ms.groups, mgroup{})
			}
			ms.groups[marked].frees = append(ms.groups[marked].frees, ms.open...)
			ms.open = none
		}
		if len(ms.groups) == 0 {
			continue
		}
		asked = true
		if m.d.lost || ds.failing {
			for _, g := range ms.groups {
				retire(g.frees)
			}
			retire(ms.open)
			ms.groups, ms.open = nil, nil
			continue
		}
		reached := 0
		for _, g := range ms.groups[:marked] {
			if g.pos > ds.ran {
				break
			}
			reached++
		}
		ask, record := marked < len(ms.groups), marked < len(ms.groups) && marked < MaxWaiting
		if ask && !ds.capturing && (reached == marked || record) {
			switch {
			case reached == marked && ds.ran == ds.ops:
				reached++ // idle: the sealed group too
			case record:
				pos, ok := m.q.takeRecord(h) // where the Figure's reading recorded
				require.True(m.t, ok, "the model records on stream %#x, the Figure did not", h)
				ms.groups[marked].pos = pos
			}
		}
		for _, g := range ms.groups[:reached] {
			retire(g.frees)
		}
		ms.groups = ms.groups[reached:]
	}
	if asked && !m.d.lost {
		m.queries++
	}
	require.Empty(m.t, m.q.log, "the Figure recorded where the model did not")
}

// FuzzFigure runs a Figure on a fake device against the sequential model:
// allocations and frees in stream order on three ordered streams and one
// that is not, allocations that take frees over, one whose free of another
// goroutine is counted between its Order and its Add, allocations freed at
// once, streams running, held, failing and capturing, the device lost and
// found, peak resets and scopes, and readings; after each operation the
// figure, its peak, the bytes pending and the queries are the model's, and
// the figure is never below what the device holds. Each byte is an
// operation: its low three bits the kind, the next two the stream, the
// rest the size (or a choice).
//
//	go test -run '^$' -fuzz FuzzFigure -fuzztime 60s ./internal/held
func FuzzFigure(f *testing.F) {
	f.Add([]byte{0x00, 0x01, 0x00, 0x01, 0x03, 0x02, 0x03})                   // a free taken over, then run
	f.Add([]byte{0x00, 0x01, 0x03, 0x08, 0x03, 0x01, 0x03, 0x02, 0x03})       // marks on a busy stream
	f.Add([]byte{0x18, 0x19, 0x18, 0x19, 0x03, 0x1a, 0x03, 0x07, 0x03, 0x07}) // a stream not ordered, the device lost
	f.Add([]byte{0x00, 0x05, 0x03, 0x22, 0x03, 0x42, 0x03, 0x62, 0x03})       // a racing free; failing, capturing
	f.Add([]byte{0x04, 0x24, 0x06, 0x00, 0x01, 0x26, 0x03, 0x46, 0x03})       // frees at once, a peak reset, a scope
	ops := make([]byte, 0, 400)
	for i := range 100 {
		ops = append(ops, 0x18, byte(i%2)<<5|0x09, 0x00, 0x01) // frees past PendingBound, marks past MaxWaiting
	}
	f.Add(ops)
	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, ops []byte) {
	streams := [4]Stream{streamA, streamB, streamC, unordered}
	h := newFig(t)
	m := &model{t: t, d: h.d, q: h.q, streams: map[uintptr]*mstream{}}
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
		require.Equal(t, m.unordered, h.f.unordered.Load(), "%s: the frees with events pending", msg)
		require.Equal(t, m.queries, h.queries(), "%s: the queries", msg)
		require.GreaterOrEqual(t, m.cur, h.d.holds(), "%s: below what the device holds", msg)
	}
	// free frees the oldest live stream-ordered buffer on s, as the
	// adapter does, the model beside it.
	free := func(s Stream) bool {
		i := slices.IndexFunc(live, func(b buf) bool { return b.pooled })
		if i < 0 {
			return false
		}
		size := live[i].size
		live = slices.Delete(live, i, i+1)
		h.free(s, size)
		pos := 0
		if !s.Ordered {
			pos = h.d.streams[s.Handle].ops
		}
		m.freed(s, size, pos)
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
			free(s)
		case 2: // s runs, or changes
			switch op >> 5 & 3 {
			case 0:
				h.d.run(s.Handle)
			case 1:
				h.d.set(s.Handle, func(st *fakeStream) { st.failing = !st.failing })
			case 2:
				h.d.set(s.Handle, func(st *fakeStream) { st.capturing = !st.capturing })
			case 3:
				h.d.set(s.Handle, func(st *fakeStream) { st.running = !st.running; st.ran = max(st.ran, st.ops*btoi(st.running)) })
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
			free(s)
			h.f.Add(size, true, s.Handle, at)
			m.add(size, true, s, at)
			live = append(live, buf{size, true})
		case 6:
			switch op >> 5 & 1 {
			case 0:
				h.f.ResetPeak()
				m.reap()
				m.peak = m.cur
			case 1:
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
			}
		case 7:
			h.d.lost = !h.d.lost
		}
		check(fmt.Sprintf("step %d (op %#x)", i, op))
	}
	// Every stream run, its queries answered, and the capture ended: one
	// reading leaves the live buffers alone.
	h.d.lost = false
	for _, s := range streams {
		h.d.set(s.Handle, func(st *fakeStream) { st.failing, st.capturing, st.ran = false, false, st.ops })
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
