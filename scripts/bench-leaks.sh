#!/usr/bin/env bash
# What watching a device for leaks (Device.Leaks().Enable) adds to an
# Alloc+Free pair: BenchmarkLeakWatch on the CPU and, where TAGS=cuda (run
# it where scripts/test-cuda.sh's environment is set: cuda-dev.sh's
# variables and the fake driver, or a real one, on LD_LIBRARY_PATH),
# BenchmarkCUDALeakWatch. The test binary is built once and run COUNT
# rounds, each running every benchmark's watch=off and watch=on rows one
# after the other, so that each round's pair samples the same moment of
# the machine; benchstat compares the columns, and the
# per-round ratio (on/off) and difference (on - off, ns) are printed with
# their medians.
#
# Environment: TAGS (default none), COUNT (default 10), BENCHTIME (default
# 200ms), OUT (a directory for the results; default a new temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."

benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
tags=${TAGS:-}
count=${COUNT:-10}
benchtime=${BENCHTIME:-200ms}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
bench='^BenchmarkLeakWatch$'
if [[ $tags == *cuda* ]]; then
	bench='^Benchmark(CUDA)?LeakWatch$'
fi

echo "== machine"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
go version
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo "head: $(git log -1 --format='%h %s')"
go test -c -tags "$tags" -o "$out/memtrack.test" .
: >"$out/watch.txt"
for i in $(seq "$count"); do
	echo "== round $i of $count"
	"$out/memtrack.test" -test.run '^$' -test.bench "$bench" -test.benchmem -test.count 1 -test.benchtime "$benchtime" | tee -a "$out/watch.txt" | grep '^Benchmark' || true
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

echo "== benchstat -col /watch"
go run "$benchstat" -col /watch "$out/watch.txt" | tee "$out/benchstat.txt"

echo "== per-round on/off ratio and on - off difference (ns), sorted, and their medians"
grep '^Benchmark' "$out/watch.txt" |
	awk '{name = $1; sub(/-[0-9]+$/, "", name); w = name; sub(/.*\/watch=/, "", w); sub(/\/watch=[a-z]+$/, "", name)
		for (i = 1; i <= NF; i++) if ($i == "ns/op") v = $(i-1)
		if (w == "off") off[name] = v; else if (name in off) { print name, v / off[name], v - off[name]; delete off[name] }}' >"$out/rounds.txt"
median() { sort -g | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for name in $(cut -d' ' -f1 "$out/rounds.txt" | sort -u); do
	ratio=$(awk -v n="$name" '$1 == n {print $2}' "$out/rounds.txt" | median)
	diff=$(awk -v n="$name" '$1 == n {print $3}' "$out/rounds.txt" | median)
	rounds=$(grep -c "^$name " "$out/rounds.txt")
	printf '%s: on/off %.2f, on - off %.0f ns (medians over %d rounds)\n' "$name" "$ratio" "$diff" "$rounds"
done | tee "$out/ratios.txt"
echo "(files in $out)"
