package memtrack

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freshCPU gives the test a CPU device with records of its own.
func freshCPU(t testing.TB) Device {
	t.Helper()
	useBackend(t, KindCPU, newCPUBackend())
	return CPU()
}

// statsOnly drops the device from a snapshot, to compare two devices.
func statsOnly(s Stats) Stats { s.Device = Device{}; return s }

// Track and Release move the figures exactly as Alloc and Free do.
func TestTrackAccountsAsAlloc(t *testing.T) {
	sizes := []int64{100, 4096, 1 << 20, 7}
	_, ds := fakeCUDA(t, 2, 1<<30)
	alloc, track := ds[0], ds[1]
	require.NoError(t, alloc.SetMemoryLimit(2<<20))
	require.NoError(t, track.SetMemoryLimit(2<<20))

	var bufs []*Buffer
	var handles []*Tracked
	for i, n := range sizes {
		b, err := alloc.Alloc(n)
		require.NoError(t, err)
		h, err := track.Track(n, uintptr(0x1000*(i+1)))
		require.NoError(t, err)
		bufs, handles = append(bufs, b), append(handles, h)
		assert.Equal(t, statsOnly(alloc.MemoryStats()), statsOnly(track.MemoryStats()), "after %d", n)
	}
	// Over the limit: both refused alike.
	_, errA := alloc.Alloc(2 << 20)
	_, errT := track.Track(2<<20, 0xdead000)
	require.ErrorIs(t, errA, ErrOutOfMemory)
	require.ErrorIs(t, errT, ErrOutOfMemory)
	var oom *OutOfMemoryError
	require.ErrorAs(t, errT, &oom)
	assert.Equal(t, int64(2<<20), oom.Limit)
	assert.Equal(t, track, oom.Device)
	for i := range sizes {
		require.NoError(t, bufs[i].Free())
		require.NoError(t, handles[i].Release())
		assert.Equal(t, statsOnly(alloc.MemoryStats()), statsOnly(track.MemoryStats()), "after freeing %d", sizes[i])
	}
	s := track.MemoryStats()
	assert.Equal(t, Stats{Device: track, PeakTracked: 1<<20 + 4096 + 107, PeakBuffers: 4,
		AllocBytes: 1<<20 + 4096 + 107, FreedBytes: 1<<20 + 4096 + 107,
		Allocs: 4, Frees: 4, FailedAllocs: 1, Limit: 2 << 20, PeakHeld: 1<<20 + 4096 + 107}, s)
}

// Bad input is refused with its error and moves no figure.
func TestTrackBadInput(t *testing.T) {
	d := freshCPU(t)
	live, err := d.Track(64, 0x4000)
	require.NoError(t, err)
	released, err := d.Track(64, 0x8000)
	require.NoError(t, err)
	require.NoError(t, released.Release())
	before := d.MemoryStats()

	for _, tc := range []struct {
		name string
		call func() error
		err  error
	}{
		{"zero size", func() error { _, err := d.Track(0, 0x1000); return err }, ErrInvalidSize},
		{"negative size", func() error { _, err := d.Track(-5, 0); return err }, ErrInvalidSize},
		{"same address twice while live", func() error { _, err := d.Track(32, 0x4000); return err }, ErrAlreadyTracked},
		{"release twice", released.Release, ErrAlreadyReleased},
		{"FreeWith after release", func() error { return released.FreeWith(func() error { panic("free called") }) }, ErrAlreadyReleased},
		{"nil handle", (*Tracked)(nil).Release, ErrNilTracked},
		{"nil handle FreeWith", func() error { return (*Tracked)(nil).FreeWith(func() error { return nil }) }, ErrNilTracked},
		{"nil free function", func() error { return live.FreeWith(nil) }, ErrInvalidArgument},
		{"no such device", func() error { _, err := Device{kind: KindCPU, ordinal: 3}.Track(8, 0); return err }, ErrInvalidOrdinal},
		{"no such kind", func() error { _, err := Device{kind: numKinds}.Track(8, 0); return err }, ErrInvalidDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			assert.ErrorIs(t, err, tc.err)
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), err.Error())
			assert.Equal(t, before, d.MemoryStats())
			assert.Same(t, live, KindCPU.TrackedAt(0x4000), "the live handle stays tracked")
		})
	}
	require.NoError(t, live.Release())
}

