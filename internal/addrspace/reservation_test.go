package addrspace

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const g = 2 << 20 // the granularity of the tests, as a GPU's 2 MiB

// newRes returns a reservation of n granules at a base aligned to g, with
// the mappings given (offset and size in granules) made.
func newRes(t *testing.T, n int64, maps ...[2]int64) *Reservation {
	t.Helper()
	r, err := New(0x7f000000, n*g, g)
	require.NoError(t, err)
	for _, m := range maps {
		require.NoError(t, r.Map(m[0]*g, m[1]*g))
	}
	return r
}

// snapshot is what a reservation holds, to show that a refusal changed
// nothing.
type snapshot struct {
	Mapped   int64
	Mappings []Range
	Released bool
	Entries  []entry
}

func snap(r *Reservation) snapshot {
	r.mu.Lock()
	entries := append([]entry(nil), r.entries...)
	r.mu.Unlock()
	return snapshot{r.Mapped(), r.Mappings(), r.Released(), entries}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name             string
		base             uintptr
		size, gran       int64
		err              error
		wantInErrMessage string
	}{
		{"aligned", 0x200000, 4 * g, g, nil, ""},
		{"one granule", 0, g, g, nil, ""},
		{"zero size", 0x200000, 0, g, ErrOutOfRange, "must be positive"},
		{"negative size", 0x200000, -g, g, ErrOutOfRange, "must be positive"},
		{"zero granularity", 0x200000, g, 0, ErrOutOfRange, "must be positive"},
		{"size off the granularity", 0x200000, g + 4096, g, ErrUnaligned, "reservation of 2101248 bytes at 0x200000: not a multiple of the granularity 2097152"},
		{"base off the granularity", 0x201000, g, g, ErrUnaligned, "not a multiple of the granularity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.base, tc.size, tc.gran)
			if tc.err == nil {
				require.NoError(t, err)
				assert.Equal(t, tc.base, r.Base())
				assert.Equal(t, tc.size, r.Size())
				assert.Equal(t, tc.gran, r.Granularity())
				assert.Equal(t, tc.base+3, r.Addr(3))
				assert.Zero(t, r.Mapped())
				assert.Empty(t, r.Mappings())
				return
			}
			assert.Nil(t, r)
			require.ErrorIs(t, err, tc.err)
			var re *RangeError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, "new", re.Op)
			assert.Equal(t, tc.gran, re.Granularity)
			assert.Contains(t, err.Error(), tc.wantInErrMessage)
		})
	}
}

// Each refusal of a map, with its details, and nothing changed.
func TestMapRefused(t *testing.T) {
	for _, tc := range []struct {
		name         string
		maps         [][2]int64 // made first, in granules
		offset, size int64      // in bytes
		err          error
		mapping      Range // RangeError.Mapping
		message      string
	}{
		{"offset off the granularity", nil, 4096, g, ErrUnaligned, Range{}, "map of 2097152 bytes at offset 4096: not a multiple of the granularity 2097152"},
		{"size off the granularity", nil, 0, g + 1, ErrUnaligned, Range{}, "not a multiple of the granularity"},
		{"zero size", nil, 0, 0, ErrOutOfRange, Range{}, "not inside the reservation of 16777216 bytes"},
		{"negative size", nil, 0, -g, ErrOutOfRange, Range{}, "not inside the reservation"},
		{"negative offset", nil, -g, g, ErrOutOfRange, Range{}, "not inside the reservation"},
		{"past the end", nil, 7 * g, 2 * g, ErrOutOfRange, Range{}, "map of 4194304 bytes at offset 14680064: not inside the reservation of 16777216 bytes"},
		{"starts at the end", nil, 8 * g, g, ErrOutOfRange, Range{}, "not inside the reservation"},
		{"larger than the reservation", nil, 0, 9 * g, ErrOutOfRange, Range{}, "not inside the reservation"},
		{"huge size, no overflow", nil, g, 1<<62 - (1<<62)%g, ErrOutOfRange, Range{}, "not inside the reservation"},
		{"the same range", [][2]int64{{2, 2}}, 2 * g, 2 * g, ErrOverlap, Range{2 * g, 2 * g}, "overlaps a mapping of 4194304 bytes at offset 4194304"},
		{"overlaps the start", [][2]int64{{2, 2}}, g, 2 * g, ErrOverlap, Range{2 * g, 2 * g}, ""},
		{"overlaps the end", [][2]int64{{2, 2}}, 3 * g, 2 * g, ErrOverlap, Range{2 * g, 2 * g}, ""},
		{"inside", [][2]int64{{2, 3}}, 3 * g, g, ErrOverlap, Range{2 * g, 3 * g}, ""},
		{"around", [][2]int64{{3, 1}}, 2 * g, 3 * g, ErrOverlap, Range{3 * g, g}, ""},
		{"the first of two overlapped", [][2]int64{{1, 1}, {3, 1}}, 0, 4 * g, ErrOverlap, Range{g, g}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRes(t, 8, tc.maps...)
			before := snap(r)
			err := r.BeginMap(tc.offset, tc.size)
			require.ErrorIs(t, err, tc.err)
			var re *RangeError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, "map", re.Op)
			assert.Equal(t, Range{tc.offset, tc.size}, re.Range)
			assert.Equal(t, int64(8*g), re.ReservationSize)
			assert.Equal(t, int64(g), re.Granularity)
			assert.Equal(t, tc.mapping, re.Mapping)
			assert.Contains(t, err.Error(), tc.message)
			assert.Equal(t, before, snap(r), "a refusal changes nothing")
			require.ErrorIs(t, r.Map(tc.offset, tc.size), tc.err, "Map refuses as BeginMap does")
			assert.Equal(t, before, snap(r))
		})
	}
}

