package tracker

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTable(t *testing.T) {
	var tab Table
	assert.Nil(t, tab.Lookup(0))
	r2, err := tab.Record(2)
	require.NoError(t, err)
	assert.Same(t, r2, tab.Lookup(2))
	assert.Nil(t, tab.Lookup(1), "only used ordinals have records")
	r0, err := tab.Record(0)
	require.NoError(t, err)
	assert.NotSame(t, r0, r2)
	again, err := tab.Record(2)
	require.NoError(t, err)
	assert.Same(t, r2, again)

	var seen []int
	tab.Range(func(i int, r *Record) bool {
		seen = append(seen, i)
		return true
	})
	assert.Equal(t, []int{0, 2}, seen)
	seen = nil
	tab.Range(func(i int, r *Record) bool {
		seen = append(seen, i)
		return false
	})
	assert.Equal(t, []int{0}, seen, "Range stops when f returns false")
}

func TestTableBadOrdinal(t *testing.T) {
	var tab Table
	for _, i := range []int{-1, MaxOrdinal + 1} {
		r, err := tab.Record(i)
		assert.Error(t, err, "ordinal %d", i)
		assert.Nil(t, r)
		assert.Nil(t, tab.Lookup(i))
	}
	tab.Range(func(int, *Record) bool {
		t.Error("a refused ordinal left a record")
		return true
	})
}

// TestTableConcurrentFirstUse creates the same ordinals from many goroutines
// at once: each ordinal gets exactly one record, and counts land on it.
func TestTableConcurrentFirstUse(t *testing.T) {
	const g, ordinals = 32, 8
	var tab Table
	var wg sync.WaitGroup
	start := make(chan struct{})
	got := make([][ordinals]*Record, g)
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range ordinals {
				r, err := tab.Record((i + w) % ordinals)
				assert.NoError(t, err)
				assert.NoError(t, r.Alloc(1))
				got[w][(i+w)%ordinals] = r
			}
		}()
	}
	close(start)
	wg.Wait()
	for i := range ordinals {
		r := tab.Lookup(i)
		require.NotNil(t, r)
		assert.Equal(t, int64(g), r.Tracked(), "ordinal %d", i)
		for w := range g {
			assert.Same(t, r, got[w][i])
		}
	}
}
