package memtrack_test

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack"
)

// cpuGranularity returns the CPU's granularity of reservations, or skips
// the test where the OS has none.
func cpuGranularity(t testing.TB) int64 {
	t.Helper()
	g, err := memtrack.CPU().MapGranularity()
	if errors.Is(err, memtrack.ErrNotSupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	require.Positive(t, g)
	return g
}

// reserve reserves blocks granules on the CPU, released at the end of the
// test after its mappings are unmapped.
func reserve(t testing.TB, blocks int64) (*memtrack.Reservation, int64) {
	t.Helper()
	g := cpuGranularity(t)
	r, err := memtrack.CPU().Reserve(blocks * g)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := r.Release(); errors.Is(err, memtrack.ErrMappingsLeft) {
			t.Errorf("the test left mappings: %v", err)
		}
	})
	return r, g
}

func TestReservationCounts(t *testing.T) {
	cpu := memtrack.CPU()
	before := cpu.MemoryStats()
	r, g := reserve(t, 16)
	assert.Equal(t, memtrack.CPU(), r.Device())
	assert.Equal(t, 16*g, r.Size())
	assert.Equal(t, g, r.Granularity())
	assert.NotZero(t, r.Base())
	s := cpu.MemoryStats()
	assert.Equal(t, before.AddressSpace+16*g, s.AddressSpace, "the reservation is counted in AddressSpace")
	assert.Equal(t, before.Reservations+1, s.Reservations)
	assert.Equal(t, before.Tracked, s.Tracked, "a reservation holds no memory")
	assert.Contains(t, cpu.MemorySummary(), "address space: ")

	require.NoError(t, r.Map(0, 2*g))
	require.NoError(t, r.Map(4*g, g))
	require.NoError(t, r.Map(15*g, g))
	assert.Equal(t, 4*g, r.Mapped())
	s = cpu.MemoryStats()
	assert.Equal(t, before.Tracked+4*g, s.Tracked, "each mapping is counted in Tracked")
	assert.Equal(t, before.Buffers+3, s.Buffers)
	assert.Equal(t, before.Allocs+3, s.Allocs)
	assert.Equal(t, before.AllocBytes+4*g, s.AllocBytes)

	// The host's view of a mapping is its memory, zeroed and writable.
	b := r.Bytes(g, g)
	require.Len(t, b, int(g))
	assert.Zero(t, b[0])
	b[0], b[g-1] = 1, 2
	assert.Equal(t, byte(2), r.Bytes(0, 2*g)[2*g-1])
	assert.Nil(t, r.Bytes(2*g, g), "nothing is mapped there")
	assert.Nil(t, r.Bytes(g, 2*g), "not inside one mapping")

	require.NoError(t, r.Unmap(0, 2*g))
	require.NoError(t, r.Unmap(4*g, g))
	require.NoError(t, r.Unmap(15*g, g))
	s = cpu.MemoryStats()
	assert.Equal(t, before.Tracked, s.Tracked)
	assert.Equal(t, before.Buffers, s.Buffers)
	assert.Equal(t, before.Frees+3, s.Frees)
	assert.Equal(t, before.FreedBytes+4*g, s.FreedBytes)
	assert.Zero(t, r.Mapped())

	// A range unmapped may be mapped again, and finds its memory zeroed.
	require.NoError(t, r.Map(0, 2*g))
	assert.Zero(t, r.Bytes(0, 2*g)[2*g-1])
	require.NoError(t, r.Unmap(0, 2*g))

	require.NoError(t, r.Release())
	s = cpu.MemoryStats()
	assert.Equal(t, before.AddressSpace, s.AddressSpace)
	assert.Equal(t, before.Reservations, s.Reservations)
}

