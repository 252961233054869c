#!/usr/bin/env bash
# The root package's Device-layer benchmarks at a base commit beside the
# working tree, alternated in time: both test binaries are built once and run
# COUNT rounds, each round running the base's and then this tree's
# benchmarks once (-count 1), so that both sample the same moments of the
# machine. benchstat compares the two, and each benchmark's per-round ratio
# (this tree over the base) is printed with its median.
#
# Issue 11 target 3 is judged with it: BenchmarkDeviceLayer (a 1 MiB
# Alloc+Free over a do-nothing backend) at most 0.75x the base, the commit
# at which the issue measured 117 ns.
#
# Environment: BASE (a commit; default 1682813, an early commit of the
# Device layer), PKG (the package, default the root one: "."), TAGS (build
# tags, default none; with cuda, run it where scripts/test-cuda.sh's
# environment is set), BENCH (a -test.bench pattern; default the Device
# layer without sites), COUNT (rounds, default 10), BENCHTIME (default
# 300ms), OVERLAY (test files of this tree copied into the base's before it
# is built, for a benchmark the base lacks that uses only what both have,
# as BenchmarkPair in alloc_bench_test.go does; default none), OUT (a
# directory for the results; default a new temporary one). The benchmark
# must exist under the same name at both commits, or come in OVERLAY.
set -euo pipefail
cd "$(dirname "$0")/.."

benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
base=${BASE:-1682813}
pkg=${PKG:-.}
tags=${TAGS:-}
bench=${BENCH:-^BenchmarkDeviceLayer/sites=off$}
count=${COUNT:-10}
benchtime=${BENCHTIME:-300ms}
overlay=${OVERLAY:-}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

script=bench-base.sh
. scripts/bench-lib.sh
base_tree "$base"
machine "$base"
echo "package: $pkg, tags: ${tags:-none}, benchmarks: $bench"

for f in $overlay; do cp "$f" "$tree/$f"; done
(cd "$tree" && go test -c -tags "$tags" -o "$out/base.test" "$pkg")
go test -c -tags "$tags" -o "$out/head.test" "$pkg"
: >"$out/base.txt"
: >"$out/head.txt"
for i in $(seq "$count"); do
	echo "== round $i of $count"
	"$out/base.test" -test.run '^$' -test.bench "$bench" -test.benchmem -test.count 1 -test.benchtime "$benchtime" | tee -a "$out/base.txt" | sed -n 's/^Benchmark/base &/p'
	"$out/head.test" -test.run '^$' -test.bench "$bench" -test.benchmem -test.count 1 -test.benchtime "$benchtime" | tee -a "$out/head.txt" | sed -n 's/^Benchmark/head &/p'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

echo "== benchstat base head"
go run "$benchstat" "$out/base.txt" "$out/head.txt" | tee "$out/benchstat.txt"

names() { grep '^Benchmark' "$1" | awk '{print $1}'; }
if ! diff <(names "$out/base.txt") <(names "$out/head.txt") >/dev/null; then
	echo "bench-base.sh: the two commits ran different benchmarks; no ratios (compare the lists):" >&2
	diff <(names "$out/base.txt" | sort -u) <(names "$out/head.txt" | sort -u) >&2 || true
	exit 1
fi
echo "== per-round ratios head/base (ns/op), sorted, and their median"
paste <(grep '^Benchmark' "$out/base.txt") <(grep '^Benchmark' "$out/head.txt") |
	awk '{for (i = 1; i <= NF; i++) if ($i == "ns/op") { if (!b) b = $(i-1); else h = $(i-1) } name = $1; sub(/-[0-9]+$/, "", name); print name, h / b; b = 0; h = 0}' |
	sort -k1,1 -k2,2g |
	awk '{r[$1] = r[$1] sprintf(" %.3f", $2); n[$1]++; v[$1, n[$1]] = $2}
	END {for (k in r) { m = n[k] % 2 ? v[k, (n[k] + 1) / 2] : (v[k, n[k] / 2] + v[k, n[k] / 2 + 1]) / 2; printf "%s:%s\n  median %.3f over %d rounds\n", k, r[k], m, n[k] }}' |
	tee "$out/ratios.txt"
echo "(files in $out)"
