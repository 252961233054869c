package tracker

import (
	"runtime"
	"sync"
	stdatomic "sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// raceFor is how long each race-reproducing stress test runs: long enough
// to reproduce the defects it guards against on a loaded 2-core machine,
// short under -short.
func raceFor() time.Duration {
	if testing.Short() {
		return 200 * time.Millisecond
	}
	return 2 * time.Second
}

// loop runs f in n goroutines until stop is closed, and returns a function
// that waits for them.
func loop(n int, stop <-chan struct{}, f func()) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				f()
			}
		}()
	}
	return wg.Wait
}

// TestRecordLimitPromise: six goroutines loop
// Alloc(k)/Free(k) while the test switches the limit between 1<<40 and k,
// which leaves room for one buffer. An allocation that lands after
// SetLimit(k) returned must not take Current past k. After SetLimit(k)
// returns, the test reads Current again and again: a rise between two
// reads means allocations landed in between, after SetLimit(k), and the
// last of them left Current at least at the later figure, so that figure
// must be within k.
//
// The test runs with more threads than cores, so that the kernel suspends
// threads at any instruction, also between an Alloc's reading of the limit
// and its add, which is the window this test looks for.
func TestRecordLimitPromise(t *testing.T) {
	var r Record
	if bad, rounds := limitPromise(t, &r, 0); bad > 0 {
		t.Errorf("Current rose past a limit set before (%d times in %d rounds)", bad, rounds)
	}
}

// TestRecordLimitPromiseWithoutNewGenerations is TestRecordLimitPromise
// where the tight limit comes back to the loose limit's generation: 30 more
// SetLimits of the loose limit precede it, so that it is the 31st since
// the allocators took the loose one, and the generations, which cycle
// through 31, come round. A compare-and-swap of the exact path prepared
// under the loose limit and suspended over those SetLimits then finds the
// held bytes, the tag and the generation as they were. Before the exact
// path checked the limit again after its compare-and-swap, this failed in
// every run (hundreds of rises past the limit); with a single SetLimit
// between, CI saw it twice in 102,134 rounds.
func TestRecordLimitPromiseWithoutNewGenerations(t *testing.T) {
	var r Record
	if bad, rounds := limitPromise(t, &r, 30); bad > 0 {
		t.Errorf("Current rose past a limit set before (%d times in %d rounds)", bad, rounds)
	}
}

// limitPromise runs TestRecordLimitPromise's race on r and returns how many
// rises past the limit it saw, in how many rounds; each round sets the
// loose limit again more times before the tight one.
func limitPromise(t *testing.T, r *Record, more int) (bad, rounds int) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const k = 1000
	stop := make(chan struct{})
	wait := loop(6, stop, func() {
		if r.Alloc(k) == nil {
			for range 8 {
				_ = r.Tracked() // hold the buffer a moment
			}
			assert.NoError(t, r.Free(k))
		}
	})
	deadline := time.Now().Add(raceFor())
	for ; time.Now().Before(deadline); rounds++ {
		assert.NoError(t, r.SetLimit(1<<40))
		for range 20 {
			_ = r.Tracked() // let the allocators take the loose limit
		}
		for range more {
			assert.NoError(t, r.SetLimit(1<<40))
		}
		assert.NoError(t, r.SetLimit(k))
		prev := r.Tracked()
		for range 20 {
			c := r.Tracked()
			if c > k && c > prev {
				bad++
			}
			prev = c
		}
	}
	close(stop)
	wait()
	return bad, rounds
}

