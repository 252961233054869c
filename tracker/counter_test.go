package tracker

import (
	"math"
	"sync"
	stdatomic "sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCounterAllocFree(t *testing.T) {
	var c Counter
	require.NoError(t, c.Alloc(100))
	require.NoError(t, c.Alloc(50))
	assert.Equal(t, int64(150), c.Current())
	assert.Equal(t, int64(150), c.Peak())
	require.NoError(t, c.Free(120))
	assert.Equal(t, int64(30), c.Current())
	assert.Equal(t, int64(150), c.Peak())
	require.NoError(t, c.Alloc(20))
	cur, peak := c.Load()
	assert.Equal(t, int64(50), cur)
	assert.Equal(t, int64(150), peak)
	c.ResetPeak()
	assert.Equal(t, int64(50), c.Peak(), "ResetPeak sets peak := current, not 0")
	require.NoError(t, c.Free(50))
	assert.Equal(t, int64(0), c.Current())
	assert.Equal(t, int64(50), c.Peak())
}

func TestCounterBadInput(t *testing.T) {
	tests := []struct {
		name string
		op   func(c *Counter) error
		want error
	}{
		{"alloc zero", func(c *Counter) error { return c.Alloc(0) }, ErrInvalidSize},
		{"alloc negative", func(c *Counter) error { return c.Alloc(-5) }, ErrInvalidSize},
		{"alloc min int64", func(c *Counter) error { return c.Alloc(math.MinInt64) }, ErrInvalidSize},
		{"free zero", func(c *Counter) error { return c.Free(0) }, ErrInvalidSize},
		{"free negative", func(c *Counter) error { return c.Free(-1) }, ErrInvalidSize},
		{"free more than held", func(c *Counter) error { return c.Free(101) }, ErrFreeExceedsTracked},
		{"free max int64", func(c *Counter) error { return c.Free(math.MaxInt64) }, ErrFreeExceedsTracked},
		{"alloc past MaxCount", func(c *Counter) error { return c.Alloc(MaxCount) }, ErrCapacity},
		{"alloc max int64", func(c *Counter) error { return c.Alloc(math.MaxInt64) }, ErrCapacity},
		{"alloc within negative", func(c *Counter) error { return c.AllocWithin(-1, 1000) }, ErrInvalidSize},
		{"alloc within negative limit", func(c *Counter) error { return c.AllocWithin(10, math.MinInt64+5) }, ErrInvalidSize},
		{"alloc within past limit", func(c *Counter) error { return c.AllocWithin(901, 1000) }, ErrLimitExceeded},
		{"alloc within past MaxCount", func(c *Counter) error { return c.AllocWithin(math.MaxInt64, math.MaxInt64) }, ErrCapacity},
		{"alloc within overflowing", func(c *Counter) error { return c.AllocWithin(math.MaxInt64, 1000) }, ErrLimitExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Counter
			require.NoError(t, c.Alloc(300))
			require.NoError(t, c.Free(200)) // current 100, peak 300
			err := tt.op(&c)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), "memtrack: ")
			assert.Equal(t, int64(100), c.Current(), "current moved")
			assert.Equal(t, int64(300), c.Peak(), "peak moved")
		})
	}
}

func TestCounterAllocWithin(t *testing.T) {
	var c Counter
	require.NoError(t, c.AllocWithin(600, 1000))
	require.NoError(t, c.AllocWithin(400, 1000))
	err := c.AllocWithin(1, 1000)
	var le *LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, LimitError{Requested: 1, Tracked: 1000, Limit: 1000}, *le)
	assert.Equal(t, int64(1000), c.Peak())
}

// TestCounterExactPeak holds G allocations of k bytes at one moment (a
// barrier) over a baseline: the peak is exactly baseline + G*k.
func TestCounterExactPeak(t *testing.T) {
	const k = 4096
	for _, g := range []int{2, 8, 64} {
		var c Counter
		require.NoError(t, c.Alloc(1000))
		c.ResetPeak()
		var allocated, release sync.WaitGroup
		allocated.Add(g)
		release.Add(1)
		var done sync.WaitGroup
		for range g {
			done.Add(1)
			go func() {
				defer done.Done()
				assert.NoError(t, c.Alloc(k))
				allocated.Done()
				release.Wait()
				assert.NoError(t, c.Free(k))
			}()
		}
		allocated.Wait()
		assert.Equal(t, int64(1000+g*k), c.Current())
		release.Done()
		done.Wait()
		assert.Equal(t, int64(1000+g*k), c.Peak(), "g=%d", g)
		assert.Equal(t, int64(1000), c.Current())
	}
}

// TestCounterAllocWithinRace lets many goroutines race for room under a
// limit: exactly limit/k of them succeed.
func TestCounterAllocWithinRace(t *testing.T) {
	const k, limit, g = 10, 1000, 500
	var c Counter
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	start := make(chan struct{})
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if c.AllocWithin(k, limit) == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, limit/k, ok)
	assert.Equal(t, int64(limit), c.Current())
	assert.Equal(t, int64(limit), c.Peak())
}

// TestCounterResetPeakUnderLoad resets the peak while goroutines allocate
// and free: no reader ever sees a peak below the current figure, and once
// the load stops the peak is at least the final figure.
func TestCounterResetPeakUnderLoad(t *testing.T) {
	iters := 20000
	if testing.Short() {
		iters = 2000
	}
	var c Counter
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(64 * (i + 1))
			for j := 0; j < iters; j++ {
				assert.NoError(t, c.Alloc(n))
				if j%3 != 0 {
					assert.NoError(t, c.Free(n))
				}
			}
		}()
	}
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.ResetPeak()
			cur, peak := c.Load()
			if !assert.GreaterOrEqual(t, peak, cur) {
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	cur, peak := c.Load()
	assert.GreaterOrEqual(t, peak, cur)
	var want int64
	for i := range 4 {
		want += int64(64*(i+1)) * int64((iters+2)/3)
	}
	assert.Equal(t, want, cur)
	// The stored peak (not only the max in Load) must cover the current
	// figure once every Alloc has returned.
	assert.GreaterOrEqual(t, stdatomic.LoadInt64(&c.peak), cur)
}

// gauge is what Counter and Record share.
type gauge interface {
	Alloc(n int64) error
	Free(n int64) error
}

// refusedFreesUnderLoad runs three goroutines that allocate and free 64
// bytes correctly, one that frees more than is ever held, and read, all at
// once, and returns the iterations each ran: every bad free must be
// refused and no good operation may fail.
func refusedFreesUnderLoad(t *testing.T, g gauge, read func() bool) int {
	iters := 5000
	if testing.Short() {
		iters = 500
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iters {
				assert.NoError(t, g.Alloc(64))
				assert.NoError(t, g.Free(64))
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range iters {
			assert.ErrorIs(t, g.Free(1<<30), ErrFreeExceedsTracked)
		}
	}()
	go func() {
		defer wg.Done()
		for range iters {
			if !read() {
				return
			}
		}
	}()
	wg.Wait()
	return iters
}

// TestCounterRefusedFreeUnderLoad: readers never see a negative figure or a
// peak that includes a refused free, and the final figures are exact.
func TestCounterRefusedFreeUnderLoad(t *testing.T) {
	var c Counter
	refusedFreesUnderLoad(t, &c, func() bool {
		cur, peak := c.Load()
		return assert.GreaterOrEqual(t, cur, int64(0)) && assert.LessOrEqual(t, peak, int64(3*64))
	})
	cur, peak := c.Load()
	assert.Equal(t, int64(0), cur)
	assert.LessOrEqual(t, peak, int64(3*64))
	assert.Positive(t, peak)
}
