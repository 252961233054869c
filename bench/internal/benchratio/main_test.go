package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sample is benchstat -format csv output in the shape the suite produces.
const sample = `goos: linux
,bench.txt,
,sec/op,CI
Serial/op=pair/design=atomic-2,1e-08,±1%
Serial/op=pair/design=Counter-2,1.2e-08,±2%
Serial/op=pair/design=mutexmap-2,6e-08,±3%
Parallel/load=spread/design=Counter,1e-08,±1%
Parallel/load=spread/design=mutexmap,5e-08,±1%
Parallel/load=spread/design=Counter-2,5e-09,±1%
Parallel/load=spread/design=mutexmap-2,4e-08,±1%
Device/size=4KiB/design=tracked-2,1.05e-06,±1%
Device/size=4KiB/design=untracked-2,1e-06,±1%
geomean,1e-08,

,bench.txt,
,allocs/op,CI
Serial/op=pair/design=Counter-2,0,±0%
Device/size=4KiB/design=tracked-2,2,±0%
geomean,,
`

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want key
	}{
		{"Serial/op=pair/design=Counter-2", key{"Serial/op=pair", "Counter", 2}},
		{"Serial/op=pair/design=Counter-rising-8", key{"Serial/op=pair", "Counter-rising", 8}},
		{"Parallel/load=one/design=mutexdev", key{"Parallel/load=one", "mutexdev", 1}},
		{"Serial/op=pair/design=Counter-rising", key{"Serial/op=pair", "Counter-rising", 1}},
	} {
		got, err := parseName(tc.name)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
	_, err := parseName("Serial/op=pair-2")
	assert.Error(t, err)
}

func TestTableAndTargets(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	require.Len(t, res.rows, 9)
	c := res.index[key{"Serial/op=pair", "Counter", 2}]
	require.NotNil(t, c)
	assert.Equal(t, [3]any{1.2e-08, "±2%", 0.0}, [3]any{c.sec, c.ci, c.allocs})
	// Rows of one group are ordered by procs.
	assert.Equal(t, []int{1, 1, 2, 2}, []int{res.rows[3].procs, res.rows[4].procs, res.rows[5].procs, res.rows[6].procs})

	var table strings.Builder
	res.table(&table, []string{"atomic", "mutexmap"}, pairs("Counter=mutexdev,tracked=untracked"))
	for _, line := range []string{
		"| Serial/op=pair | 2 | Counter | 12.0 ns | ±2% | 0 | 1.20x | 0.20x |  |  |",
		"| Parallel/load=spread | 2 | Counter | 5.00 ns | ±1% |  |  | 0.12x |  | 0.50x |",
		"| Device/size=4KiB | 2 | tracked | 1.05 µs | ±1% | 2 |  |  | 1.05x untracked |  |",
	} {
		assert.Contains(t, table.String(), line)
	}

	var tg strings.Builder
	res.targets(&tg)
	for _, line := range []string{
		"| Counter pair within 1.3x of the raw atomic pair | 1.200x |  | <= 1.3 | within |",
		"| Counter pair <= 1.05x the raw atomic pair, one goroutine | 1.200x |  | <= 1.05 | beyond |",
		"| Counter at least 4x faster than mutex+map, 1 goroutine on different devices | 0.200x |  | <= 0.25 | within |",
		"| Counter at least 4x faster than mutex+map, 4 goroutines on different devices | | | <= 0.25 | not measured |",
		"| Counter on different devices scales: time/op at 2 CPUs vs 1 (1.6x the throughput or more) | 0.500x |  | <= 0.625 | within |",
		"| CPU Alloc+Free 4 KiB: tracking overhead at most 10% | 1.050x |  | <= 1.1 | within |",
		"| Counter at least 4x faster than mutex+map, 2 goroutines on different devices | 0.125x |  | <= 0.25 | within |",
	} {
		assert.Contains(t, tg.String(), line)
	}
}

