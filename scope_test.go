package memtrack

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPeakScope(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	d := ds[0]
	base := mustAlloc(t, d, 1000)
	defer base.Free()

	outer, err := d.OpenPeakScope()
	require.NoError(t, err)
	assert.Equal(t, d, outer.Device())
	assert.Equal(t, int64(1000), outer.PeakTracked(), "a scope starts at the bytes tracked")
	a := mustAlloc(t, d, 5000)
	require.NoError(t, a.Free())
	inner, err := d.OpenPeakScope()
	require.NoError(t, err)
	b := mustAlloc(t, d, 2000)
	d.ResetPeakMemoryStats()
	require.NoError(t, b.Free())
	other := mustAlloc(t, ds[1], 9000) // another device
	require.NoError(t, other.Free())

	assert.Equal(t, int64(6000), outer.PeakTracked())
	assert.Equal(t, int64(3000), inner.PeakTracked())
	assert.Equal(t, int64(3000), inner.PeakHeld())
	assert.Equal(t, int64(3000), d.MaxMemoryAllocated(), "the device's peak since its reset")

	require.NoError(t, inner.Close())
	assert.True(t, inner.Closed())
	c := mustAlloc(t, d, 10000)
	require.NoError(t, c.Free())
	assert.Equal(t, int64(3000), inner.PeakTracked(), "reading a closed scope gives its peak at Close")
	assert.Equal(t, int64(11000), outer.PeakTracked())
	err = inner.Close()
	assert.ErrorIs(t, err, ErrScopeClosed, "closing twice")
	assert.Equal(t, int64(3000), inner.PeakTracked(), "a second Close changes nothing")
	require.NoError(t, outer.Close())

	var nilScope *PeakScope
	assert.ErrorIs(t, nilScope.Close(), ErrInvalidArgument)
	assert.Zero(t, nilScope.PeakTracked())
	assert.Zero(t, nilScope.PeakHeld())
	assert.False(t, nilScope.Closed())
	assert.Equal(t, Device{}, nilScope.Device())
	_, err = Device{kind: KindCUDA, ordinal: 5}.OpenPeakScope()
	assert.ErrorIs(t, err, ErrInvalidOrdinal)
	_, r, err := d.lookup(use)
	require.NoError(t, err)
	assert.False(t, r.HasOpenScopes(), "every scope is closed")
}

// TestPeakScopesConcurrent: goroutines each open a scope, allocate their
// block and meet at a barrier (so every block is held at once), then free,
// close and check: every scope saw the sum of the blocks, whoever opened
// it, with ResetPeakMemoryStats running throughout.
func TestPeakScopesConcurrent(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	const workers = 6
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	stop := make(chan struct{})
	resets := make(chan struct{})
	go func() {
		defer close(resets)
		for {
			select {
			case <-stop:
				return
			default:
				d.ResetPeakMemoryStats()
			}
		}
	}()
	var sum int64
	for w := range workers {
		sum += int64(w+1) << 10
	}
	for r := range rounds {
		var held sync.WaitGroup
		held.Add(workers)
		peaks := make([]int64, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc, err := d.OpenPeakScope()
				if !assert.NoError(t, err) {
					held.Done()
					return
				}
				b, err := d.Alloc(int64(w+1) << 10)
				assert.NoError(t, err)
				held.Done()
				held.Wait()
				assert.NoError(t, b.Free())
				assert.NoError(t, sc.Close())
				peaks[w] = sc.PeakTracked()
			}()
		}
		wg.Wait()
		for w, p := range peaks {
			require.Equal(t, sum, p, "round %d, worker %d", r, w)
		}
	}
	close(stop)
	<-resets
}
