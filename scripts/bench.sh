#!/usr/bin/env bash
# The benchmark suite of bench/, as docs/performance.md reports it. The
# designs are alternated in time: the test binary is built once and run
# COUNT rounds, each running every benchmark once (-count 1; the parallel
# ones at -cpu 1,2,4,8), so that every design samples the same moments of
# the machine. benchstat summarises the rounds, and
# bench/internal/benchratio prints the ratios, each beside the median of its
# per-round ratios, and whether each stays within its bound. About 8 minutes on 2 cores with the
# defaults.
#
# Environment: COUNT (rounds, default 10), BENCHTIME (default 300ms), CPUS
# (default 1,2,4,8), OUT (a directory for bench.txt and the tables; default
# a new temporary one). Run it on a quiet machine: other load skews the
# figures, although alternating keeps it from biasing the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."

benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
count=${COUNT:-10}
benchtime=${BENCHTIME:-300ms}
cpus=${CPUS:-1,2,4,8}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

echo "== machine"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
go version
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

go test -c -o "$out/bench.test" ./bench/
run() {
	"$out/bench.test" -test.run '^$' -test.benchmem -test.count 1 -test.benchtime "$benchtime" "$@" | tee -a "$out/bench.txt"
}
: >"$out/bench.txt"
for i in $(seq "$count"); do
	echo "== round $i of $count: serial and Device (GOMAXPROCS=$(nproc)), then parallel (-cpu $cpus)"
	run -test.bench '^Benchmark(Serial|Device)$'
	run -test.bench '^BenchmarkParallel$' -test.cpu "$cpus"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

echo "== benchstat"
go run "$benchstat" "$out/bench.txt" | tee "$out/benchstat.txt"
go run "$benchstat" -format csv "$out/bench.txt" 2>/dev/null >"$out/benchstat.csv"

echo "== ratios and bounds (in parentheses and in 'median of rounds': the median of the per-round ratios)"
go run ./bench/internal/benchratio -raw "$out/bench.txt" <"$out/benchstat.csv" | tee "$out/ratios.md"
echo "(files in $out)"
