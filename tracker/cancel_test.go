package tracker

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecordCancel(t *testing.T) {
	var r Record
	require.NoError(t, r.Alloc(100))
	require.NoError(t, r.Alloc(40))
	require.NoError(t, r.Cancel(40))
	s := r.Snapshot()
	assert.Equal(t, Stats{Tracked: 100, PeakTracked: 140, Buffers: 1, PeakBuffers: 2, AllocBytes: 100, Allocs: 1, FailedAllocs: 1}, s,
		"a cancelled Alloc leaves the cumulative figures as if it never happened, counts a failure and keeps the peak")
	require.NoError(t, r.Free(100))
	s = r.Snapshot()
	assert.Equal(t, int64(1), s.Frees)
	assert.Equal(t, int64(100), s.FreedBytes)

	for _, tc := range []struct {
		name string
		n    int64
		err  error
	}{
		{"zero", 0, ErrInvalidSize},
		{"negative", -1, ErrInvalidSize},
		{"more than held", 1, ErrFreeExceedsTracked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := r.Snapshot()
			assert.ErrorIs(t, r.Cancel(tc.n), tc.err)
			assert.Equal(t, before, r.Snapshot(), "a refused Cancel changes nothing")
		})
	}
}

// TestRecordCancelUnderLoad cancels allocations while others allocate, free
// and read: every snapshot is one consistent state, and the end matches
// the operations that stood.
func TestRecordCancelUnderLoad(t *testing.T) {
	var r Record
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range rounds {
				n := int64(g*7 + i%13 + 1)
				if err := r.Alloc(n); err != nil {
					panic(err)
				}
				if i%2 == 0 {
					if err := r.Cancel(n); err != nil {
						panic(err)
					}
				} else if err := r.Free(n); err != nil {
					panic(err)
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readErr error
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := r.Snapshot()
			if s.Allocs-s.Frees != s.Buffers || s.AllocBytes-s.FreedBytes != s.Tracked || s.Tracked < 0 || s.Frees < 0 {
				readErr = assert.AnError
				return
			}
		}
	}()
	close(start)
	wg.Wait()
	close(stop)
	rwg.Wait()
	require.NoError(t, readErr, "a snapshot was not one consistent state")
	s := r.Snapshot()
	half := int64(4 * rounds / 2)
	assert.Equal(t, half, s.Allocs)
	assert.Equal(t, half, s.Frees)
	assert.Equal(t, half, s.FailedAllocs)
	assert.Zero(t, s.Tracked)
	assert.Zero(t, s.Buffers)
}
