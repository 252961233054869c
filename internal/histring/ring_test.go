package histring

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alloc is an action code, as memtrack's HistoryAlloc is.
const alloc uint8 = 1

// readout is one Read of a ring: its events, gaps and counts.
type readout struct {
	Events            []Event[int]
	Gaps              []Gap
	Overwritten, Lost uint64
}

// read reads the whole ring.
func read(h *Ring[int]) readout {
	var r readout
	r.Gaps, r.Overwritten, r.Lost = h.Read(nil, func(e Event[int]) bool {
		r.Events = append(r.Events, e)
		return true
	})
	return r
}

// step is what the model of FuzzHistoryRing predicts of an event.
type step struct {
	Seq     uint64
	Action  uint8
	Size    int64
	Current int64
}

func steps(r readout) []step {
	out := make([]step, len(r.Events))
	for i, e := range r.Events {
		out[i] = step{e.Seq, e.Action, e.Size, e.Tracked}
	}
	return out
}

// TestHistoryDroppedWriterIsAGap holds slots as a lapped writer and a
// reader would, and checks that the writers that find them held drop their
// events, count them lost, and leave gaps in the history.
func TestHistoryDroppedWriterIsAGap(t *testing.T) {
	h := New[int](4)
	write := func(size int64) { h.Record(alloc, size, size, nil, 0, 0, 0, 0) }
	write(1) // 0
	write(2) // 1
	// A writer of event 2 is preempted after its ticket; 3 to 5 go by, and
	// 6 finds slot 2 still unclaimed but 2's claim then fails: 2 is lost.
	t2 := h.head.Add(1) - 1
	write(4) // 3
	write(5) // 4 replaces 0
	write(6) // 5 replaces 1
	write(7) // 6 takes slot 2, still empty
	assert.Nil(t, h.claim(t2), "a writer lapped by a newer event drops its own")
	// A reader holds slot 3 (event 3) while event 7 arrives: 7 is dropped.
	sl := &h.slots[3]
	require.True(t, sl.seq.CompareAndSwap(4<<2|slotDone, 4<<2|slotReading))
	write(8) // 7, dropped
	sl.seq.Store(4<<2 | slotDone)
	// A writer still writes event 8 (slot 0) as the history is read.
	t8 := h.head.Add(1) - 1
	w8 := h.claim(t8)
	require.NotNil(t, w8)
	write(10) // 9

	got := read(h)
	assert.Equal(t, uint64(2), got.Lost)
	assert.Equal(t, uint64(6), got.Overwritten, "events 0-5 are older than the ring")
	assert.Equal(t, []uint64{6, 9}, func() []uint64 {
		var s []uint64
		for _, e := range got.Events {
			s = append(s, e.Seq)
		}
		return s
	}(), "7 dropped, 8 still being written")
	require.Len(t, got.Gaps, 1)
	assert.Equal(t, Gap{After: 6, Before: 9, From: got.Events[0].Time, To: got.Events[1].Time}, got.Gaps[0])

	// Event 8's writer finishes; 7 stays lost.
	w8.size, w8.cur, w8.action = 9, 9, alloc
	w8.seq.Store((t8+1)<<2 | slotDone)
	got = read(h)
	require.Len(t, got.Gaps, 1)
	assert.Equal(t, uint64(7), got.Gaps[0].After+1)
	assert.Equal(t, uint64(1), got.Gaps[0].Before-got.Gaps[0].After-1, "one event missing")
}

// FuzzHistoryRing drives the ring with writers that take their ticket,
// claim their slot and publish in separate steps, interleaved as the input
// says, and compares every read with a plain model: an event is read if it
// was published, is one of the newest len(ring) tickets, and no later
// ticket has claimed its slot; a claim succeeds if no writer holds the slot
// and no later ticket has claimed it.
func FuzzHistoryRing(f *testing.F) {
	f.Add(uint8(3), []byte{0, 0, 0, 1, 1, 1, 2, 2, 2, 3})
	f.Add(uint8(2), []byte{0, 0, 0, 0, 0, 3, 1, 2, 1, 2, 3, 0, 1, 2, 3})
	f.Add(uint8(1), []byte{0, 1, 0, 1, 2, 3, 2, 3})
	f.Fuzz(func(t *testing.T, size uint8, ops []byte) {
		n := int(size%8) + 1
		h := New[int](n)
		type writer struct {
			t  uint64
			sl *slot
		}
		var (
			waiting, writing []writer
			head             uint64
			maxClaimed       = make([]int64, n) // by slot: the latest ticket that claimed it, or -1
			held             = make([]bool, n)  // by slot: a writer holds it
			published        = map[uint64]bool{}
			lost             uint64
		)
		for i := range maxClaimed {
			maxClaimed[i] = -1
		}
		for i, op := range ops {
			switch op % 4 {
			case 0: // a writer takes its ticket
				w := writer{t: h.head.Add(1) - 1}
				require.Equal(t, head, w.t)
				head++
				waiting = append(waiting, w)
			case 1: // the oldest waiting writer claims its slot
				if len(waiting) == 0 {
					continue
				}
				w := waiting[0]
				waiting = waiting[1:]
				s := w.t % uint64(n)
				ok := !held[s] && maxClaimed[s] < int64(w.t)
				w.sl = h.claim(w.t)
				require.Equal(t, ok, w.sl != nil, "op %d: claim of %d", i, w.t)
				if ok {
					held[s], maxClaimed[s] = true, int64(w.t)
					writing = append(writing, w)
				} else {
					lost++
				}
			case 2: // the newest claimed writer publishes
				if len(writing) == 0 {
					continue
				}
				w := writing[len(writing)-1]
				writing = writing[:len(writing)-1]
				w.sl.size, w.sl.cur, w.sl.action = int64(w.t)+1, int64(w.t), alloc
				w.sl.seq.Store((w.t+1)<<2 | slotDone)
				held[w.t%uint64(n)] = false
				published[w.t] = true
			case 3: // a read
				want := []step{}
				for t := head - min(head, uint64(n)); t < head; t++ {
					if published[t] && maxClaimed[t%uint64(n)] == int64(t) {
						want = append(want, step{t, alloc, int64(t) + 1, int64(t)})
					}
				}
				got := read(h)
				require.Equal(t, want, steps(got), "op %d", i)
				require.Equal(t, lost, got.Lost)
				for _, g := range got.Gaps {
					require.Greater(t, g.Before-g.After, uint64(1), "a gap misses an event")
				}
			}
		}
	})
}

// TestHistorySlotLayout: a slot is 64 bytes and holds no pointer, so that
// the garbage collector does not scan the ring.
func TestHistorySlotLayout(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(slot{}))
	typ := reflect.TypeFor[slot]()
	for i := range typ.NumField() {
		switch f := typ.Field(i); f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.String, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			t.Errorf("slot.%s is a %v: the ring would hold pointers", f.Name, f.Type.Kind())
		}
	}
}
