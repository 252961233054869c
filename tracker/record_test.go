package tracker

import (
	"math"
	"sync"
	stdatomic "sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecordStatistics(t *testing.T) {
	var r Record
	require.NoError(t, r.Alloc(100))
	require.NoError(t, r.Alloc(200))
	require.NoError(t, r.Alloc(300))
	require.NoError(t, r.Free(200))
	r.RecordFailure()
	assert.Equal(t, Stats{
		Tracked: 400, PeakTracked: 600, Buffers: 2, PeakBuffers: 3,
		AllocBytes: 600, FreedBytes: 200, Allocs: 3, Frees: 1, FailedAllocs: 1,
	}, r.Snapshot())
	assert.Equal(t, int64(400), r.Tracked())
	assert.Equal(t, int64(600), r.PeakTracked())
	assert.Equal(t, int64(2), r.Buffers())

	r.ResetPeak()
	s := r.Snapshot()
	assert.Equal(t, int64(400), s.PeakTracked)
	assert.Equal(t, int64(2), s.PeakBuffers)

	r.ResetAccumulated()
	assert.Equal(t, Stats{Tracked: 400, PeakTracked: 400, Buffers: 2, PeakBuffers: 2}, r.Snapshot())
	require.NoError(t, r.Free(100))
	require.NoError(t, r.Alloc(50))
	assert.Equal(t, Stats{
		Tracked: 350, PeakTracked: 400, Buffers: 2, PeakBuffers: 2,
		AllocBytes: 50, FreedBytes: 100, Allocs: 1, Frees: 1,
	}, r.Snapshot())
}

func TestRecordBadInput(t *testing.T) {
	tests := []struct {
		name       string
		limit      int64
		op         func(r *Record) error
		want       error
		failsCount bool // a refused allocation counts as a failure
	}{
		{"alloc zero", 0, func(r *Record) error { return r.Alloc(0) }, ErrInvalidSize, false},
		{"alloc negative", 0, func(r *Record) error { return r.Alloc(-1) }, ErrInvalidSize, false},
		{"free zero", 0, func(r *Record) error { return r.Free(0) }, ErrInvalidSize, false},
		{"free negative", 0, func(r *Record) error { return r.Free(math.MinInt64) }, ErrInvalidSize, false},
		{"free more than held", 0, func(r *Record) error { return r.Free(101) }, ErrFreeExceedsTracked, false},
		{"free max int64", 0, func(r *Record) error { return r.Free(math.MaxInt64) }, ErrFreeExceedsTracked, false},
		{"free past MaxBytes", 0, func(r *Record) error { return r.Free(MaxBytes + 1) }, ErrFreeExceedsTracked, false},
		{"alloc past MaxBytes exact", 0, func(r *Record) error { return r.Alloc(MaxBytes - 50) }, ErrCapacity, true},
		{"alloc past MaxBytes", 0, func(r *Record) error { return r.Alloc(MaxBytes) }, ErrCapacity, true},
		{"alloc max int64", 0, func(r *Record) error { return r.Alloc(math.MaxInt64) }, ErrCapacity, true},
		{"alloc past limit", 150, func(r *Record) error { return r.Alloc(51) }, ErrLimitExceeded, true},
		{"alloc max int64 under limit", 150, func(r *Record) error { return r.Alloc(math.MaxInt64) }, ErrLimitExceeded, true},
		{"negative limit", 0, func(r *Record) error { return r.SetLimit(-1) }, ErrInvalidSize, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			require.NoError(t, r.Alloc(300))
			require.NoError(t, r.Alloc(100))
			require.NoError(t, r.Free(300)) // current 100 in one buffer, peak 400 in two
			require.NoError(t, r.SetLimit(tt.limit))
			before := r.Snapshot()
			err := tt.op(&r)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), "memtrack: ")
			want := before
			if tt.failsCount {
				want.FailedAllocs++
			}
			assert.Equal(t, want, r.Snapshot())
		})
	}
}

// TestRecordFreeWithoutLiveBuffer frees bytes that are held but belong to
// no live buffer (the live count is already zero): refused, nothing moves.
func TestRecordFreeWithoutLiveBuffer(t *testing.T) {
	var r Record
	require.NoError(t, r.Alloc(10))
	require.NoError(t, r.Alloc(10))
	require.NoError(t, r.Free(5))
	require.NoError(t, r.Free(5)) // live 0, 10 bytes held
	before := r.Snapshot()
	assert.ErrorIs(t, r.Free(5), ErrFreeExceedsTracked)
	assert.Equal(t, before, r.Snapshot())
}

