package addrspace

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// model is a plain model of a reservation: which granule each mapping
// covers, granule by granule, and each mapping's state, with none of the
// package's search or bookkeeping.
type model struct {
	granules int                  // the reservation's size in granules
	owner    []int64              // per granule: the offset of the mapping covering it, or -1
	entries  map[int64]modelEntry // by offset
	released bool
}

type modelEntry struct {
	size  int64
	state state
}

func newModel(granules int) *model {
	m := &model{granules: granules, owner: make([]int64, granules), entries: map[int64]modelEntry{}}
	for i := range m.owner {
		m.owner[i] = -1
	}
	return m
}

// rangeErr is the reason the model refuses [off, off+size) before looking
// at the mappings, or nil.
func (m *model) rangeErr(off, size, gran int64) error {
	switch {
	case m.released:
		return ErrReleased
	case size <= 0 || off < 0:
		return ErrOutOfRange
	case off%gran != 0 || size%gran != 0:
		return ErrUnaligned
	case off/gran+size/gran > int64(m.granules):
		return ErrOutOfRange
	}
	return nil
}

func (m *model) set(off, size, gran, owner int64) {
	for k := off / gran; k < (off+size)/gran; k++ {
		m.owner[k] = owner
	}
}

func (m *model) beginMap(off, size, gran int64) (Range, error) {
	if err := m.rangeErr(off, size, gran); err != nil {
		return Range{}, err
	}
	for k := off / gran; k < (off+size)/gran; k++ {
		if o := m.owner[k]; o >= 0 {
			return Range{o, m.entries[o].size}, ErrOverlap
		}
	}
	m.entries[off] = modelEntry{size, mapping}
	m.set(off, size, gran, off)
	return Range{}, nil
}

func (m *model) beginUnmap(off, size, gran int64) (Range, error) {
	if err := m.rangeErr(off, size, gran); err != nil {
		return Range{}, err
	}
	e, ok := m.entries[off]
	if !ok || e.size != size {
		if o := m.owner[off/gran]; o >= 0 {
			return Range{o, m.entries[o].size}, ErrNotMapped
		}
		return Range{}, ErrNotMapped
	}
	if e.state != mapped {
		return Range{off, size}, ErrBusy
	}
	e.state = unmapping
	m.entries[off] = e
	return Range{}, nil
}

func (m *model) end(off, gran int64, want state, ok bool) error {
	e, found := m.entries[off]
	if !found || e.state != want {
		return ErrNotPending
	}
	if (want == mapping) != ok { // a failed map, or an unmap done
		delete(m.entries, off)
		m.set(off, e.size, gran, -1)
		return nil
	}
	e.state = mapped
	m.entries[off] = e
	return nil
}

func (m *model) release() error {
	switch {
	case m.released:
		return ErrReleased
	case len(m.entries) > 0:
		return ErrMapped
	}
	m.released = true
	return nil
}

// counted returns the mappings Mapped counts, in offset order, and their
// bytes.
func (m *model) counted() ([]Range, int64) {
	out := []Range{}
	var n int64
	for off, e := range m.entries {
		if e.state != mapping {
			out = append(out, Range{off, e.size})
			n += e.size
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out, n
}

// FuzzReservation runs every operation of a Reservation against the
// model: each byte pair is an operation, its offset and its size (in
// granules, with an odd bit that puts them off the granularity), and
// after each the two must agree on the error, its details and what is
// mapped.
func FuzzReservation(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x10, 0x11, 0x20, 0x11, 0x30, 0x11, 0x60, 0x00})
	f.Add([]byte{0x02, 0x24, 0x12, 0x11, 0x42, 0x14, 0x52, 0x01, 0x60, 0x00, 0x72, 0x24})
	f.Add([]byte{0x00, 0xf8, 0x01, 0x38, 0x40, 0x1c, 0x50, 0x01, 0x60})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const gran, granules = 16, 12
		r, err := New(0x1000, granules*gran, gran)
		require.NoError(t, err)
		m := newModel(granules)
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			off := (int64(arg&0xf) - 1) * gran   // -1 .. 14 granules
			size := (int64(arg>>4&7) - 1) * gran // -1 .. 6 granules
			if arg&0x80 != 0 {
				off += gran / 2 // off the granularity
			}
			if op&0x8 != 0 {
				size++
			}
			ok := op&1 == 0
			var got, want error
			var wantMapping Range
			switch op >> 4 % 7 {
			case 0:
				got = r.Map(off, size)
				if wantMapping, want = m.beginMap(off, size, gran); want == nil {
					want = m.end(off, gran, mapping, true)
				}
			case 1:
				got = r.Unmap(off, size)
				if wantMapping, want = m.beginUnmap(off, size, gran); want == nil {
					want = m.end(off, gran, unmapping, true)
				}
			case 2:
				got = r.BeginMap(off, size)
				wantMapping, want = m.beginMap(off, size, gran)
			case 3:
				got = r.BeginUnmap(off, size)
				wantMapping, want = m.beginUnmap(off, size, gran)
			case 4:
				got = r.EndMap(off, ok)
				want = m.end(off, gran, mapping, ok)
			case 5:
				got = r.EndUnmap(off, ok)
				want = m.end(off, gran, unmapping, ok)
			case 6:
				if op&0x6 == 0 { // now and then
					got = r.Release()
					want = m.release()
				}
			}
			if want == nil {
				require.NoError(t, got, "op %#x arg %#x", op, arg)
			} else {
				require.ErrorIs(t, got, want, "op %#x arg %#x", op, arg)
				var re *RangeError
				require.ErrorAs(t, got, &re)
				if want == ErrOverlap || want == ErrNotMapped || want == ErrBusy {
					require.Equal(t, wantMapping, re.Mapping, "op %#x arg %#x: %v", op, arg, got)
				}
			}
			ranges, bytes := m.counted()
			require.Equal(t, ranges, r.Mappings())
			require.Equal(t, bytes, r.Mapped())
			require.Equal(t, m.released, r.Released())
		}
	})
}
