// Package interleave runs the designs a benchmark compares in alternating
// blocks, so that load which drifts more slowly than a block falls on each
// of them alike and cancels from their ratios.
package interleave

import (
	"testing"
	"time"
)

// Run calls each of blocks once per iteration of b.Loop, each round
// starting with the next block, so that none always runs first or after
// the same one. Each block runs per pairs (or whatever the benchmark
// compares); Run returns each block's total time and the pairs each ran.
func Run(b *testing.B, per int, blocks ...func()) (took []time.Duration, pairs int) {
	took = make([]time.Duration, len(blocks))
	round := 0
	for b.Loop() {
		for k := range blocks {
			i := (round + k) % len(blocks)
			t0 := time.Now()
			blocks[i]()
			took[i] += time.Since(t0)
		}
		round++
	}
	return took, round * per
}