// rawRounds is raw go test output of three rounds in the suite's shape, as
// scripts/bench.sh writes it: in round 2 the machine was loaded, which
// moves both designs.
const rawRounds = `goos: linux
goarch: amd64
pkg: github.com/memtrack/memtrack/bench
cpu: Some CPU
BenchmarkSerial/op=pair/design=atomic-2         	100000000	        10.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSerial/op=pair/design=Counter-2        	100000000	        11.0 ns/op	       0 B/op	       0 allocs/op
PASS
ok  	github.com/memtrack/memtrack/bench	2.0s
goos: linux
BenchmarkSerial/op=pair/design=atomic-2         	100000000	        20.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSerial/op=pair/design=Counter
    some log output
BenchmarkSerial/op=pair/design=Counter-2        	100000000	        21.0 ns/op	       0 B/op	       0 allocs/op
PASS
BenchmarkSerial/op=pair/design=atomic-2         	100000000	        10.0 ns/op
BenchmarkSerial/op=pair/design=Counter-2        	100000000	        12.0 ns/op
BenchmarkParallel/load=one/design=Counter       	100000000	        12.5 ns/op
`

func TestParseRounds(t *testing.T) {
	rs, err := parseRounds(strings.NewReader(rawRounds))
	require.NoError(t, err)
	assert.InDeltaSlice(t, []float64{10e-9, 20e-9, 10e-9}, rs[key{"Serial/op=pair", "atomic", 2}], 1e-15)
	assert.InDeltaSlice(t, []float64{11e-9, 21e-9, 12e-9}, rs[key{"Serial/op=pair", "Counter", 2}], 1e-15)
	assert.InDeltaSlice(t, []float64{12.5e-9}, rs[key{"Parallel/load=one", "Counter", 1}], 1e-15)
	assert.Len(t, rs, 3)

	for _, bad := range []string{
		"BenchmarkSerial/op=pair/design=atomic-2 100 abc ns/op\n",
		"BenchmarkSerial/op=pair/design=atomic-2 100 10 B/op\n",
		"BenchmarkSerial/op=pair-2 100 10 ns/op\n",
	} {
		_, err := parseRounds(strings.NewReader(bad))
		assert.Error(t, err, bad)
	}
}

func TestRoundRatio(t *testing.T) {
	rs, err := parseRounds(strings.NewReader(rawRounds))
	require.NoError(t, err)
	atomic, counter := key{"Serial/op=pair", "atomic", 2}, key{"Serial/op=pair", "Counter", 2}
	// Per round: 1.10, 1.05, 1.20; the median is 1.10, where the ratio of
	// the medians (12/10) says 1.20.
	q, n := rs.ratio(counter, atomic)
	assert.Equal(t, 3, n)
	assert.InDelta(t, 1.10, q, 1e-9)
	// Different numbers of rounds do not line up: no ratio.
	_, n = rs.ratio(key{"Parallel/load=one", "Counter", 1}, atomic)
	assert.Zero(t, n)
	_, n = rs.ratio(key{"Serial/op=pair", "missing", 2}, atomic)
	assert.Zero(t, n)
	_, n = rounds(nil).ratio(counter, atomic)
	assert.Zero(t, n)
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1, 1, 9, 1, 9}, 1},
	} {
		assert.Equal(t, tc.want, median(tc.in), "%v", tc.in)
	}
}

func TestTableAndTargetsWithRounds(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	res.rounds, err = parseRounds(strings.NewReader(rawRounds))
	require.NoError(t, err)
	var table strings.Builder
	res.table(&table, []string{"atomic"}, pairs(""))
	assert.Contains(t, table.String(), "| Serial/op=pair | 2 | Counter | 12.0 ns | ±2% | 0 | 1.20x (1.10x) |  |  |")
	var tg strings.Builder
	res.targets(&tg)
	// The median of the rounds decides: 1.10 is beyond 1.05 and within 1.3.
	assert.Contains(t, tg.String(), "| Counter pair <= 1.05x the raw atomic pair, one goroutine | 1.200x | 1.100x (3) | <= 1.05 | beyond |")
	assert.Contains(t, tg.String(), "| Counter pair within 1.3x of the raw atomic pair | 1.200x | 1.100x (3) | <= 1.3 | within |")
}

func TestParseRejectsBadInput(t *testing.T) {
	_, err := parse(strings.NewReader(",f,\n,sec/op,CI\nSerial/op=pair/design=x,abc,±1%\n"))
	assert.Error(t, err)
	_, err = parse(strings.NewReader(",f,\n,sec/op,CI\nSerial/op=pair,1,±1%\n"))
	assert.Error(t, err)
}