// An address freed by its binding may be tracked again, and a handle
// without an address is never indexed.
func TestTrackAddresses(t *testing.T) {
	d := freshCPU(t)
	a, err := d.Track(10, 0x1000)
	require.NoError(t, err)
	assert.Same(t, a, KindCPU.TrackedAt(0x1000))
	assert.Equal(t, uintptr(0x1000), a.DevicePtr())
	assert.Equal(t, int64(10), a.Size())
	assert.Equal(t, d, a.Device())
	assert.False(t, a.Released())
	require.NoError(t, a.Release())
	assert.True(t, a.Released())
	assert.Zero(t, a.DevicePtr())
	assert.Nil(t, KindCPU.TrackedAt(0x1000))

	b, err := d.Track(20, 0x1000)
	require.NoError(t, err, "a released address may be tracked again")
	assert.Same(t, b, KindCPU.TrackedAt(0x1000))
	require.ErrorIs(t, a.Release(), ErrAlreadyReleased, "the old handle stays released")
	assert.Same(t, b, KindCPU.TrackedAt(0x1000), "and does not unindex the new one")

	c, err := d.Track(30, 0)
	require.NoError(t, err)
	d2, err := d.Track(30, 0)
	require.NoError(t, err, "handles without an address never conflict")
	assert.Nil(t, KindCPU.TrackedAt(0))
	assert.Nil(t, numKinds.TrackedAt(0x1000))
	assert.Equal(t, int64(3), d.MemoryStats().Buffers)
	for _, h := range []*Tracked{b, c, d2} {
		require.NoError(t, h.Release())
	}
	assert.Zero(t, d.MemoryAllocated())
}

// TrackedAt never starts a backend.
func TestTrackedAtStartsNothing(t *testing.T) {
	tb := &tables[KindMetal]
	tb.mu.Lock()
	old := tb.p.Swap(nil)
	tb.mu.Unlock()
	t.Cleanup(func() { tb.mu.Lock(); tb.p.Store(old); tb.mu.Unlock() })
	assert.Nil(t, KindMetal.TrackedAt(0x1000))
	assert.Nil(t, tb.p.Load())
}

// FreeWith uncounts only after the caller's free succeeds; the address is
// free to track again while it runs.
func TestTrackFreeWith(t *testing.T) {
	d := freshCPU(t)
	h, err := d.Track(100, 0x2000)
	require.NoError(t, err)
	before := d.MemoryStats()

	err = h.FreeWith(func() error {
		assert.True(t, h.Released(), "not live while the free runs")
		assert.Nil(t, KindCPU.TrackedAt(0x2000))
		assert.ErrorIs(t, h.Release(), ErrAlreadyReleased)
		return errFakeDriver
	})
	require.ErrorIs(t, err, errFakeDriver)
	assert.Equal(t, before, d.MemoryStats(), "a failed free moves nothing")
	assert.False(t, h.Released())
	assert.Same(t, h, KindCPU.TrackedAt(0x2000))

	var again *Tracked
	require.NoError(t, h.FreeWith(func() error {
		// A driver may hand the address out again the moment it is freed.
		var err error
		again, err = d.Track(50, 0x2000)
		return err
	}))
	assert.True(t, h.Released())
	assert.Same(t, again, KindCPU.TrackedAt(0x2000), "the old handle's release keeps the new one")
	s := d.MemoryStats()
	assert.Equal(t, int64(50), s.Tracked)
	assert.Equal(t, int64(1), s.Frees)
	require.NoError(t, again.Release())
}