// TestRecordResetAttribution: ResetAccumulated racing
// Allocs and Frees attributes every operation wholly to one side of the
// reset. The cumulative figures after a reset count only operations that
// had not completed when the reset began, byte figures agree with counts
// (every buffer is 64 bytes) once nothing is in flight, and no figure is
// ever negative.
func TestRecordResetAttribution(t *testing.T) {
	const size = 64
	var r Record
	var begunA, doneA, begunF, doneF stdatomic.Int64
	deadline := time.Now().Add(raceFor())
	rounds, bad := 0, 0
	for ; time.Now().Before(deadline) && bad < 10; rounds++ {
		stop := make(chan struct{})
		wait := loop(2, stop, func() {
			begunA.Add(1)
			if !assert.NoError(t, r.Alloc(size)) {
				return
			}
			doneA.Add(1)
			for range 4 {
				_ = r.Tracked() // hold the buffer a moment
			}
			begunF.Add(1)
			assert.NoError(t, r.Free(size))
			doneF.Add(1)
		})
		var a0, f0 int64
		for range 50 {
			a0, f0 = doneA.Load(), doneF.Load()
			r.ResetAccumulated()
			s := r.Snapshot()
			if s.Allocs < 0 || s.Frees < 0 || s.AllocBytes < 0 || s.FreedBytes < 0 || s.FailedAllocs != 0 {
				bad++
				t.Errorf("round %d: impossible figures right after a reset: %+v", rounds, s)
			}
		}
		close(stop)
		wait()
		// Quiet now: the last reset began after a0 allocations and f0
		// frees had completed, so at most the rest can count after it.
		s := r.Snapshot()
		maxA, maxF := begunA.Load()-a0, begunF.Load()-f0
		if s.Allocs > maxA || s.Frees > maxF || s.AllocBytes != size*s.Allocs || s.FreedBytes != size*s.Frees ||
			s.Tracked != 0 || s.Buffers != 0 || s.Frees-s.Allocs < 0 || s.Frees-s.Allocs > 2 {
			bad++
			t.Errorf("round %d: at quiescence %+v (at most %d allocs and %d frees after the reset)", rounds, s, maxA, maxF)
		}
	}
}

// TestRecordCumulativeMonotonic: readers beside Allocs, Frees and
// ResetAccumulated never see a negative cumulative figure, and between two
// snapshots that no reset overlapped no cumulative figure decreases (they
// feed Prometheus counters).
func TestRecordCumulativeMonotonic(t *testing.T) {
	for _, resets := range []bool{false, true} {
		name := "no resets"
		if resets {
			name = "with resets"
		}
		t.Run(name, func(t *testing.T) {
			var r Record
			stop := make(chan struct{})
			waitW := loop(2, stop, func() {
				if assert.NoError(t, r.Alloc(64)) {
					assert.NoError(t, r.Free(64))
				}
				if assert.NoError(t, r.Alloc(1000)) {
					assert.NoError(t, r.Free(1000))
				}
			})
			// With resets, a resetter makes one reset per request, so that
			// the reader takes snapshots both while a reset runs (checking
			// that no figure is negative) and, after it has signalled the
			// reset done, with none in flight (checking that no figure runs
			// backwards): a handshake, not a timing, decides which.
			requests, resetDone := make(chan struct{}), make(chan struct{})
			if resets {
				go func() {
					for range requests {
						r.ResetAccumulated()
						resetDone <- struct{}{}
					}
				}()
			}
			deadline := time.Now().Add(raceFor())
			bad, checked := 0, 0
			for time.Now().Before(deadline) && bad < 10 {
				if resets {
					requests <- struct{}{} // a reset begins
				}
				for _, s := range []Stats{r.Snapshot(), r.Snapshot()} {
					if s.Allocs < 0 || s.Frees < 0 || s.AllocBytes < 0 || s.FreedBytes < 0 {
						bad++
						t.Errorf("negative figure: %+v", s)
					}
				}
				if resets {
					<-resetDone // no reset in flight from here
				}
				s1 := r.Snapshot()
				s2 := r.Snapshot()
				checked++
				if s2.Allocs < s1.Allocs || s2.Frees < s1.Frees || s2.AllocBytes < s1.AllocBytes || s2.FreedBytes < s1.FreedBytes {
					bad++
					t.Errorf("a cumulative figure ran backwards:\n%+v\n%+v", s1, s2)
				}
			}
			close(stop)
			close(requests)
			waitW()
			assert.Positive(t, checked)
		})
	}
}