// Maps that fit: back to back with others, at the ends, the whole.
func TestMapFits(t *testing.T) {
	for _, tc := range []struct {
		name string
		maps [][2]int64
		add  [2]int64
		want []Range
	}{
		{"the whole", nil, [2]int64{0, 8}, []Range{{0, 8 * g}}},
		{"the last granule", nil, [2]int64{7, 1}, []Range{{7 * g, g}}},
		{"right after another", [][2]int64{{0, 2}}, [2]int64{2, 1}, []Range{{0, 2 * g}, {2 * g, g}}},
		{"right before another", [][2]int64{{3, 2}}, [2]int64{1, 2}, []Range{{g, 2 * g}, {3 * g, 2 * g}}},
		{"between two", [][2]int64{{0, 2}, {4, 4}}, [2]int64{2, 2}, []Range{{0, 2 * g}, {2 * g, 2 * g}, {4 * g, 4 * g}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRes(t, 8, tc.maps...)
			require.NoError(t, r.Map(tc.add[0]*g, tc.add[1]*g))
			assert.Equal(t, tc.want, r.Mappings())
			var sum int64
			for _, m := range tc.want {
				sum += m.Size
			}
			assert.Equal(t, sum, r.Mapped())
		})
	}
}

// Each refusal of an unmap, with its details, and nothing changed.
func TestUnmapRefused(t *testing.T) {
	maps := [][2]int64{{0, 2}, {2, 1}, {4, 2}}
	for _, tc := range []struct {
		name         string
		offset, size int64
		err          error
		mapping      Range
		message      string
	}{
		{"offset off the granularity", 4096, g, ErrUnaligned, Range{}, "unmap of 2097152 bytes at offset 4096: not a multiple of the granularity"},
		{"out of range", 8 * g, g, ErrOutOfRange, Range{}, "not inside the reservation"},
		{"nothing mapped there", 3 * g, g, ErrNotMapped, Range{}, "unmap of 2097152 bytes at offset 6291456: not exactly one mapping (nothing is mapped there)"},
		{"part of a mapping", 0, g, ErrNotMapped, Range{0, 2 * g}, "not exactly one mapping (it falls in the mapping of 4194304 bytes at offset 0)"},
		{"the second half of a mapping", g, g, ErrNotMapped, Range{0, 2 * g}, ""},
		{"a mapping and more", 4 * g, 3 * g, ErrNotMapped, Range{4 * g, 2 * g}, ""},
		{"two mappings at once", 0, 3 * g, ErrNotMapped, Range{0, 2 * g}, ""},
		{"a hole and a mapping", 3 * g, 3 * g, ErrNotMapped, Range{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRes(t, 8, maps...)
			before := snap(r)
			err := r.BeginUnmap(tc.offset, tc.size)
			require.ErrorIs(t, err, tc.err)
			var re *RangeError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, "unmap", re.Op)
			assert.Equal(t, Range{tc.offset, tc.size}, re.Range)
			assert.Equal(t, tc.mapping, re.Mapping)
			assert.Contains(t, err.Error(), tc.message)
			assert.Equal(t, before, snap(r), "a refusal changes nothing")
			require.ErrorIs(t, r.Unmap(tc.offset, tc.size), tc.err)
			assert.Equal(t, before, snap(r))
		})
	}
}

