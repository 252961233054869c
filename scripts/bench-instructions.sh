#!/usr/bin/env bash
# Instructions per operation of the root package's benchmarks, at a base
# commit and in the working tree, counted by valgrind's callgrind, which
# repeats to about 1% on a shared machine where time does not. Each
# benchmark runs alone under callgrind at two iteration counts (N1 and N2,
# -test.benchtime=Nx) with the collector and asynchronous preemption off
# (GOGC=off GODEBUG=asyncpreemptoff=1); the difference of the two totals
# divided by N2-N1 is the instructions of one operation, without the
# program's start and the benchmark's set-up. It prints, per benchmark, the
# base's count, this tree's and their ratio.
#
# Environment: BASE (a commit; required), BENCH (a -test.bench pattern
# matching the benchmarks to count, each counted alone; default the pairs
# of BenchmarkPair), N1 and N2 (default 20000 and 120000), OVERLAY (test
# files of this tree copied into the base's before it is built, for
# benchmarks the base lacks; default alloc_bench_test.go), OUT (a directory
# for the results; default a new temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."

base=${BASE:?set BASE to the commit to compare with}
bench=${BENCH:-^BenchmarkPair$}
n1=${N1:-20000}
n2=${N2:-120000}
overlay=${OVERLAY-alloc_bench_test.go}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "bench-instructions.sh: valgrind is not installed (Debian: apt-get install valgrind)" >&2; exit 2; }

script=bench-instructions.sh
. scripts/bench-lib.sh
base_tree "$base"
machine "$base"
for f in $overlay; do cp "$f" "$tree/$f"; done
(cd "$tree" && go test -c -o "$out/base.test" .)
go test -c -o "$out/head.test" .

# The benchmarks the pattern selects, as leaves (the names -test.list does
# not give: each is listed by a run of one iteration).
names=$("$out/head.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1x | awk '/^Benchmark/ {n = $1; sub(/-[0-9]+$/, "", n); print n}')

# irs prints the instructions (Ir) that one run of binary $1 executes for
# benchmark $2 at $3 iterations.
irs() {
	local pat
	pat="^$(sed -e 's/[][\.*^$()+?{}|]/\\&/g' -e 's|/|$/^|g' <<<"$2")\$"
	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
		"$1" -test.run '^$' -test.bench "$pat" -test.benchtime "${3}x" -test.cpu 1 >/dev/null 2>"$out/cg.log"
	sed -n 's/^summary: //p' "$out/cg.out"
}

printf '%-44s %12s %12s %8s\n' benchmark base/op head/op ratio | tee "$out/instructions.txt"
for name in $names; do
	b1=$(irs "$out/base.test" "$name" "$n1")
	b2=$(irs "$out/base.test" "$name" "$n2")
	h1=$(irs "$out/head.test" "$name" "$n1")
	h2=$(irs "$out/head.test" "$name" "$n2")
	awk -v n="$name" -v b1="$b1" -v b2="$b2" -v h1="$h1" -v h2="$h2" -v d="$((n2 - n1))" \
		'BEGIN {b = (b2 - b1) / d; h = (h2 - h1) / d; printf "%-44s %12.1f %12.1f %8.3f\n", n, b, h, h / b}' | tee -a "$out/instructions.txt"
done
echo "(files in $out)"
