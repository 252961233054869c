package held

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrent: goroutines allocate and free in stream order on several
// streams at once while others read the figure; halfway, one stream is
// held back (it runs nothing). Where the frees behind the hold cannot be
// taken over (the allocations are on other streams), every reading counts
// at least those returned so far (none leaves before its stream has run
// it), and once the writers are done, exactly those, the other streams
// having run theirs. Where allocations on the held stream take its frees
// over, the figure is, once the writers are done, never below what the
// device holds, and nothing once the stream runs. The goroutines start
// and stop on barriers; run it under the race detector.
func TestConcurrent(t *testing.T) {
	const workers, readers, pairs, size = 4, 2, 200, 1 << 10
	for _, tc := range []struct {
		name    string
		held    Stream
		streams []Stream // the writers' streams to free on, in turn
		allocOn Stream   // where each buffer is allocated; Stream{} for its free's stream
	}{
		{"a stream held, beside another", streamA, []Stream{streamA, streamC}, streamB},
		{"a stream not ordered held, beside another", unordered, []Stream{unordered, streamC}, streamB},
		{"three streams, one held, allocations taking frees over", streamB, []Stream{streamA, streamB, streamC}, Stream{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFig(t)
			for _, s := range append(tc.streams, tc.allocOn) {
				h.d.setRunning(s.Handle, true)
			}
			takeOver := tc.allocOn == Stream{}
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
							if !takeOver {
								assert.GreaterOrEqual(t, cur, n*size, "a free behind the hold left the figure")
							}
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
							on := tc.allocOn
							if takeOver {
								on = s
							}
							h.alloc(on, size)
							h.free(s, size)
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
			cur, _ := h.f.Load() // every stream idle: every free learned executed
			require.Zero(t, cur)
			h.d.setRunning(tc.held.Handle, false)
			holding = true
			phase()
			n := behind.Load()
			require.Positive(t, n)
			cur, _ = h.f.Load()
			if takeOver {
				assert.GreaterOrEqual(t, cur, h.d.holds(), "below what the device holds")
				assert.LessOrEqual(t, cur, n*size, "more than the frees behind the hold")
			} else {
				assert.Equal(t, n*size, cur, "the figure counts the frees behind the hold, and no other")
			}
			assert.Equal(t, cur, h.f.Pending(), "they are the bytes pending")
			assert.Equal(t, cur, h.f.Pooled())

			h.d.setRunning(tc.held.Handle, true)
			cur, _ = h.f.Load()
			assert.Zero(t, cur, "every free retired")
			assert.Zero(t, h.f.Pending())
			assert.Zero(t, h.f.Pooled())
			assert.Zero(t, h.f.npending.Load())
		})
	}
}