func TestUnmap(t *testing.T) {
	r := newRes(t, 8, [2]int64{0, 2}, [2]int64{2, 1}, [2]int64{4, 2})
	require.NoError(t, r.Unmap(2*g, g))
	assert.Equal(t, []Range{{0, 2 * g}, {4 * g, 2 * g}}, r.Mappings())
	assert.Equal(t, int64(4*g), r.Mapped())
	require.ErrorIs(t, r.Unmap(2*g, g), ErrNotMapped, "unmapped once only")
	require.NoError(t, r.Map(2*g, 2*g), "the range can be mapped again, larger")
	assert.Equal(t, int64(6*g), r.Mapped())
}

// The two steps: a map under way claims its range and counts nothing
// until it is settled; a failed map gives the range back; an unmap under
// way keeps the mapping counted and in the way; a failed unmap leaves it.
func TestTwoSteps(t *testing.T) {
	r := newRes(t, 8)
	require.NoError(t, r.BeginMap(0, 2*g))
	assert.Zero(t, r.Mapped(), "a map under way counts nothing yet")
	assert.Empty(t, r.Mappings())
	_, ok := r.MappingAt(0)
	assert.False(t, ok)
	err := r.BeginMap(g, 2*g)
	require.ErrorIs(t, err, ErrOverlap, "the claim is in the way of another map")
	var re *RangeError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, Range{0, 2 * g}, re.Mapping)
	require.ErrorIs(t, r.BeginUnmap(0, 2*g), ErrBusy, "what is not mapped yet is not unmapped")
	require.ErrorIs(t, r.Release(), ErrMapped, "nor is the reservation released")
	require.ErrorIs(t, r.EndUnmap(0, true), ErrNotPending)

	require.NoError(t, r.EndMap(0, false))
	assert.Empty(t, r.Mappings(), "a failed map gives the range back")
	require.ErrorIs(t, r.EndMap(0, true), ErrNotPending, "settled once only")

	require.NoError(t, r.BeginMap(0, 2*g))
	require.NoError(t, r.EndMap(0, true))
	assert.Equal(t, int64(2*g), r.Mapped())
	m, ok := r.MappingAt(g + 5)
	assert.True(t, ok)
	assert.Equal(t, Range{0, 2 * g}, m)

	require.NoError(t, r.BeginUnmap(0, 2*g))
	assert.Equal(t, int64(2*g), r.Mapped(), "an unmap under way still counts")
	require.ErrorIs(t, r.BeginUnmap(0, 2*g), ErrBusy)
	require.ErrorIs(t, r.BeginMap(0, g), ErrOverlap)
	require.ErrorIs(t, r.EndMap(0, true), ErrNotPending)
	require.NoError(t, r.EndUnmap(0, false))
	assert.Equal(t, []Range{{0, 2 * g}}, r.Mappings(), "a failed unmap leaves the mapping")
	assert.Equal(t, int64(2*g), r.Mapped())

	require.NoError(t, r.BeginUnmap(0, 2*g))
	require.NoError(t, r.EndUnmap(0, true))
	assert.Zero(t, r.Mapped())
	require.ErrorIs(t, r.EndUnmap(0, true), ErrNotPending)
	require.ErrorIs(t, r.EndMap(g, true), ErrNotPending, "nothing begins there")
}

