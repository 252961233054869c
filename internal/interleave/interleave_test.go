package interleave

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunRotates checks that every block runs once a round, that each round
// starts with the next block, and that the pairs are counted per block.
func TestRunRotates(t *testing.T) {
	var order []int
	var took []time.Duration
	var pairs, rounds int
	testing.Benchmark(func(b *testing.B) {
		order = order[:0]
		blocks := make([]func(), 3)
		for i := range blocks {
			blocks[i] = func() { order = append(order, i) }
		}
		took, pairs = Run(b, 64, blocks...)
		rounds = b.N
	})
	require.Positive(t, rounds)
	require.Len(t, order, 3*rounds)
	for r := range rounds {
		assert.Equal(t, []int{r % 3, (r + 1) % 3, (r + 2) % 3}, order[3*r:3*r+3], "round %d", r)
	}
	assert.Equal(t, 64*rounds, pairs)
	assert.Len(t, took, 3)
}