// TestReservationRefusals checks each rule of a reservation through the
// public API: every refusal is a *MappingError matching its sentinel, and
// changes no figure.
func TestReservationRefusals(t *testing.T) {
	cpu := memtrack.CPU()
	r, g := reserve(t, 8)
	require.NoError(t, r.Map(2*g, 2*g)) // [2g, 4g)
	require.NoError(t, r.Map(4*g, g))   // [4g, 5g)
	for _, c := range []struct {
		name         string
		op           func() error
		want         error
		mapping      [2]int64 // the mapping in the way: offset, size
		left         int
		offset, size int64
	}{
		{"map at an offset off the granularity", func() error { return r.Map(1, g) }, memtrack.ErrUnaligned, [2]int64{}, 0, 1, g},
		{"map of a size off the granularity", func() error { return r.Map(0, g+1) }, memtrack.ErrUnaligned, [2]int64{}, 0, 0, g + 1},
		{"map of nothing", func() error { return r.Map(0, 0) }, memtrack.ErrOutOfRange, [2]int64{}, 0, 0, 0},
		{"map of a negative size", func() error { return r.Map(0, -g) }, memtrack.ErrOutOfRange, [2]int64{}, 0, 0, -g},
		{"map at a negative offset", func() error { return r.Map(-g, g) }, memtrack.ErrOutOfRange, [2]int64{}, 0, -g, g},
		{"map past the end", func() error { return r.Map(7*g, 2*g) }, memtrack.ErrOutOfRange, [2]int64{}, 0, 7 * g, 2 * g},
		{"map at the end", func() error { return r.Map(8*g, g) }, memtrack.ErrOutOfRange, [2]int64{}, 0, 8 * g, g},
		{"map over a mapping", func() error { return r.Map(3*g, g) }, memtrack.ErrOverlap, [2]int64{2 * g, 2 * g}, 0, 3 * g, g},
		{"map across a mapping's start", func() error { return r.Map(g, 2*g) }, memtrack.ErrOverlap, [2]int64{2 * g, 2 * g}, 0, g, 2 * g},
		{"map of a mapping again", func() error { return r.Map(4*g, g) }, memtrack.ErrOverlap, [2]int64{4 * g, g}, 0, 4 * g, g},
		{"unmap of nothing mapped", func() error { return r.Unmap(0, g) }, memtrack.ErrNotMapped, [2]int64{}, 0, 0, g},
		{"unmap of part of a mapping", func() error { return r.Unmap(2*g, g) }, memtrack.ErrNotMapped, [2]int64{2 * g, 2 * g}, 0, 2 * g, g},
		{"unmap of the end of a mapping", func() error { return r.Unmap(3*g, g) }, memtrack.ErrNotMapped, [2]int64{2 * g, 2 * g}, 0, 3 * g, g},
		{"unmap of two mappings at once", func() error { return r.Unmap(2*g, 3*g) }, memtrack.ErrNotMapped, [2]int64{2 * g, 2 * g}, 0, 2 * g, 3 * g},
		{"unmap off the granularity", func() error { return r.Unmap(2*g+1, 2*g) }, memtrack.ErrUnaligned, [2]int64{}, 0, 2*g + 1, 2 * g},
		{"release with mappings left", r.Release, memtrack.ErrMappingsLeft, [2]int64{}, 2, 0, 8 * g},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := cpu.MemoryStats()
			mapped := r.Mapped()
			err := c.op()
			require.ErrorIs(t, err, c.want)
			var me *memtrack.MappingError
			require.ErrorAs(t, err, &me)
			assert.Equal(t, cpu, me.Device)
			assert.Equal(t, c.offset, me.Offset)
			assert.Equal(t, c.size, me.Size)
			assert.Equal(t, 8*g, me.ReservationSize)
			assert.Equal(t, g, me.Granularity)
			if c.want != memtrack.ErrMappingsLeft {
				assert.Equal(t, c.mapping, [2]int64{me.MappingOffset, me.MappingSize})
			}
			assert.Equal(t, c.left, me.Left)
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), "one prefix: %v", err)
			assert.Equal(t, before, cpu.MemoryStats(), "a refusal changes no figure")
			assert.Equal(t, mapped, r.Mapped())
		})
	}
	require.NoError(t, r.Unmap(2*g, 2*g))
	require.NoError(t, r.Unmap(4*g, g))
	require.NoError(t, r.Release())

	before := cpu.MemoryStats()
	for name, op := range map[string]func() error{
		"map":     func() error { return r.Map(0, g) },
		"unmap":   func() error { return r.Unmap(0, g) },
		"release": r.Release,
	} {
		assert.ErrorIs(t, op(), memtrack.ErrReservationReleased, "%s after the release", name)
	}
	assert.Equal(t, before, cpu.MemoryStats())
}

