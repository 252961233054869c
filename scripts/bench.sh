#!/usr/bin/env bash
# The benchmark suite of bench/, as the README's Performance section reports
# it: every benchmark -count times (the parallel ones at -cpu 1,2,4,8), the
# summary by benchstat, then the ratios and the targets by
# bench/internal/benchratio. About 7 minutes on 2 cores.
#
# Environment: COUNT (default 10), BENCHTIME (default 400ms), CPUS (default
# 1,2,4,8), OUT (a directory for bench.txt and the tables; default a new
# temporary one). Run it on a quiet machine: other load skews the figures.
set -euo pipefail
cd "$(dirname "$0")/.."

benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
count=${COUNT:-10}
benchtime=${BENCHTIME:-400ms}
cpus=${CPUS:-1,2,4,8}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

echo "== machine"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
go version
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

run() {
	go test -run '^$' -benchmem -count "$count" -benchtime "$benchtime" "$@" ./bench/ | tee -a "$out/bench.txt"
}
: >"$out/bench.txt"
echo "== go test -bench (serial and Device, GOMAXPROCS=$(nproc))"
run -bench '^Benchmark(Serial|Device)$'
echo "== go test -bench (parallel, -cpu $cpus)"
run -bench '^BenchmarkParallel$' -cpu "$cpus"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

echo "== benchstat"
go run "$benchstat" "$out/bench.txt" | tee "$out/benchstat.txt"
go run "$benchstat" -format csv "$out/bench.txt" 2>/dev/null >"$out/benchstat.csv"

echo "== ratios and targets"
go run ./bench/internal/benchratio <"$out/benchstat.csv" | tee "$out/ratios.md"
echo "(files in $out)"
