package tracker

import (
	"errors"
	"runtime"
	"sync"
	stdatomic "sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stressFor is how long each boundary stress test runs.
func stressFor() time.Duration {
	if testing.Short() {
		return 50 * time.Millisecond
	}
	return 300 * time.Millisecond
}

// hammer runs each op in a goroutine of its own until d has passed, and
// returns how many times each returned nil. The test fails (instead of
// hanging) if a goroutine is still running 10 s after d.
func hammer(t *testing.T, d time.Duration, ops ...func() error) []int {
	t.Helper()
	ok := make([]int, len(ops))
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				for range 64 {
					if op() == nil {
						ok[i]++
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d + 10*time.Second):
		t.Fatal("wedged: a goroutine never returned")
	}
	return ok
}

// TestCounterEdges reproduces the wraps at the edges of a Counter: refused
// operations at MaxCount racing each other and valid ones. A refused
// operation never succeeds, readers never see a figure outside [0,
// MaxCount] or a refused add, and nothing hangs.
func TestCounterEdges(t *testing.T) {
	t.Run("two Alloc(MaxCount) holding 5", func(t *testing.T) { // (d)
		var c Counter
		require.NoError(t, c.Alloc(5))
		big := func() error { return c.Alloc(MaxCount) }
		ok := hammer(t, stressFor(), big, big, func() error {
			if cur := c.Current(); cur != 5 {
				return errors.New("moved")
			}
			return nil
		})
		assert.Zero(t, ok[0]+ok[1], "a refused Alloc succeeded")
		assert.Equal(t, int64(5), c.Current())
	})
	t.Run("Alloc(MaxCount) racing Free(10) holding 5", func(t *testing.T) {
		var c Counter
		require.NoError(t, c.Alloc(5))
		ok := hammer(t, stressFor(),
			func() error { return c.Alloc(MaxCount) },
			func() error { return c.Free(10) },
			func() error {
				// Holding 5 or 6: room under 100 whatever the refused
				// operations do.
				if err := c.AllocWithin(1, 100); err != nil {
					return err
				}
				return c.Free(1)
			})
		assert.Zero(t, ok[0], "Alloc(MaxCount) succeeded")
		assert.Zero(t, ok[1], "Free(10) succeeded")
		// How often the valid operation got through depends on the
		// scheduler (a refused add lifts the figure out of range for an
		// instant, and a loaded machine may run the other two goroutines
		// only): once the race is over, it must.
		t.Logf("AllocWithin(1, 100)+Free(1) succeeded %d times in the race", ok[2])
		assert.NoError(t, c.AllocWithin(1, 100))
		assert.NoError(t, c.Free(1))
		assert.Equal(t, int64(5), c.Current())
		assert.LessOrEqual(t, c.Peak(), int64(6))
	})
	t.Run("Alloc(fastMax) at MaxCount racing frees", func(t *testing.T) {
		var c Counter
		require.NoError(t, c.Alloc(MaxCount-fastMax/2))
		ok := hammer(t, stressFor(),
			func() error { return c.Alloc(fastMax) },
			func() error { return c.Alloc(fastMax) },
			func() error {
				if cur := c.Current(); cur > MaxCount || cur < 0 {
					return errors.New("out of range")
				}
				return errors.New("read")
			})
		assert.Zero(t, ok[0]+ok[1]+ok[2])
		assert.Equal(t, int64(MaxCount-fastMax/2), c.Current())
	})
}

// TestRecordEdges reproduces the wraps at the edges of a Record.
func TestRecordEdges(t *testing.T) {
	t.Run("two Alloc(MaxBytes) holding 2 TiB", func(t *testing.T) {
		var r Record
		require.NoError(t, r.Alloc(2<<40))
		big := func() error { return r.Alloc(MaxBytes) }
		ok := hammer(t, stressFor(), big, big)
		assert.Zero(t, ok[0]+ok[1], "a refused Alloc succeeded")
		assert.Equal(t, int64(2<<40), r.Tracked())
		assert.Equal(t, int64(1), r.Buffers())
	})
	t.Run("Alloc(MaxBytes) racing Free(10) holding 5", func(t *testing.T) {
		var r Record
		require.NoError(t, r.Alloc(5))
		ok := hammer(t, stressFor(),
			func() error { return r.Alloc(MaxBytes) },
			func() error { return r.Free(10) },
			func() error {
				if s := r.Snapshot(); s.Tracked != 5 || s.Buffers != 1 {
					return nil // counted as a bad read
				}
				return errors.New("read")
			})
		assert.Zero(t, ok[0], "Alloc(MaxBytes) succeeded")
		assert.Zero(t, ok[1], "Free(10) succeeded")
		assert.Zero(t, ok[2], "a reader saw a refused change")
		assert.Equal(t, int64(5), r.Tracked())
	})
}

// TestCounterRefusalsInvisible: holding 5, refused
// operations at the boundaries (Alloc(MaxCount), Free(10)) race a goroutine
// that allocates 1 within a limit of 100 and frees it, and a reader. The
// refused operations must never succeed, never be seen by the reader (who
// may see only 5 or 6) and never make the unrelated AllocWithin or its Free
// fail; nothing may hang. It runs with more threads than cores, so that
// the kernel suspends threads between an add and its take-back.
func TestCounterRefusalsInvisible(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	var c Counter
	require.NoError(t, c.Alloc(5))
	var seen [2]int64 // a figure outside {5, 6}, and how often
	ok := hammer(t, raceFor(),
		func() error { return c.Alloc(MaxCount) },
		func() error { return c.Alloc(MaxCount) },
		func() error { return c.Free(10) },
		func() error {
			if err := c.AllocWithin(1, 100); err != nil {
				return nil // counted as a failure of the unrelated caller
			}
			if err := c.Free(1); err != nil {
				return nil
			}
			return errors.New("fine")
		},
		func() error {
			if cur := c.Current(); cur != 5 && cur != 6 {
				seen[0] = cur
				return nil // counted as a bad read
			}
			return errors.New("fine")
		})
	assert.Zero(t, ok[0]+ok[1], "Alloc(MaxCount) succeeded")
	assert.Zero(t, ok[2], "Free(10) succeeded")
	assert.Zero(t, ok[3], "AllocWithin(1, 100) or its Free(1) failed")
	assert.Zero(t, ok[4], "the reader saw a refused change (e.g. Current() = %d)", seen[0])
	assert.Equal(t, int64(5), c.Current())
}

// within runs f in a goroutine and fails the test if it has not returned
// after d: for the calls that used to wait for good.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v: the record waits for a figure that never returns to range", what, d)
	}
}