func TestRecordLimit(t *testing.T) {
	var r Record
	require.NoError(t, r.SetLimit(1000))
	assert.Equal(t, int64(1000), r.Limit())
	require.NoError(t, r.Alloc(1000))
	err := r.Alloc(1)
	var le *LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LimitError{Requested: 1, Tracked: 1000, Limit: 1000}, *le)
	require.NoError(t, r.SetLimit(0))
	require.NoError(t, r.Alloc(1), "0 removes the limit")
	assert.Equal(t, int64(1), r.Snapshot().FailedAllocs)
}

func TestRecordLiveCapacity(t *testing.T) {
	var r Record
	require.NoError(t, r.Alloc(1))
	// Stand in for MaxBuffers-1 more live buffers of no bytes: 2^31 real
	// allocations would take minutes.
	standIn(&r, MaxBuffers-1)
	before := r.Snapshot()
	assert.ErrorIs(t, r.Alloc(1), ErrCapacity)
	assert.ErrorIs(t, r.Alloc(fastMax+1), ErrCapacity, "the exact path checks the live count too")
	require.NoError(t, r.SetLimit(1<<40))
	assert.ErrorIs(t, r.Alloc(1), ErrCapacity, "the limited path checks the live count too")
	before.FailedAllocs += 3
	before.Limit = 1 << 40
	assert.Equal(t, before, r.Snapshot())
	require.NoError(t, r.Free(1))
	require.NoError(t, r.Alloc(1))
}

// TestRecordByteCapacity fills a record to MaxBytes (64 TiB) and checks that
// one more byte is refused, on the fast and the exact path.
func TestRecordByteCapacity(t *testing.T) {
	var r Record
	require.NoError(t, r.Alloc(MaxBytes-1))
	require.NoError(t, r.Alloc(1))
	before := r.Snapshot()
	assert.ErrorIs(t, r.Alloc(1), ErrCapacity)
	assert.ErrorIs(t, r.Alloc(MaxBytes), ErrCapacity)
	before.FailedAllocs += 2
	assert.Equal(t, before, r.Snapshot())
	require.NoError(t, r.Free(1))
	require.NoError(t, r.Alloc(1))
	assert.Equal(t, int64(MaxBytes), r.Tracked())
}

// standIn adds d to a quiet record's counts word, standing in for
// operations too many to make, and moves the bytes word's tag with it (see
// consistent), as those operations would have.
func standIn(r *Record, d uint64) {
	steps := d&liveMask + 2*(d>>32)
	stdatomic.AddUint64(&r.counts, d)
	stdatomic.AddInt64(&r.bytes, int64(steps<<tagShift))
}

// TestRecordFold drives the frees half of the counts word to its fold
// threshold and checks the cumulative figures stay exact across the fold.
func TestRecordFold(t *testing.T) {
	var r Record
	// Stand in for 2^31 - 2 earlier frees (with as many allocations).
	standIn(&r, (1<<31-2)<<32)
	for range 5 {
		require.NoError(t, r.Alloc(3))
		require.NoError(t, r.Free(3))
	}
	s := r.Snapshot()
	assert.Equal(t, int64(1<<31+3), s.Frees)
	assert.Equal(t, int64(1<<31+3), s.Allocs)
	assert.Equal(t, int64(15), s.FreedBytes)
	assert.Equal(t, int64(15), s.AllocBytes)
	assert.NotZero(t, r.foldedFrees.Load(), "the count threshold never folded")
	assert.Less(t, stdatomic.LoadUint64(&r.counts), uint64(foldAt))
}

// TestRecordExactPeak holds G buffers at one moment (a barrier): the peaks
// of bytes and live buffers are exact.
func TestRecordExactPeak(t *testing.T) {
	for _, g := range []int{2, 16, 128} {
		var r Record
		require.NoError(t, r.Alloc(1000))
		r.ResetPeak()
		r.ResetAccumulated()
		var allocated, release, done sync.WaitGroup
		allocated.Add(g)
		release.Add(1)
		for i := range g {
			done.Add(1)
			go func() {
				defer done.Done()
				n := int64(100 + i)
				assert.NoError(t, r.Alloc(n))
				allocated.Done()
				release.Wait()
				assert.NoError(t, r.Free(n))
			}()
		}
		allocated.Wait()
		release.Done()
		done.Wait()
		held := int64(g*100 + g*(g-1)/2)
		assert.Equal(t, Stats{
			Tracked: 1000, PeakTracked: 1000 + held, Buffers: 1, PeakBuffers: int64(1 + g),
			AllocBytes: held, FreedBytes: held, Allocs: int64(g), Frees: int64(g),
		}, r.Snapshot(), "g=%d", g)
	}
}