func TestRelease(t *testing.T) {
	r := newRes(t, 8, [2]int64{0, 1}, [2]int64{3, 1})
	before := snap(r)
	err := r.Release()
	require.ErrorIs(t, err, ErrMapped)
	var re *RangeError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 2, re.Left)
	assert.Equal(t, "release of a reservation of 16777216 bytes: 2 mappings are left in it", err.Error())
	assert.Equal(t, before, snap(r))

	require.NoError(t, r.Unmap(0, g))
	require.NoError(t, r.Unmap(3*g, g))
	require.NoError(t, r.Release())
	assert.True(t, r.Released())
	for name, err := range map[string]error{
		"release": r.Release(), "map": r.Map(0, g), "begin map": r.BeginMap(0, g),
		"unmap": r.Unmap(0, g), "begin unmap": r.BeginUnmap(0, g),
	} {
		assert.ErrorIs(t, err, ErrReleased, name)
	}
	assert.Equal(t, "release of a reservation of 16777216 bytes: it was released already", r.Release().Error())
}

// Every error wraps exactly one sentinel.
func TestSentinels(t *testing.T) {
	sentinels := []error{ErrUnaligned, ErrOutOfRange, ErrOverlap, ErrNotMapped, ErrBusy, ErrNotPending, ErrMapped, ErrReleased}
	r := newRes(t, 4, [2]int64{0, 1})
	for _, err := range []error{r.Map(1, g), r.Map(0, 0), r.Map(0, g), r.Unmap(g, g), r.EndMap(0, true), r.Release()} {
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		assert.Equal(t, 1, n, "%v", err)
	}
}

// Many goroutines begin a map of overlapping ranges at once, released
// together by a barrier: exactly one claims; then many unmap the one
// mapping at once: exactly one begins it.
func TestConcurrentClaims(t *testing.T) {
	const workers = 16
	r := newRes(t, 8)
	run := func(f func(i int) error) (won []int) {
		var start, done sync.WaitGroup
		start.Add(1)
		errs := make([]error, workers)
		for i := range workers {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				errs[i] = f(i)
			}()
		}
		start.Done()
		done.Wait()
		for i, err := range errs {
			if err == nil {
				won = append(won, i)
			}
		}
		return won
	}
	won := run(func(i int) error { return r.BeginMap(int64(i%4)*g, 4*g) })
	require.Len(t, won, 1, "one claim of overlapping ranges")
	at := int64(won[0]%4) * g
	require.NoError(t, r.EndMap(at, true))
	won = run(func(int) error { return r.BeginUnmap(at, 4*g) })
	require.Len(t, won, 1, "one unmap of one mapping")
	require.NoError(t, r.EndUnmap(at, true))
	assert.Zero(t, r.Mapped())

	// Disjoint ranges: every worker maps and unmaps its own, many times.
	run(func(i int) error {
		off := int64(i%8) * g
		if i >= 8 {
			return nil
		}
		for range 200 {
			if err := r.Map(off, g); err != nil {
				return err
			}
			if err := r.Unmap(off, g); err != nil {
				return err
			}
		}
		return nil
	})
	assert.Zero(t, r.Mapped())
	require.NoError(t, r.Release())
}

func Example() {
	const granule = 2 << 20
	r, _ := New(0x7f000000, 8*granule, granule)
	fmt.Println(r.Map(0, 2*granule))
	fmt.Println(r.Map(granule, granule))
	fmt.Println(r.Unmap(0, granule))

	// A map with a driver call in between: claimed, then settled.
	if err := r.BeginMap(4*granule, granule); err == nil {
		driverMapped := true // the driver's answer
		fmt.Println(r.EndMap(4*granule, driverMapped))
	}
	fmt.Println(r.Mapped()/granule, "granules mapped")
	fmt.Println(r.Release())
	// Output:
	// <nil>
	// map of 2097152 bytes at offset 2097152: overlaps a mapping of 4194304 bytes at offset 0
	// unmap of 2097152 bytes at offset 0: not exactly one mapping (it falls in the mapping of 4194304 bytes at offset 0)
	// <nil>
	// 3 granules mapped
	// release of a reservation of 16777216 bytes: 2 mappings are left in it
}
