package memtrack

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// residentCases are the states of a buffer's or a mapping's pages: none
// written, half written, all written.
var residentCases = []struct {
	name     string
	num, den int
}{
	{"unwritten", 0, 2},
	{"half written", 1, 2},
	{"written", 2, 2},
}

// mapCPU reserves and maps size bytes on d, the CPU, or skips the test
// where the OS has no reservations; it unmaps and releases them when the
// test ends.
func mapCPU(t testing.TB, d Device, c Category, size int64) []byte {
	t.Helper()
	var r *Reservation
	var err error
	if c.set != nil {
		r, err = c.Reserve(size)
	} else {
		r, err = d.Reserve(size)
	}
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	require.NoError(t, r.Map(0, size))
	t.Cleanup(func() {
		if r.Mapped() > 0 {
			require.NoError(t, r.Unmap(0, size))
		}
		require.NoError(t, r.Release())
	})
	b := r.Bytes(0, size)
	require.Len(t, b, int(size))
	return b
}

// TestCPUMappingNotResident: a mapping's pages never written are not
// resident, as a buffer's are not, and NotResident counts them exactly, a
// mapping's as a buffer's of its size: unwritten, half written and
// written; after the unmap, nothing.
func TestCPUMappingNotResident(t *testing.T) {
	const size = 64 << 20
	for _, tc := range residentCases {
		t.Run(tc.name, func(t *testing.T) {
			want := int64(size) - int64(size)*int64(tc.num)/int64(tc.den)
			d := freshCPU(t)
			buf, err := d.Alloc(size)
			require.NoError(t, err)
			writeFraction(buf.Bytes(), tc.num, tc.den)
			u, err := d.Usage()
			require.NoError(t, err)
			require.Equal(t, want, u.NotResident, "the buffer's pages not written")
			require.NoError(t, buf.Free())

			m := mapCPU(t, d, Category{}, size)
			writeFraction(m, tc.num, tc.den)
			u, err = d.Usage()
			require.NoError(t, err)
			assert.Equal(t, int64(size), u.Tracked)
			assert.Equal(t, want, u.NotResident, "the mapping's pages not written, as the buffer's")
			assert.Equal(t, max(u.Used+u.NotResident-u.Tracked, 0), u.Untracked)
		})
	}
}

// TestCPUMappingUntracked: a pass that maps memory and keeps it mapped
// adds nothing to Untracked, written or not, as a pass that allocates a
// buffer of its size and keeps it adds nothing.
func TestCPUMappingUntracked(t *testing.T) {
	const size = 256 << 20
	const noise = 64 << 20 // the Go heap and the rest of the process between the readings
	for _, tc := range residentCases {
		t.Run(tc.name, func(t *testing.T) {
			d := freshCPU(t)
			var buf *Buffer
			mb, err := d.Measure(func() error {
				var err error
				buf, err = d.Alloc(size)
				if err == nil {
					writeFraction(buf.Bytes(), tc.num, tc.den)
				}
				return err
			})
			require.NoError(t, err)
			require.NoError(t, buf.Free())
			mm, err := d.Measure(func() error {
				writeFraction(mapCPU(t, d, Category{}, size), tc.num, tc.den)
				return nil
			})
			require.NoError(t, err)
			t.Logf("Untracked: buffer %d, mapping %d", mb.Untracked, mm.Untracked)
			assert.Equal(t, int64(size), mm.EndHeld-mm.StartHeld)
			assert.InDelta(t, 0, mb.Untracked, noise, "the buffer")
			assert.InDelta(t, 0, mm.Untracked, noise, "the mapping")
			assert.InDelta(t, mb.Untracked, mm.Untracked, noise, "the mapping as the buffer")
		})
	}
}

// TestCPUBudgetWeightsMapped: Measurement.Budget sets the weights aside
// whether or not their pages were written, where the weights are a mapping
// of a reservation of the weights' category as where they are a buffer:
// 512 MiB of weights, then a pass that maps and unmaps 128 MiB; the budget
// sets aside the weights and the peak (640 MiB) and the untracked growth
// of the process, which is small, in every case, and offers the same.
func TestCPUBudgetWeightsMapped(t *testing.T) {
	if testing.Short() {
		t.Skip("maps 640 MiB and writes 512 MiB")
	}
	const weights, pass, block = 512 << 20, 128 << 20, 16 << 20
	const noise = 64 << 20
	var setAside []int64
	for _, tc := range residentCases {
		t.Run(tc.name, func(t *testing.T) {
			d := freshCPU(t)
			base, err := d.Baseline()
			require.NoError(t, err)
			w, err := d.Category(CategoryWeights)
			require.NoError(t, err)
			writeFraction(mapCPU(t, d, w, weights), tc.num, tc.den)
			m, err := d.Measure(func() error {
				r, err := d.Reserve(pass)
				if err != nil {
					return err
				}
				if err := r.Map(0, pass); err != nil {
					return err
				}
				if err := r.Unmap(0, pass); err != nil {
					return err
				}
				return r.Release()
			})
			require.NoError(t, err)
			b, err := m.Budget(base, 0.5, block)
			require.NoError(t, err)
			assert.Equal(t, int64(weights), b.Weights)
			assert.Equal(t, int64(pass), b.PeakIncrease)
			assert.InDelta(t, 0, b.UntrackedIncrease, noise, "the weights are not untracked memory released")
			assert.InDelta(t, weights+pass, b.SetAside, noise)
			setAside = append(setAside, b.SetAside)
		})
	}
	require.Len(t, setAside, len(residentCases))
	for _, s := range setAside[1:] {
		assert.InDelta(t, setAside[0], s, noise, "written or not, the same is set aside")
	}
}
