#!/usr/bin/env bash
# Instructions per operation of the root package's benchmarks, at a base
# commit and in the working tree, counted by valgrind's callgrind, which
# repeats to about 1% on a shared machine where time does not. Each
# benchmark runs alone under callgrind at two iteration counts (N1 and N2,
# -test.benchtime=Nx) with the collector and asynchronous preemption off
# (GOGC=off GODEBUG=asyncpreemptoff=1), and without the RDTSCP instruction,
# which the Go runtime uses where the processor has it and valgrind 3.19
# cannot decode (cpu.rdtscp=off; a run that dies of it would otherwise
# count a fraction of the work); the difference of the two totals
# divided by N2-N1 is the instructions of one operation, without the
# program's start and the benchmark's set-up. It prints, per benchmark, the
# base's count, this tree's and their ratio, for the whole program and for
# the library's own functions; a benchmark the base lacks is "missing"
# there.
#
# Environment: BASE (a commit; required), BENCH (a -test.bench pattern
# matching the benchmarks to count, each counted alone; default the pairs
# of BenchmarkPair), N1 and N2 (default 20000 and 120000), OVERLAY (test
# files of this tree copied into the base's before it is built, for
# benchmarks the base lacks; default alloc_bench_test.go), TAGS (build tags
# of both builds; with cuda, run it in the environment of
# scripts/test-cuda.sh: the fake driver on LD_LIBRARY_PATH, and, for a base
# that needs cuda.h to build, eval "$(./scripts/cuda-dev.sh)"), OUT (a
# directory for the results; default a new temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."

base=${BASE:?set BASE to the commit to compare with}
bench=${BENCH:-^BenchmarkPair$}
n1=${N1:-20000}
n2=${N2:-120000}
overlay=${OVERLAY-alloc_bench_test.go}
tags=${TAGS:-}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "bench-instructions.sh: valgrind is not installed (Debian: apt-get install valgrind)" >&2; exit 2; }

script=bench-instructions.sh
. scripts/bench-lib.sh
base_tree "$base"
machine "$base"
for f in $overlay; do cp "$f" "$tree/$f"; done
(cd "$tree" && go test -c -tags "$tags" -o "$out/base.test" .)
go test -c -tags "$tags" -o "$out/head.test" .

# The benchmarks the pattern selects, as leaves (the names -test.list does
# not give: each is listed by a run of one iteration).
names=$("$out/head.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1x | awk '/^Benchmark/ {n = $1; sub(/-[0-9]+$/, "", n); print n}')

# irs prints the instructions (Ir) that one run of binary $1 executes for
# benchmark $2 at $3 iterations: the program's, then those of the
# library's own functions (the packages of github.com/memtrack/memtrack,
# the benchmarks' own loops left out: the functions named Benchmark..., and
# the helpers of their loops, named bench... in the benchmarks' files),
# which leave out the runtime's work
# (the allocations, and the memory the OS hands the runtime, which can
# vary from run to run); "missing" where the binary has no such benchmark.
irs() {
	local pat
	pat="^$(sed -e 's/[][\.*^$()+?{}|]/\\&/g' -e 's|/|$/^|g' <<<"$2")\$"
	# cpu.rdtscp=off: valgrind (3.19) cannot run RDTSCP, with which the
	# runtime reads the clock while it spins on a contended lock, as the
	# threads of a cgo benchmark make it.
	if ! GOGC=off GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
		"$1" -test.run '^$' -test.bench "$pat" -test.benchtime "${3}x" -test.cpu 1 >"$out/run.txt" 2>"$out/cg.log"; then
		echo "$script: $1 $2 at $3 iterations failed under valgrind (its log: $out/cg.log)" >&2
		tail -n 5 "$out/cg.log" >&2
		exit 1
	fi
	if ! grep -q '^Benchmark' "$out/run.txt"; then
		echo missing missing
		return
	fi
	callgrind_annotate --auto=no --threshold=100 "$out/cg.out" | awk '
		/^ *[0-9,]+ .*PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
		/^ *[0-9,]+ \(.*:github\.com\/memtrack\/memtrack[.\/]/ && !/\.(Benchmark|bench[A-Z])/ { gsub(",", "", $1); own += $1 }
		END { print total, own }'
}

printf '%-44s %12s %12s %8s %12s %12s %8s\n' benchmark base/op head/op ratio base-lib/op head-lib/op ratio | tee "$out/instructions.txt"
for name in $names; do
	# Each count in a variable of its own first: a failed run ends the script.
	r=$(irs "$out/base.test" "$name" "$n1")
	read -r b1 bl1 <<<"$r"
	r=$(irs "$out/base.test" "$name" "$n2")
	read -r b2 bl2 <<<"$r"
	r=$(irs "$out/head.test" "$name" "$n1")
	read -r h1 hl1 <<<"$r"
	r=$(irs "$out/head.test" "$name" "$n2")
	read -r h2 hl2 <<<"$r"
	awk -v n="$name" -v b1="$b1" -v b2="$b2" -v h1="$h1" -v h2="$h2" -v bl1="$bl1" -v bl2="$bl2" -v hl1="$hl1" -v hl2="$hl2" -v d="$((n2 - n1))" '
		function per(a, b) { return (a == "missing" || b == "missing") ? "missing" : sprintf("%.1f", (b - a) / d) }
		function ratio(a, b) { return (a == "missing" || b == "missing" || a == 0) ? "-" : sprintf("%.3f", b / a) }
		BEGIN {
			b = per(b1, b2); h = per(h1, h2); bl = per(bl1, bl2); hl = per(hl1, hl2)
			printf "%-44s %12s %12s %8s %12s %12s %8s\n", n, b, h, ratio(b, h), bl, hl, ratio(bl, hl)
		}' | tee -a "$out/instructions.txt"
done
echo "(files in $out)"
