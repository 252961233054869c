#!/usr/bin/env bash
# Two serving instances on one GPU, each with an elastic KV cache sized by a
# budget that follows the device (examples/profile -elastic -follow): the
# first starts alone and maps its whole budget; the second starts, and the
# first shrinks as the second's cache grows; the second exits, and the
# first grows back. Builds the main job with -tags cuda (unless PROFILE
# names one), runs the two, prints both outputs, and exits non-zero on any
# wrong figure:
#
#   - the first's blocks, once it has settled alone, are not the blocks it
#     reserved for its budget;
#   - it does not shrink, and settle, after the second starts;
#   - a line of either has the device's Used above its Total, or, once
#     both have settled, the two caches map more than the device holds;
#   - the first does not grow back to its starting blocks after the second
#     exits;
#   - either stops with an error (a map refused: out of memory), or its
#     return check at the end does not find the memory given back.
#
# The steps wait on the instances' own lines ("settled", printed once a
# target has held for 10 readings, one every 10ms), each for at most
# TIMEOUT seconds, and fail with the step's name past it.
#
# The utilizations add up to more than 1, so that the first's whole budget
# leaves the second less than its share: the first's pass peak, set aside
# in its budget but free once the pass is done, is where the second's
# weights go, and the second's weights and context pass what the first's
# utilization leaves outside its budget, so the first shrinks; then, as
# the second's cache grows, the first gives up a block for each block it
# takes, and both settle.
#
# On the fake driver (scripts/test-cuda.sh runs it there, with the fake
# NVML) the instances share a fresh machine file (FAKECUDA_MACHINE): one
# GPU of 4 GiB, a context of 300 MiB. On a GPU (the folder of
# scripts/gpu-check.sh runs it with PROFILE=./profile) the fake's
# variables are ignored; the GPU should be otherwise idle, since the
# first's figures alone and after are compared exactly.
#
#	PROFILE        a built examples/profile (-tags cuda); built here if unset
#	DEVICE         the device (cuda:0)
#	UTILIZATION_A  the first's share of the device (0.7)
#	UTILIZATION_B  the second's (0.5)
#	WEIGHTS_A      the first's weights (1GiB)
#	WEIGHTS_B      the second's (768MiB)
#	PASS_A         the first's forward pass (-workers 1 -activation 64MiB:
#	               a peak of 448 MiB)
#	PASS_B         the second's (-workers 1 -activation 4MiB: 28 MiB)
#	BLOCK          the KV-cache block (64MiB)
#	TIMEOUT        seconds each step may wait (60)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
device=${DEVICE:-cuda:0}
ua=${UTILIZATION_A:-0.7}
ub=${UTILIZATION_B:-0.5}
wa=${WEIGHTS_A:-1GiB}
wb=${WEIGHTS_B:-768MiB}
pa=${PASS_A:--workers 1 -activation 64MiB}
pb=${PASS_B:--workers 1 -activation 4MiB}
block=${BLOCK:-64MiB}
timeout=${TIMEOUT:-60}
work=$(mktemp -d)
declare -A pid # each instance's
cleanup() {
	for p in "${pid[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
profile=${PROFILE:-}
if [[ -z $profile ]]; then
	cd "$here/.."
	echo "== go build -tags cuda ./examples/profile"
	go build -tags cuda -o "$work/profile" ./examples/profile
	profile=$work/profile
fi
export FAKECUDA_DEVICES=${FAKECUDA_DEVICES:-1}
export FAKECUDA_CONTEXT_BYTES=${FAKECUDA_CONTEXT_BYTES:-$((300 << 20))}
export FAKECUDA_MACHINE=$work/machine

fail() {
	for name in a b; do
		[[ -f $work/$name.out ]] && { echo "== instance $name"; cat "$work/$name.out"; }
	done
	echo "two-instances-elastic: $*" >&2
	exit 1
}

# start NAME UTILIZATION WEIGHTS PASS: starts an instance, following until
# $work/NAME.stop exists (or 5 minutes, should this script die).
start() {
	# shellcheck disable=SC2086 # the pass's flags split on blanks
	"$profile" -device "$device" -elastic -follow 10ms -follow-settle 10 -follow-until "$work/$1.stop" -follow-for 5m \
		-utilization "$2" -weights "$3" -block-size "$block" $4 >"$work/$1.out" 2>&1 &
	pid[$1]=$!
}

# settled NAME: the blocks of each "settled" line of the instance, one a line.
settled() { sed -n 's/^follow t=[0-9.]*s settled blocks=\([0-9]*\)$/\1/p' "$work/$1.out"; }

# settles NAME COUNT [OP BLOCKS]: whether the instance has printed COUNT
# "settled" lines or more, the last with OP (-eq, -lt) BLOCKS.
settles() {
	local n last
	n=$(settled "$1" | wc -l)
	last=$(settled "$1" | tail -n1)
	((n >= $2)) && { (($# < 3)) || test "$last" "$3" "$4"; }
}

# await NAME WHAT CONDITION...: waits until CONDITION succeeds, failing
# with WHAT past the timeout or where the instance has exited.
await() {
	local name=$1 what=$2
	shift 2
	local deadline=$((SECONDS + timeout))
	until "$@"; do
		if ! kill -0 "${pid[$name]}" 2>/dev/null; then
			fail "instance $name exited before: $what"
		fi
		if ((SECONDS >= deadline)); then
			fail "$what: not within ${timeout}s"
		fi
		sleep 0.02
	done
}

# finish NAME: stops the instance, which unmaps every block under a return
# check, and checks that it ended well and found the memory given back.
finish() {
	touch "$work/$1.stop"
	local rc=0
	wait "${pid[$1]}" || rc=$?
	unset "pid[$1]"
	((rc == 0)) || fail "instance $1 failed"
	grep -qx '    given back' "$work/$1.out" || fail "instance $1: the return check did not find the memory unmapped given back"
}

# 1. The first alone: its whole budget.
start a "$ua" "$wa" "$pa"
await a "the first settles alone" settles a 1
reserved=$(sed -n 's/^  reserved: .* for \([0-9]*\) blocks of .*/\1/p' "$work/a.out")
a0=$(settled a | head -n1)
echo "== the first alone: $a0 blocks mapped, $reserved reserved for its budget"
((a0 > 0 && a0 == reserved)) || fail "the first alone mapped $a0 blocks, not the $reserved of its budget"

# 2. The second starts: the first shrinks, and both settle.
start b "$ub" "$wb" "$pb"
await b "the second settles" settles b 1
await a "the first shrinks and settles after the second starts" settles a 2 -lt "$a0"
# Both settled: the last step lines hold each one's mapped bytes.
lastsettled() { [[ $(tail -n1 "$work/$1.out") == *" settled "* ]]; }
await b "the second settles with the first" lastsettled b
a1=$(settled a | tail -n1)
b1=$(settled b | tail -n1)
last() { grep '^follow t=.* blocks=' "$work/$1.out" | grep -v settled | tail -n1; }
field() { sed -n "s/.* $2=\([0-9.]*\)MiB.*/\1/p" <<<"$1"; }
la=$(last a)
lb=$(last b)
total=$(field "$lb" total)
ma=$(field "$la" mapped)
mb=$(field "$lb" mapped)
echo "== together: the first $a1 blocks ($ma MiB), the second $b1 blocks ($mb MiB), of a device of $total MiB"
awk -v a="$ma" -v b="$mb" -v t="$total" 'BEGIN { exit !(a + b <= t) }' ||
	fail "the two caches map $ma + $mb MiB, more than the device's $total MiB"

# 3. The second exits: the first grows back.
finish b
await a "the first grows back after the second exits" settles a 3 -eq "$a0"
echo "== the second exited: the first back to $(settled a | tail -n1) blocks"
finish a

for name in a b; do
	echo "== instance $name"
	cat "$work/$name.out"
done
# No line of either may show the device over-full.
over=$(grep -h '^follow t=.* used=' "$work/a.out" "$work/b.out" |
	awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] + 0 } if (v["used"] > v["total"]) print }')
[[ -z $over ]] || fail "the device's Used passed its Total: $over"
echo "== the first: $a0 blocks alone, $a1 beside the second's $b1, $a0 again alone; every step within the device; both returns given back"