// TestRecordOverFreeBesideRefusedAlloc plays, step by
// step, the interleaving that wedged a record: an Alloc's fast path read no
// limit and adds after SetLimit set one (so its add is to be taken back),
// and in that instant a Free of more than is held (a caller's bug) passes
// against the add. Taking the add back left the bytes held at -5, and every
// reader, and the Alloc's own exact path, waited for good; the test timed
// out there before takeBack kept the add. Now the Alloc completes, the
// figures stay in range and agree with each other.
func TestRecordOverFreeBesideRefusedAlloc(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64 // the limit set before the Alloc's add lands
	}{{"limit set meanwhile", 1000}, {"limit passed", 6}} {
		t.Run(tc.name, func(t *testing.T) {
			var r Record
			require.NoError(t, r.Alloc(5))
			require.NoError(t, r.SetLimit(tc.limit))
			// The Alloc(8) of the fast path, which read no limit, adds now.
			const n = 8
			v := stdatomic.AddInt64(&r.bytes, n+tagUnit) & lowMask
			require.Greater(t, v, int64(MaxBytes), "the add sees the limit's generation")
			// Free(10): more than the 5 held, but it passes against 13.
			require.NoError(t, r.Free(10))
			var err error
			within(t, 2*time.Second, "the Alloc's slow path", func() { err = r.allocSlow(n, v, 0) })
			assert.NoError(t, err, "the add stays, so the Alloc completes")
			var s Stats
			within(t, 2*time.Second, "Snapshot", func() { s = r.Snapshot() })
			assert.Equal(t, int64(3), s.Tracked, "5 + 8 - 10")
			assert.Equal(t, int64(1), s.Buffers)
			assert.Equal(t, s.Allocs-s.Frees, s.Buffers)
			assert.Equal(t, s.AllocBytes-s.FreedBytes, s.Tracked)
			assert.GreaterOrEqual(t, s.PeakTracked, s.Tracked)
		})
	}
}
