package rendertest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Categories makes n categories on d, "layer000" to "layer(n-1)", and
// allocates in category i one buffer of (i+1) KiB, freed when the test
// ends: category i tracks (i+1) KiB. Run it in a child (InChild): a
// device's categories stay for the life of the process.
func Categories(t *testing.T, d memtrack.Device, n int) []memtrack.Category {
	t.Helper()
	cats := make([]memtrack.Category, n)
	for i := range cats {
		c, err := d.Category(fmt.Sprintf("layer%03d", i))
		require.NoError(t, err)
		cats[i] = c
		b, err := c.Alloc(int64(i+1) << 10)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, b.Free()) })
	}
	return cats
}

// Churn allocates and frees 64 bytes in the categories from goroutines,
// each buffer freed before the next, rounds times each (0: no end), until
// the returned func is called, which waits for them: the categories'
// figures change while a renderer reads them, and come back to what they
// were.
func Churn(t *testing.T, cats []memtrack.Category, goroutines, rounds int) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r, i := 0, g; rounds == 0 || r < rounds; r, i = r+1, i+goroutines {
				select {
				case <-done:
					return
				default:
				}
				b, err := cats[i%len(cats)].Alloc(64)
				if err != nil {
					t.Error(err)
					return
				}
				if err := b.Free(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
