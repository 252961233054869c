package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// rounds holds, for each benchmark, its time per operation in seconds in
// every round of the raw go test output, in order: scripts/bench.sh runs
// every benchmark once per round, so the i-th result of one benchmark and
// the i-th of another were measured in the same round, moments apart.
type rounds map[key][]float64

// parseRounds reads raw go test -bench output (several runs concatenated)
// and collects the ns/op of every result line. Lines that are not results
// (the goos/pkg headers, PASS, ok, a benchmark's name printed alone before
// its log output) are skipped; a result line whose name or time cannot be
// read is an error.
func parseRounds(in io.Reader) (rounds, error) {
	rs := rounds{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // not a result: a name followed by log output
		}
		i := slices.Index(f, "ns/op")
		if i < 3 {
			return nil, fmt.Errorf("line %d: %q has no ns/op", line, sc.Text())
		}
		ns, err := strconv.ParseFloat(f[i-1], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: ns/op %q: %w", line, f[i-1], err)
		}
		k, err := parseName(strings.TrimPrefix(f[0], "Benchmark"))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		rs[k] = append(rs[k], ns*1e-9)
	}
	return rs, sc.Err()
}

// ratio returns the median over the rounds of num's time divided by den's
// in the same round, and the number of rounds. It returns 0 rounds when
// either is missing or they ran a different number of times (the rounds
// would not line up).
func (rs rounds) ratio(num, den key) (float64, int) {
	a, b := rs[num], rs[den]
	if len(a) == 0 || len(a) != len(b) {
		return 0, 0
	}
	q := make([]float64, len(a))
	for i := range a {
		if b[i] <= 0 {
			return 0, 0
		}
		q[i] = a[i] / b[i]
	}
	return median(q), len(q)
}

// median returns the median of v (the mean of the middle two for an even
// count); v is reordered.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