// Releasing a tracked handle never calls the backend's free.
func TestTrackNeverFreesThroughTheBackend(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<20)
	f.freeErrs = []error{errFakeDriver}
	h, err := ds[0].Track(512, 0x7000)
	require.NoError(t, err)
	require.NoError(t, h.Release())
	h, err = ds[0].Track(512, 0x7000)
	require.NoError(t, err)
	require.NoError(t, h.FreeWith(func() error { return nil }))
	used, live, calls := f.state(0)
	assert.Zero(t, used)
	assert.Zero(t, live)
	assert.Zero(t, calls, "Track allocates nothing")
	assert.Len(t, f.freeErrs, 1, "the backend's free was never called")
}

// The limit holds tracked and allocated memory together.
func TestTrackLimitCoversAlloc(t *testing.T) {
	d := freshCPU(t)
	require.NoError(t, d.SetMemoryLimit(1000))
	h, err := d.Track(800, 0x3000)
	require.NoError(t, err)
	_, err = d.Alloc(300)
	require.ErrorIs(t, err, ErrOutOfMemory, "Alloc is refused by what Track holds")
	b, err := d.Alloc(200)
	require.NoError(t, err)
	_, err = d.Track(1, 0x3100)
	require.ErrorIs(t, err, ErrOutOfMemory, "and Track by what Alloc holds")
	assert.Nil(t, KindCPU.TrackedAt(0x3100), "a refused Track is not indexed")
	s := d.MemoryStats()
	assert.Equal(t, int64(2), s.FailedAllocs)
	assert.Equal(t, int64(1000), s.Tracked)
	require.NoError(t, b.Free())
	require.NoError(t, h.Release())
}

//go:noinline
func trackFromA(d Device, size int64, ptr uintptr) (*Tracked, error) { return d.Track(size, ptr) }

// Tracked memory is attributed to the caller of Track.
func TestTrackSites(t *testing.T) {
	useBackend(t, KindCPU, newCPUBackend())
	d := recording(t, 4)
	h, err := trackFromA(d, 4096, 0x9000)
	require.NoError(t, err)
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	require.Len(t, snap.Sites, 1)
	assert.Equal(t, "github.com/memtrack/memtrack.trackFromA", frameOf(snap.Sites[0].Stack[0]))
	assert.Equal(t, int64(4096), snap.Sites[0].Bytes)
	require.NoError(t, h.Release())
	snap, err = d.Sites().Snapshot()
	require.NoError(t, err)
	assert.Empty(t, snap.Sites)
	assert.Equal(t, int64(4096), snap.Stats.PeakBytes)
}

// Goroutines that race to track one address: exactly one wins each round,
// and the figures end exact.
func TestTrackRaceOneAddress(t *testing.T) {
	d := freshCPU(t)
	const workers = 8
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	for r := range rounds {
		ptr := uintptr(0x10000 + r%3*0x100)
		var start, done sync.WaitGroup
		start.Add(1)
		won := make(chan *Tracked, workers)
		for range workers {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				h, err := d.Track(64, ptr)
				if err == nil {
					won <- h
				} else if !errors.Is(err, ErrAlreadyTracked) {
					t.Error(err)
				}
			}()
		}
		start.Done()
		done.Wait()
		close(won)
		require.Len(t, won, 1, "round %d", r)
		h := <-won
		assert.Equal(t, int64(64), d.MemoryAllocated())
		// Release and FreeWith race too: one of them wins.
		var errs [2]error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); errs[0] = h.Release() }()
		go func() { defer wg.Done(); errs[1] = h.FreeWith(func() error { return nil }) }()
		wg.Wait()
		assert.True(t, (errs[0] == nil) != (errs[1] == nil), "exactly one release wins: %v", errs)
		assert.Zero(t, d.MemoryAllocated())
	}
	s := d.MemoryStats()
	assert.Equal(t, int64(rounds), s.Allocs)
	assert.Equal(t, int64(rounds), s.Frees)
	assert.Equal(t, int64(1), s.PeakBuffers)
}

