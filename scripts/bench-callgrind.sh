#!/usr/bin/env bash
# Instructions per operation of benchmarks, at a base commit and in the
# working tree, counted by callgrind (Debian's valgrind), which repeats to
# about 1% where timings on a shared machine do not: each benchmark runs
# under callgrind at two -test.benchtime counts, N and 2N iterations, with
# GOGC=off GODEBUG=asyncpreemptoff=1, and the difference of the two
# instruction counts divided by N is what one operation costs, the start-up
# and the benchmark's set-up cancelled out; -test.cpu 1, so that no idle P
# spins in the scheduler meanwhile. Two figures per side: the
# instructions of the library's own functions (memtrack/op: the functions
# of the packages of github.com/memtrack/memtrack, the benchmark's own
# loop left out) and the program's (total/op: with the loop and the
# runtime's, the allocations among them). Both repeat to the instruction
# from run to run.
#
#	./scripts/bench-callgrind.sh                          # the defaults below
#	BASE=fef912d BENCH='^BenchmarkDeviceLayer/sites=off$' ./scripts/bench-callgrind.sh
#
# Environment: BASE (a commit; default main), PKG (default the root
# package: "."), TAGS (build tags, default none), BENCH (a space-separated
# list of -test.bench patterns, each counted alone; default the
# uncategorised pair and the categorised pair), N (default 200000), EXTRA
# (files of the working tree copied into the base's tree before it is
# built, for a benchmark the base lacks; default the categorised pair's
# benchmark file; EXTRA= copies none). A benchmark missing at one side is reported as such.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${BASE:-main}
pkg=${PKG:-.}
tags=${TAGS:-}
benches=${BENCH:-'^BenchmarkDeviceLayer/sites=off$ ^BenchmarkCategoryPair/category=first$ ^BenchmarkCategoryPair/category=last$'}
n=${N:-200000}
extra=${EXTRA-category_bench_test.go}
command -v valgrind >/dev/null || { echo "bench-callgrind.sh: needs valgrind (apt-get install -y valgrind)" >&2; exit 2; }

script=bench-callgrind.sh
. scripts/bench-lib.sh
base_tree "$base"
machine "$base"
for f in $extra; do
	cp "$f" "$tree/$(dirname "$f")/"
done
out=$(mktemp -d)
(cd "$tree" && go test -c -tags "$tags" -o "$out/base.test" "$pkg")
go test -c -tags "$tags" -o "$out/head.test" "$pkg"

# count BIN PATTERN ITERATIONS prints the instructions callgrind counted:
# the module's functions', then the program's.
count() {
	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
		"$1" -test.run '^$' -test.bench "$2" -test.benchtime "${3}x" -test.count 1 -test.cpu 1 >"$out/run.txt" 2>"$out/vg.txt"
	if ! grep -q '^Benchmark' "$out/run.txt"; then
		echo missing
		return
	fi
	callgrind_annotate --auto=no --threshold=100 "$out/cg.out" | awk '
		/^ *[0-9,]+ .*PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
		/^ *[0-9,]+ \(.*:github\.com\/memtrack\/memtrack[.\/]/ && !/\.Benchmark/ { gsub(",", "", $1); own += $1 }
		END { print own, total }'
}

# per BIN PATTERN prints the module's and the program's instructions per
# operation.
per() {
	local one two
	one=$(count "$1" "$2" "$n")
	two=$(count "$1" "$2" $((2 * n)))
	if [ "$one" = missing ] || [ "$two" = missing ]; then
		echo "missing missing"
		return
	fi
	echo "$one $two" | awk -v n="$n" '{ printf "%.1f %.1f", ($3 - $1) / n, ($4 - $2) / n }'
}

printf '%-45s %12s %12s %8s %12s %12s %8s\n' benchmark base-memtrack/op head-memtrack/op ratio base-total/op head-total/op ratio
for b in $benches; do
	read -r bo bt <<<"$(per "$out/base.test" "$b")"
	read -r ho ht <<<"$(per "$out/head.test" "$b")"
	ratio() { if [ "$1" = missing ] || [ "$2" = missing ]; then echo -; else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b / a }'; fi; }
	printf '%-45s %12s %12s %8s %12s %12s %8s\n' "$b" "$bo" "$ho" "$(ratio "$bo" "$ho")" "$bt" "$ht" "$(ratio "$bt" "$ht")"
done
rm -rf "$out"
