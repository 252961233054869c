package memtrack_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack"
)

// FuzzReservation maps and unmaps ranges of one reservation on the CPU,
// through the public API, against a sequential model: the mappings by
// offset. Each operation is three bytes: what (map or unmap, and whether
// the offset is off the granularity by a byte), the offset and the size
// in granules, each up to one past the reservation. After each, the error
// matches the model's, Mapped and the device's Tracked are the model's,
// and a mapping's first and last byte are writable where the model has
// one; at the end everything is unmapped and the reservation released.
func FuzzReservation(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0, 2, 2, 1, 0, 2, 1, 2, 2})
	f.Add([]byte{0, 0, 8, 1, 0, 4, 0, 3, 2, 1, 3, 2, 2, 1, 1})
	f.Add([]byte{0, 7, 2, 0, 8, 1, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{4, 1, 1, 0, 1, 1, 5, 1, 1, 1, 1, 1})
	const granules = 8
	g := cpuGranularity(f)
	cpu := memtrack.CPU()
	f.Fuzz(func(t *testing.T, ops []byte) {
		r, err := cpu.Reserve(granules * g)
		require.NoError(t, err)
		tracked := cpu.MemoryStats().Tracked
		model := map[int64]int64{} // offset -> size, in granules
		var mapped int64
		for len(ops) >= 3 {
			what, off, size := ops[0], int64(ops[1]%(granules+2)), int64(ops[2]%(granules+2))
			ops = ops[3:]
			offset, bytes := off*g, size*g
			if what&4 != 0 {
				offset++ // off the granularity
			}
			var want error
			switch {
			case size <= 0:
				want = memtrack.ErrOutOfRange
			case what&4 != 0:
				want = memtrack.ErrUnaligned
			case off+size > granules:
				want = memtrack.ErrOutOfRange
			}
			if what&1 == 0 {
				if want == nil {
					for o, s := range model {
						if o < off+size && off < o+s {
							want = memtrack.ErrOverlap
						}
					}
				}
				err = r.Map(offset, bytes)
				if want == nil {
					model[off] = size
					mapped += size
				}
			} else {
				if want == nil && model[off] != size {
					want = memtrack.ErrNotMapped
				}
				err = r.Unmap(offset, bytes)
				if want == nil {
					delete(model, off)
					mapped -= size
				}
			}
			if want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, want)
				var me *memtrack.MappingError
				require.True(t, errors.As(err, &me))
			}
			require.Equal(t, mapped*g, r.Mapped())
			require.Equal(t, tracked+mapped*g, cpu.MemoryStats().Tracked)
			for o, s := range model {
				b := r.Bytes(o*g, s*g)
				require.Len(t, b, int(s*g))
				b[0], b[len(b)-1] = 1, 1
			}
		}
		for o, s := range model {
			require.NoError(t, r.Unmap(o*g, s*g))
		}
		require.NoError(t, r.Release())
		require.Equal(t, tracked, cpu.MemoryStats().Tracked)
	})
}