// Goroutines tracking and freeing distinct addresses, some sharing shards.
func TestTrackConcurrent(t *testing.T) {
	d := freshCPU(t)
	const workers = 8
	n := 2000
	if testing.Short() {
		n = 200
	}
	var start, done sync.WaitGroup
	start.Add(1)
	for w := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			for i := range n {
				ptr := uintptr(w+1)<<20 | uintptr(i%16)<<8
				h, err := d.Track(int64(i%7+1), ptr)
				if err != nil {
					t.Error(err)
					return
				}
				if KindCPU.TrackedAt(ptr) != h {
					t.Error("TrackedAt lost a live handle")
				}
				if err := h.FreeWith(func() error { return nil }); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	start.Done()
	done.Wait()
	s := d.MemoryStats()
	assert.Zero(t, s.Tracked)
	assert.Equal(t, int64(workers*n), s.Allocs)
	assert.Equal(t, int64(workers*n), s.Frees)
	var total int64
	for i := range n {
		total += int64(i%7 + 1)
	}
	assert.Equal(t, workers*total, s.AllocBytes)
}

// FuzzTrack runs Track, Release and FreeWith against a plain model: a map
// of live addresses and the figures it implies.
func FuzzTrack(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{0x10, 0x10, 0x21, 0x42, 0x10, 0x83, 0x30})
	f.Fuzz(func(t *testing.T, ops []byte) {
		d := freshCPU(t)
		const limit = 40
		require.NoError(t, d.SetMemoryLimit(limit))
		type entry struct {
			h    *Tracked
			size int64
		}
		live := map[uintptr]entry{} // the model: live handles by address
		var released []*Tracked
		var cur, peak, allocs, frees, failed int64
		for _, op := range ops {
			ptr := uintptr(op&3) * 0x100 // 0: no address
			size := int64(op>>2&7) - 1   // -1 .. 6
			switch op >> 5 {
			case 0, 1, 2: // Track
				h, err := d.Track(size, ptr)
				_, dup := live[ptr]
				switch {
				case size <= 0:
					require.ErrorIs(t, err, ErrInvalidSize)
				case ptr != 0 && dup:
					require.ErrorIs(t, err, ErrAlreadyTracked)
				case cur+size > limit:
					require.ErrorIs(t, err, ErrOutOfMemory)
					failed++
				default:
					require.NoError(t, err)
					cur += size
					peak = max(peak, cur)
					allocs++
					if ptr != 0 {
						live[ptr] = entry{h, size}
					} else {
						require.NoError(t, h.Release()) // keep the model to indexed handles
						cur -= size
						frees++
					}
				}
			case 3, 4: // Release
				if e, ok := live[ptr]; ok {
					require.NoError(t, e.h.Release())
					delete(live, ptr)
					released = append(released, e.h)
					cur -= e.size
					frees++
				} else {
					require.Nil(t, KindCPU.TrackedAt(ptr))
				}
			case 5, 6: // FreeWith, failing on odd sizes
				if e, ok := live[ptr]; ok {
					fail := size%2 != 0
					err := e.h.FreeWith(func() error {
						if fail {
							return errFakeDriver
						}
						return nil
					})
					if fail {
						require.ErrorIs(t, err, errFakeDriver)
					} else {
						require.NoError(t, err)
						delete(live, ptr)
						released = append(released, e.h)
						cur -= e.size
						frees++
					}
				}
			case 7: // release a released handle again
				if len(released) > 0 {
					require.ErrorIs(t, released[int(op)%len(released)].Release(), ErrAlreadyReleased)
				}
			}
			s := d.MemoryStats()
			require.Equal(t, cur, s.Tracked)
			require.Equal(t, peak, s.PeakTracked)
			require.Equal(t, allocs, s.Allocs)
			require.Equal(t, frees, s.Frees)
			require.Equal(t, failed, s.FailedAllocs)
			require.Equal(t, int64(len(live)), s.Buffers)
			for p, e := range live {
				require.Same(t, e.h, KindCPU.TrackedAt(p))
			}
		}
		for _, e := range live {
			require.NoError(t, e.h.Release())
		}
	})
}