// TestRecordSnapshotUnderLoad reads snapshots while goroutines allocate and
// free (and reset the peak): peaks never fall below current figures, the
// cumulative figures never decrease, and the final snapshot is exact. The
// full run frees enough to cross a fold of the packed freed word.
func TestRecordSnapshotUnderLoad(t *testing.T) {
	iters := 50000
	if testing.Short() {
		iters = 2000
	}
	const workers = 4
	var r Record
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(8 << i)
			for range iters {
				assert.NoError(t, r.Alloc(n))
				assert.NoError(t, r.Alloc(1))
				assert.NoError(t, r.Free(n))
				assert.NoError(t, r.Free(1))
			}
		}()
	}
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		var prev Stats
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			if k%16 == 0 {
				r.ResetPeak()
			}
			s := r.Snapshot()
			ok := assert.GreaterOrEqual(t, s.PeakTracked, s.Tracked) &&
				assert.GreaterOrEqual(t, s.PeakBuffers, s.Buffers) &&
				assert.GreaterOrEqual(t, s.Allocs, prev.Allocs) &&
				assert.GreaterOrEqual(t, s.Frees, prev.Frees) &&
				assert.GreaterOrEqual(t, s.AllocBytes, prev.AllocBytes) &&
				assert.GreaterOrEqual(t, s.FreedBytes, prev.FreedBytes) &&
				assert.GreaterOrEqual(t, s.Allocs-s.Frees, s.Buffers) &&
				assert.GreaterOrEqual(t, s.AllocBytes-s.FreedBytes, s.Tracked)
			if !ok {
				return
			}
			prev = s
		}
	}()
	wg.Wait()
	close(stop)
	reader.Wait()
	s := r.Snapshot()
	var bytes int64
	for i := range workers {
		bytes += int64(iters) * (8<<i + 1)
	}
	assert.Equal(t, int64(0), s.Tracked)
	assert.Equal(t, int64(0), s.Buffers)
	assert.Equal(t, int64(2*workers*iters), s.Allocs)
	assert.Equal(t, int64(2*workers*iters), s.Frees)
	assert.Equal(t, bytes, s.AllocBytes)
	assert.Equal(t, bytes, s.FreedBytes)
}

// TestRecordRefusedFreeUnderLoad: snapshots taken meanwhile never show a
// refused free, and the final figures are exact.
func TestRecordRefusedFreeUnderLoad(t *testing.T) {
	var r Record
	iters := refusedFreesUnderLoad(t, &r, func() bool {
		s := r.Snapshot()
		return assert.LessOrEqual(t, s.Tracked, int64(3*64)) && assert.LessOrEqual(t, s.PeakTracked, int64(3*64)) &&
			assert.LessOrEqual(t, s.Buffers, int64(3))
	})
	s := r.Snapshot()
	assert.Equal(t, Stats{Tracked: 0, PeakTracked: s.PeakTracked, Buffers: 0, PeakBuffers: s.PeakBuffers,
		AllocBytes: int64(3 * iters * 64), FreedBytes: int64(3 * iters * 64),
		Allocs: int64(3 * iters), Frees: int64(3 * iters)}, s)
	assert.LessOrEqual(t, s.PeakTracked, int64(3*64))
	assert.LessOrEqual(t, s.PeakBuffers, int64(3))
}

// TestRecordLimitGenerations: every SetLimit that sets a limit moves the
// bytes word to a generation none of the 30 before it used, also when
// limits are removed in between; otherwise a compare-and-swap prepared
// under one limit could pass under the next (SetLimit(L1), SetLimit(0),
// SetLimit(L2) returned to L1's generation).
func TestRecordLimitGenerations(t *testing.T) {
	for _, remove := range []bool{false, true} {
		var r Record
		require.NoError(t, r.Alloc(10))
		var gens []int64
		for i := range 62 {
			require.NoError(t, r.SetLimit(int64(1000+i)))
			gens = append(gens, r.bytes&genMask>>genShift)
			if remove {
				require.NoError(t, r.SetLimit(0))
				assert.Zero(t, r.bytes&genMask, "no limit, generation 0")
			}
		}
		for i, g := range gens {
			assert.NotZero(t, g)
			for j := max(0, i-30); j < i; j++ {
				assert.NotEqual(t, gens[j], g, "remove=%v: SetLimit %d reused the generation of SetLimit %d", remove, i, j)
			}
			if i >= 31 {
				assert.Equal(t, gens[i-31], g, "a cycle of 31")
			}
		}
		assert.Equal(t, int64(10), r.Tracked())
	}
}
