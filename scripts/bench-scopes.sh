#!/usr/bin/env bash
# The cost of peak scopes on the allocation path, in one run: each round runs
# the Alloc+Free pairs of tracker.Record and tracker.Counter (and the raw
# floor atomic5) at a base commit without scopes, then the same pairs in the
# working tree (no scope open), then BenchmarkScopes in the working tree
# (0, 1, 4 and 16 scopes open), so that all sample the same moments of the
# machine. It prints the median over the rounds of each per-round ratio:
# this tree's pair over the base's (what the check for open scopes costs),
# and each scopes=N row over its scopes=0 row (what open scopes cost).
#
# Environment: BASE (a commit without scopes; default 4357376), COUNT
# (rounds, default 10), BENCHTIME (default 200ms), OUT (a directory for the
# results; default a new temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."

base=${BASE:-4357376}
count=${COUNT:-10}
benchtime=${BENCHTIME:-200ms}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
pairs='^BenchmarkSerial/op=pair/design=(atomic5|Counter|Record)$'

script=bench-scopes.sh
. scripts/bench-lib.sh
base_tree "$base"
machine "$base"

(cd "$tree" && go test -c -o "$out/base.test" ./bench/)
go test -c -o "$out/head.test" ./bench/
: >"$out/rounds.txt"
for i in $(seq "$count"); do
	echo "== round $i of $count"
	for who in base head; do
		"$out/$who.test" -test.run '^$' -test.bench "$pairs" -test.benchmem -test.count 1 -test.benchtime "$benchtime" |
			sed -n "s/^Benchmark/$i $who &/p" | tee -a "$out/rounds.txt"
	done
	"$out/head.test" -test.run '^$' -test.bench '^BenchmarkScopes$' -test.benchmem -test.count 1 -test.benchtime "$benchtime" |
		sed -n "s/^Benchmark/$i head &/p" | tee -a "$out/rounds.txt"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

# rounds.txt: round, who, name, iterations, ns, "ns/op", ...
echo "== medians over $count rounds of the per-round ratios"
awk '
function median(list,   a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ name = $3; sub(/-[0-9]+$/, "", name); ns[$1, $2, name] = $5; names[$2 " " name] = 1; ns_list[$2 " " name] = ns_list[$2 " " name] " " $5 }
END {
	for (k in names) {
		split(k, w, " ")
		if (w[1] == "head" && w[2] ~ /^BenchmarkSerial/) {
			r = ""
			for (i = 1; i <= '"$count"'; i++) if (ns[i, "base", w[2]] > 0) r = r " " ns[i, "head", w[2]] / ns[i, "base", w[2]]
			printf "%-60s median %7.2f ns/op, head/base %.3f\n", w[2], median(ns_list[k]), median(r)
		}
		if (w[1] == "base") printf "%-60s median %7.2f ns/op (base)\n", w[2], median(ns_list[k])
		if (w[2] ~ /^BenchmarkScopes/) {
			zero = w[2]; sub(/scopes=[0-9]+$/, "scopes=0", zero)
			r = ""
			for (i = 1; i <= '"$count"'; i++) if (ns[i, "head", zero] > 0) r = r " " ns[i, "head", w[2]] / ns[i, "head", zero]
			printf "%-60s median %7.2f ns/op, over scopes=0 %.3f\n", w[2], median(ns_list[k]), median(r)
		}
	}
}' "$out/rounds.txt" | sort | tee "$out/ratios.txt"
echo "(files in $out)"