func TestReserveRefusals(t *testing.T) {
	cpu := memtrack.CPU()
	g := cpuGranularity(t)
	before := cpu.MemoryStats()
	_, err := cpu.Reserve(0)
	assert.ErrorIs(t, err, memtrack.ErrInvalidSize)
	_, err = cpu.Reserve(-g)
	assert.ErrorIs(t, err, memtrack.ErrInvalidSize)
	_, err = cpu.Reserve(g + 1)
	assert.ErrorIs(t, err, memtrack.ErrUnaligned)
	var me *memtrack.MappingError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "reserve", me.Op)
	_, err = memtrack.Category{}.Reserve(g)
	assert.ErrorIs(t, err, memtrack.ErrInvalidCategory)
	_, err = memtrack.Device{}.Reserve(g)
	assert.ErrorIs(t, err, memtrack.ErrInvalidDevice)
	_, err = memtrack.Device{}.MapGranularity()
	assert.ErrorIs(t, err, memtrack.ErrInvalidDevice)
	assert.Equal(t, before, cpu.MemoryStats())

	var nilRes *memtrack.Reservation
	assert.ErrorIs(t, nilRes.Map(0, g), memtrack.ErrInvalidArgument)
	assert.ErrorIs(t, nilRes.Unmap(0, g), memtrack.ErrInvalidArgument)
	assert.ErrorIs(t, nilRes.Release(), memtrack.ErrInvalidArgument)
	assert.Nil(t, nilRes.Bytes(0, g))
}

// TestReservationCategoryLimit: a category's reservation counts its
// mappings in the category, whose limit refuses a mapping as it refuses an
// allocation, with an OutOfMemoryError and FailedAllocs, and the range
// stays free.
func TestReservationCategoryLimit(t *testing.T) {
	cpu := memtrack.CPU()
	g := cpuGranularity(t)
	kv, err := cpu.Category("elastic_kv")
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(3*g))
	defer func() { require.NoError(t, kv.SetMemoryLimit(0)) }()
	r, err := kv.Reserve(8 * g)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Release()) }()

	catOf := func() memtrack.CategoryStats {
		for _, c := range cpu.CategoryStats() {
			if c.Category == "elastic_kv" {
				return c
			}
		}
		t.Fatal("no category elastic_kv")
		return memtrack.CategoryStats{}
	}
	require.NoError(t, r.Map(0, 2*g))
	c := catOf()
	assert.Equal(t, 2*g, c.Tracked)
	assert.Equal(t, int64(1), c.Buffers)

	before, catBefore := cpu.MemoryStats(), catOf()
	err = r.Map(2*g, 2*g)
	var oom *memtrack.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.ErrorIs(t, err, memtrack.ErrLimitExceeded)
	assert.Equal(t, "elastic_kv", oom.Category)
	assert.Equal(t, 2*g, oom.Requested)
	assert.Equal(t, int64(3*g), oom.Limit)
	after := cpu.MemoryStats()
	assert.Equal(t, before.FailedAllocs+1, after.FailedAllocs)
	assert.Equal(t, before.Tracked, after.Tracked)
	assert.Equal(t, catBefore.FailedAllocs+1, catOf().FailedAllocs)
	assert.Equal(t, 2*g, r.Mapped(), "the range refused stays free")

	require.NoError(t, r.Map(2*g, g), "what fits under the limit maps")
	assert.Equal(t, 3*g, catOf().Tracked)
	require.NoError(t, r.Unmap(0, 2*g))
	require.NoError(t, r.Unmap(2*g, g))
	assert.Zero(t, catOf().Tracked)
}

// TestReservationHistoryAndSites: a map and an unmap are the history's
// alloc and free, and the map's caller is its allocation site.
func TestReservationHistoryAndSites(t *testing.T) {
	cpu := memtrack.CPU()
	r, g := reserve(t, 4)
	require.NoError(t, cpu.History().Enable(1000))
	defer cpu.History().Disable()
	require.NoError(t, cpu.Sites().Enable(8))
	defer cpu.Sites().Disable()
	require.NoError(t, cpu.Sites().SetRate(1))
	defer func() { require.NoError(t, cpu.Sites().SetRate(0)) }()

	require.NoError(t, r.Map(g, 2*g))
	sites, err := cpu.Sites().Snapshot()
	require.NoError(t, err)
	found := false
	for _, s := range sites.Sites {
		if len(s.Stack) == 0 {
			continue
		}
		f, _ := runtime.CallersFrames(s.Stack).Next()
		if strings.HasSuffix(f.Function, "TestReservationHistoryAndSites") {
			found = true
			assert.GreaterOrEqual(t, s.Bytes, 2*g)
		}
	}
	assert.True(t, found, "the caller of Map is the site: %+v", sites.Sites)
	require.NoError(t, r.Unmap(g, 2*g))

	h, err := cpu.History().Snapshot()
	require.NoError(t, err)
	var actions []memtrack.HistoryAction
	for _, e := range h.Events {
		if e.Size == 2*g {
			actions = append(actions, e.Action)
		}
	}
	assert.Equal(t, []memtrack.HistoryAction{memtrack.HistoryAlloc, memtrack.HistoryFree}, actions)
}

