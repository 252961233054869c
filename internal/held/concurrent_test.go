package held

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrent: goroutines allocate and free in stream order on two
// streams at once, their events numbered in whatever order they record
// them and pushed in another, while others read the figure; halfway, one
// stream is held back (it reaches no event). At every reading, the figure
// counts at least the frees returned behind the hold (none leaves before
// its stream has reached it); once the writers are done, it counts exactly
// those, and they are exactly the frees pending; once the stream runs
// again, none is. Run it under the race detector.
func TestConcurrent(t *testing.T) {
	const workers, readers, pairs, size = 4, 2, 200, 1 << 10
	for _, tc := range []struct {
		name    string
		held    Stream
		streams []Stream // the writers' streams, in turn
	}{
		{"a stream held, beside another", streamA, []Stream{streamA, streamB}},
		{"a stream not ordered held, beside another", unordered, []Stream{unordered, streamC}},
		{"three streams, one held", streamB, []Stream{streamA, streamB, streamC}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			for _, s := range tc.streams {
				h.d.setRunning(s, true)
			}
			var behind atomic.Int64 // frees returned on the held stream behind the hold
			holding := false
			phase := func() {
				var start, writers, reading sync.WaitGroup
				start.Add(1)
				stop := make(chan struct{})
				for range readers {
					reading.Add(1)
					go func() {
						defer reading.Done()
						start.Wait()
						for {
							select {
							case <-stop:
								return
							default:
							}
							n := behind.Load()
							cur, peak := h.f.Load()
							assert.GreaterOrEqual(t, cur, n*size, "a free behind the hold left the figure")
							assert.GreaterOrEqual(t, peak, cur)
						}
					}()
				}
				for w := range workers {
					writers.Add(1)
					go func() {
						defer writers.Done()
						start.Wait()
						for i := range pairs {
							s := tc.streams[(w+i)%len(tc.streams)]
							h.allocFree(s, size)
							if holding && s == tc.held {
								behind.Add(1)
							}
						}
					}()
				}
				start.Done()
				writers.Wait()
				close(stop)
				reading.Wait()
			}

			phase()
			h.d.setRunning(tc.held, false)
			holding = true
			phase()
			n := behind.Load()
			require.Positive(t, n)
			cur, _ := h.f.Load()
			assert.Equal(t, n*size, cur, "the figure counts the frees behind the hold, and no other")
			assert.Equal(t, n, h.f.npending.Load(), "they are the frees pending")
			assert.Equal(t, n*size, h.f.Pooled())

			h.d.setRunning(tc.held, true)
			cur, _ = h.f.Load()
			assert.Zero(t, cur, "every free retired")
			assert.Zero(t, h.f.npending.Load())
			assert.Zero(t, h.f.Pooled())
			_, destroyed := h.q.reads()
			assert.Empty(t, destroyed)
			assert.Equal(t, h.d.created, h.spares(), "every event kept for reuse")
		})
	}
}