// Tracked memory is in the memory history as buffers are: tracked,
// released, refused by the limit; bad input leaves no event.
func TestTrackHistory(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1000)
	d := ds[0]
	historyOn(t, d, 16)
	a, err := d.Track(100, 0x1000)
	require.NoError(t, err)
	b, err := d.Track(200, 0)
	require.NoError(t, err)
	require.NoError(t, a.Release())
	require.NoError(t, d.SetMemoryLimit(500))
	_, err = d.Track(400, 0x2000)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.NoError(t, d.SetMemoryLimit(0))
	_, err = d.Track(0, 0x3000)
	require.ErrorIs(t, err, ErrInvalidSize)
	require.ErrorIs(t, a.Release(), ErrAlreadyReleased)
	require.NoError(t, b.FreeWith(func() error { return nil }))

	h, err := d.History().Snapshot()
	require.NoError(t, err)
	assert.Equal(t, []step{
		{0, HistoryAlloc, 100, 100},
		{1, HistoryAlloc, 200, 300},
		{2, HistoryFree, 100, 200},
		{3, HistoryLimit, 400, 200},
		{4, HistoryFree, 200, 0},
	}, steps(h))
}

// TestTrackRefusalFields: Track and TrackAddr fill the fields of a refusal
// as Alloc does: the record's capacity is named, not a limit far above it,
// and a refusal by the limit names the limit; each message has one
// "memtrack:" prefix.
func TestTrackRefusalFields(t *testing.T) {
	const capacity = int64(1) << 47 // past the record's 64 TiB
	_, ds := fakeCUDA(t, 1, math.MaxInt64)
	d := ds[0]
	ways := []struct {
		name string
		do   func(size int64) error
	}{
		{"Alloc", func(size int64) error { _, err := d.Alloc(size); return err }},
		{"Track", func(size int64) error { _, err := d.Track(size, 0); return err }},
		{"TrackAddr", func(size int64) error { return d.TrackAddr(size, 0x7000) }},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			require.NoError(t, d.SetMemoryLimit(1<<50))
			err := w.do(capacity)
			var oom *OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Zero(t, oom.Limit, "the limit did not refuse it: %v", err)
			assert.Equal(t, capacity, oom.Requested)
			assert.Contains(t, err.Error(), "capacity")
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), "%v", err)

			require.NoError(t, d.SetMemoryLimit(1000))
			err = w.do(1001)
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int64(1000), oom.Limit)
			assert.Equal(t, int64(1001), oom.Requested)
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), "%v", err)
			assert.Zero(t, d.MemoryAllocated(), "nothing counted")
		})
	}
}

//go:noinline
func trackAddrFromA(d Device, size int64, ptr uintptr) error { return d.TrackAddr(size, ptr) }

// bindingAlloc stands for a binding's allocation call, such as package
// cu's MemAlloc: it tracks through a helper of its own.
//
//go:noinline
func bindingAlloc(d Device, size int64, ptr uintptr) error { return bindingTrack(d, size, ptr) }

//go:noinline
func bindingTrack(d Device, size int64, ptr uintptr) error { return d.TrackAddrSkip(2, size, ptr) }

//go:noinline
func userOfBinding(d Device, size int64, ptr uintptr) error { return bindingAlloc(d, size, ptr) }

// TrackAddr attributes the count to its caller; TrackAddrSkip to the
// caller skip frames further up, past a binding's own frames.
func TestTrackAddrSites(t *testing.T) {
	useBackend(t, KindCPU, newCPUBackend())
	d := recording(t, 4)
	require.NoError(t, trackAddrFromA(d, 4096, 0x9000))
	require.NoError(t, userOfBinding(d, 8192, 0xa000))
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	require.Len(t, snap.Sites, 2)
	assert.Equal(t, "github.com/memtrack/memtrack.userOfBinding", frameOf(snap.Sites[0].Stack[0]))
	assert.Equal(t, "github.com/memtrack/memtrack.trackAddrFromA", frameOf(snap.Sites[1].Stack[0]))

	assert.ErrorIs(t, d.TrackAddrSkip(-1, 4096, 0xb000), ErrInvalidArgument)
	for _, p := range []uintptr{0x9000, 0xa000} {
		tracked, err := KindCPU.UntrackAddr(p, nil)
		require.True(t, tracked)
		require.NoError(t, err)
	}
	assert.Zero(t, d.MemoryAllocated())
}