// TestReservationConcurrent maps and unmaps under -race: goroutines on
// ranges of their own, each figure exact at the end; and goroutines on one
// range, of which exactly one map and one unmap go through.
func TestReservationConcurrent(t *testing.T) {
	cpu := memtrack.CPU()
	const workers, rounds = 8, 50
	r, g := reserve(t, 2*workers)
	before := cpu.MemoryStats()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range int64(workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range rounds {
				if err := r.Map(2*w*g, 2*g); err != nil {
					t.Error(err)
					return
				}
				r.Bytes(2*w*g, g)[0] = byte(w)
				if err := r.Unmap(2*w*g, 2*g); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	s := cpu.MemoryStats()
	assert.Equal(t, before.Tracked, s.Tracked)
	assert.Equal(t, before.Allocs+workers*rounds, s.Allocs)
	assert.Equal(t, before.Frees+workers*rounds, s.Frees)
	assert.Zero(t, r.Mapped())

	// One range, every goroutine at once.
	for _, op := range []struct {
		name string
		f    func() error
		lose []error
	}{
		{"map", func() error { return r.Map(0, 4*g) }, []error{memtrack.ErrOverlap}},
		{"unmap", func() error { return r.Unmap(0, 4*g) }, []error{memtrack.ErrNotMapped, memtrack.ErrBusy}},
	} {
		start := make(chan struct{})
		errs := make([]error, workers)
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = op.f()
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, op.lose[0]) && (len(op.lose) == 1 || !errors.Is(err, op.lose[1])):
				t.Errorf("%s: %v", op.name, err)
			}
		}
		assert.Equal(t, 1, won, "%s: exactly one goes through", op.name)
	}
	assert.Equal(t, before.Tracked, cpu.MemoryStats().Tracked)
}

// TestReturnCheckCPU: pages written and unmapped leave the process's
// resident memory, and the return check sees them go.
func TestReturnCheckCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the exact resident figure is Linux's (smaps_rollup)")
	}
	cpu := memtrack.CPU()
	const blocks = 8
	r, g := reserve(t, blocks*(4<<20)/cpuGranularity(t))
	block := r.Size() / blocks
	for i := range int64(blocks) {
		require.NoError(t, r.Map(i*block, block))
		b := r.Bytes(i*block, block)
		for j := int64(0); j < block; j += g {
			b[j] = 1 // resident from its first write
		}
	}
	c, err := cpu.StartReturnCheck()
	require.NoError(t, err)
	for i := range int64(blocks / 2) {
		require.NoError(t, r.Unmap(i*block, block))
	}
	ret, err := c.End()
	require.NoError(t, err)
	t.Log(ret)
	assert.Equal(t, blocks/2*block, ret.Unmapped)
	assert.Zero(t, ret.Mapped)
	assert.Equal(t, blocks/2*block, ret.Expected)
	assert.True(t, ret.PerProcess, "the reservations' resident pages are read")
	assert.True(t, ret.Returned(), "%v", ret)
	assert.Zero(t, ret.NotGiven())
	assert.InDelta(t, ret.Expected, ret.ProcessReturned, float64(ret.Granularity), "the resident set fell by the pages unmapped")
	assert.Contains(t, ret.String(), "given back")

	// Pages mapped meanwhile take memory back: pages written after the
	// check started are not given back.
	c, err = cpu.StartReturnCheck()
	require.NoError(t, err)
	require.NoError(t, r.Map(0, block))
	b := r.Bytes(0, block)
	for j := int64(0); j < block; j += g {
		b[j] = 1
	}
	require.NoError(t, r.Unmap(blocks/2*block, block))
	ret, err = c.End()
	require.NoError(t, err)
	assert.Equal(t, block, ret.Unmapped)
	assert.Equal(t, block, ret.Mapped)
	assert.Zero(t, ret.Expected)
	assert.True(t, ret.Returned(), "%v", ret)

	// Pages mapped and never written were never memory: unmapping them
	// gives nothing back, and the check says so.
	require.NoError(t, r.Map(blocks/2*block, block))
	c, err = cpu.StartReturnCheck()
	require.NoError(t, err)
	require.NoError(t, r.Unmap(blocks/2*block, block))
	ret, err = c.End()
	require.NoError(t, err)
	assert.False(t, ret.Returned())
	assert.Equal(t, block, ret.NotGiven())
	assert.Contains(t, ret.String(), "NOT given back")
	assert.Contains(t, ret.String(), "pages never written give nothing back")
	for i := int64(blocks/2 + 1); i < blocks; i++ {
		require.NoError(t, r.Unmap(i*block, block))
	}
	require.NoError(t, r.Unmap(0, block))
}
