#!/usr/bin/env bash
# A newcomer that claims the room its load needs, beside an elastic cache
# that follows the device and counts claims (examples/profile): the
# follower starts alone and maps its whole budget, holding most of the
# GPU; newcomers without a claim (-fit) find that a cache of 40 blocks does
# not fit, say how many blocks would, and load that many, not one more;
# the newcomer (-fit -claim) plans a load larger than the memory
# left free, predicts that it does not fit, claims what it needs, and
# waits; the follower shrinks for the claim at the reading that first
# counts it; the newcomer loads with no out-of-memory, checks its
# prediction and withdraws its claim; once it exits, the follower grows
# back. Builds the main job with -tags cuda (unless PROFILE names one),
# prints each step and both outputs, and exits non-zero on any wrong
# figure:
#
#   - the follower's blocks, once it has settled alone, are not the blocks
#     it reserved for its budget;
#   - a newcomer without a claim loads a cache that does not fit, or the
#     blocks it says would fit do not, or one more does;
#   - the newcomer's first prediction fits (its load must not fit in what
#     the follower leaves free), or predicts other than its weights and
#     cache in whole granules of 2 MiB;
#   - the follower does not count the newcomer's claim as the newcomer
#     posted it, or does not shrink at the reading that first counts it
#     or the next;
#   - the newcomer does not get its room, stops with an error (an
#     out-of-memory among them), or measures other than it predicted;
#   - the follower does not count the claim as gone once withdrawn, or
#     does not grow back to its blocks alone once the newcomer has exited;
#   - a line of the follower has the device's Used above its Total.
#
# On the fake driver (scripts/test-cuda.sh runs it there, with the fake
# NVML) the two share a fresh machine file (FAKECUDA_MACHINE): one GPU of 4
# GiB, contexts of 64 MiB. On a GPU the fake's variables are ignored; the
# GPU should be otherwise idle.
#
#	PROFILE     a built examples/profile (-tags cuda); built here if unset
#	DEVICE      the device (cuda:0)
#	FOLLOWER    the follower's flags (-utilization 0.9 -weights 256MiB -block-size 64MiB -workers 1 -activation 16MiB)
#	NEWCOMER    the newcomer's load (-weights 1GiB -cache-blocks 4 -block-size 16MiB -workers 1 -activation 8MiB)
#	HEADROOM    the newcomer's headroom (32MiB)
#	SMALL       the weights of the newcomers without a claim (128MiB)
#	TIMEOUT     seconds each step may wait (60)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
device=${DEVICE:-cuda:0}
follower=${FOLLOWER:--utilization 0.9 -weights 256MiB -block-size 64MiB -workers 1 -activation 16MiB}
newcomer=${NEWCOMER:--weights 1GiB -cache-blocks 4 -block-size 16MiB -workers 1 -activation 8MiB}
headroom=${HEADROOM:-32MiB}
small=${SMALL:-128MiB}
timeout=${TIMEOUT:-60}
work=$(mktemp -d)
pid=
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null || true
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
export FAKECUDA_CONTEXT_BYTES=${FAKECUDA_CONTEXT_BYTES:-$((64 << 20))}
export FAKECUDA_MACHINE=$work/machine
claims=$work/claims

fail() {
	for name in follower newcomer; do
		[[ -f $work/$name.out ]] && { echo "== $name"; cat "$work/$name.out"; }
	done
	echo "fit-claim-elastic: $*" >&2
	exit 1
}

# await WHAT CONDITION...: waits until CONDITION succeeds, failing with
# WHAT past the timeout or where the follower has exited.
await() {
	local what=$1
	shift
	local deadline=$((SECONDS + timeout))
	until "$@"; do
		kill -0 "$pid" 2>/dev/null || fail "the follower exited before: $what"
		((SECONDS < deadline)) || fail "$what: not within ${timeout}s"
		sleep 0.02
	done
}

# settled: the blocks of each "settled" line of the follower, one a line.
settled() { sed -n 's/^follow t=[0-9.]*s settled blocks=\([0-9]*\)$/\1/p' "$work/follower.out"; }
# settles COUNT [BLOCKS]: the follower printed COUNT "settled" lines or
# more, the last with BLOCKS.
settles() { (($(settled | wc -l) >= $1)) && { (($# < 2)) || [[ $(settled | tail -n1) == "$2" ]]; }; }
# field LINE NAME: the value of NAME=VALUE in LINE, less a unit of MiB.
field() { sed -n "s/.* $2=\([0-9.]*\)\(MiB\)\{0,1\}\( .*\)\{0,1\}$/\1/p" <<<"$1"; }
# counted: the follower's lines of the claims it counts.
counted() { grep '^follow t=.* claims counted=' "$work/follower.out" || true; }

# 1. The follower alone: its whole budget, most of the GPU.
echo "== the follower: -elastic -follow 10ms -follow-claims"
# shellcheck disable=SC2086 # the flags split on blanks
"$profile" -device "$device" -elastic -follow 10ms -follow-settle 10 -follow-claims -claim-dir "$claims" \
	-follow-until "$work/follower.stop" -follow-for 5m $follower >"$work/follower.out" 2>&1 &
pid=$!
await "the follower settles alone" settles 1
reserved=$(sed -n 's/^  reserved: .* for \([0-9]*\) blocks of .*/\1/p' "$work/follower.out")
a0=$(settled | head -n1)
last=$(grep '^follow t=.* blocks=.* used=' "$work/follower.out" | tail -n1)
used=$(field "$last" used)
total=$(field "$last" total)
echo "== the follower alone: $a0 blocks mapped, $reserved reserved for its budget; the device: $used of $total MiB used"
((a0 > 0 && a0 == reserved)) || fail "the follower alone mapped $a0 blocks, not the $reserved of its budget"

# 2. A newcomer without a claim, of smaller weights: its load does not
# fit, and it says how many of its blocks would; that many fit, and one
# more does not.
# shellcheck disable=SC2086
newcomer() { "$profile" -device "$device" -fit $newcomer "$@" >"$work/newcomer.out" 2>&1; }
rc=0
newcomer -weights "$small" -cache-blocks 40 || rc=$?
fits=$(grep -m1 '^  fits:' "$work/newcomer.out" || true)
echo "== a newcomer of 40 blocks, without a claim (exit status $rc):$fits"
((rc == 1)) && [[ $fits == *"does not fit"* ]] || fail "a newcomer of 40 blocks, without a claim, did not stop before loading: $fits"
grep -qx 'fit: not loaded: .*' "$work/newcomer.out" || fail "the newcomer of 40 blocks did not say it loaded nothing"
n=$(sed -n 's/.*; \([0-9]*\) blocks of .* would fit beside the rest of the load$/\1/p' <<<"$fits")
((n > 0 && n < 40)) || fail "the newcomer of 40 blocks says $n blocks would fit"
rc=0
newcomer -weights "$small" -cache-blocks $((n + 1)) || rc=$?
((rc == 1)) || fail "$((n + 1)) blocks fit, one more than the $n the newcomer said"
mark=$(wc -l <"$work/follower.out")
rc=0
newcomer -weights "$small" -cache-blocks "$n" || rc=$?
((rc == 0)) || fail "the $n blocks the newcomer said would fit did not load"
fitline=$(tail -n1 "$work/newcomer.out")
echo "== $n blocks would fit: $((n + 1)) do not; $n load: $fitline"
read -r p m < <(sed -n 's/^fit: device=[^ ]* predicted=\([0-9]*\) measured=\([0-9]*\) .*/\1 \2/p' <<<"$fitline")
[[ -n $p && $p == "$m" ]] || fail "the newcomer of $n blocks predicted $p bytes and measured $m"
# Where the follower shrank for it, it grows back to its blocks alone.
if tail -n +"$((mark + 1))" "$work/follower.out" | grep -q '^follow t=.* blocks='; then
	before=$(settled | wc -l)
	await "the follower grows back after the newcomer of $n blocks" settles $((before + 1)) "$a0"
fi

# 3. The newcomer: a load larger than the free memory, claimed.
echo "== the newcomer: -fit -claim -fit-headroom $headroom $newcomer"
rc=0
# shellcheck disable=SC2086
"$profile" -device "$device" -fit -claim -claim-dir "$claims" -claim-wait "${timeout}s" -fit-headroom "$headroom" \
	$newcomer >"$work/newcomer.out" 2>&1 || rc=$?
sed -n '/^fit: the load planned/,/^  fits:/p' "$work/newcomer.out" | head -n 20
grep -E '^(claim|room):' "$work/newcomer.out" || true
((rc == 0)) || fail "the newcomer failed (exit status $rc)"
! grep -q '^profile: ' "$work/newcomer.out" || fail "the newcomer stopped with an error: $(grep '^profile: ' "$work/newcomer.out")"
first=$(grep -m1 '^  fits:' "$work/newcomer.out")
[[ $first == *"does not fit"* ]] || fail "the newcomer's load fits in what the follower leaves free: the run shows no claim at work ($first)"
predicted=$(sed -n 's/^fit: device=[^ ]* predicted=\([0-9]*\) measured=.*/\1/p' "$work/newcomer.out")
measured=$(sed -n 's/^fit: device=[^ ]* predicted=[0-9]* measured=\([0-9]*\) .*/\1/p' "$work/newcomer.out")
lastline=$(tail -n1 "$work/newcomer.out")
form='^fit: device=[^ ]+ predicted=[0-9]+ measured=[0-9]+ source=[^ ]+$'
[[ $lastline =~ $form ]] || fail "the newcomer's last line is not its fit line: $lastline"
want=$(((1 << 30) + 4 * (16 << 20))) # its weights and cache, in whole granules of 2 MiB
((predicted == want)) || fail "the newcomer predicted $predicted bytes, not its weights and cache, $want"
((measured == predicted)) || fail "the newcomer measured $measured bytes, predicted $predicted"
grep -q '^room: ' "$work/newcomer.out" || fail "the newcomer got no room"
claimed=$(sed -n 's/^claim: \([0-9]*\) bytes .*/\1/p' "$work/newcomer.out")
[[ -n $claimed ]] || fail "the newcomer printed no claim"
claim=$(awk -v b="$claimed" 'BEGIN { printf "%.2f", b / 1048576 }')
echo "== the newcomer: does not fit at first; claimed $claim MiB, got the room, loaded, predicted $predicted and measured $measured bytes"

# 4. The follower counted the claim as posted, shrank at once, and counts
# nothing once it is withdrawn.
mapfile -t lines < <(counted)
((${#lines[@]} >= 2)) || fail "the follower printed no claim counted and then gone: ${lines[*]}"
c1=$(field "${lines[0]}" counted)
r1=$(field "${lines[0]}" reading)
awk -v a="$c1" -v b="$claim" 'BEGIN { exit !(a == b) }' || fail "the follower counted $c1 MiB of claims, the newcomer claimed $claim MiB"
shrink=$(grep '^follow t=.* reading=.* target=.* blocks=' "$work/follower.out" | awk -v r="$r1" -v a0="$a0" '
	{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
	v["reading"] + 0 >= r && v["target"] + 0 < a0 + 0 { print v["reading"], v["target"]; exit }')
[[ -n $shrink ]] || fail "the follower did not shrink after reading $r1, which first counted the claim"
read -r rs target <<<"$shrink"
((rs <= r1 + 1)) || fail "the follower shrank at reading $rs, more than one reading after reading $r1, which first counted the claim"
echo "== the follower: counted the claim ($c1 MiB) at reading $r1, shrank to $target blocks at reading $rs"
gone=$(field "${lines[-1]}" counted)
awk -v a="$gone" 'BEGIN { exit !(a == 0) }' || fail "the follower still counts $gone MiB of claims once the newcomer withdrew its claim"

# 5. The newcomer has exited: the follower grows back.
await "the follower grows back after the newcomer exits" settles 2 "$a0"
echo "== the newcomer exited: the follower back to $(settled | tail -n1) blocks"
touch "$work/follower.stop"
wait "$pid" || fail "the follower failed"
pid=
grep -qx '    given back' "$work/follower.out" || fail "the follower's return check did not find the memory unmapped given back"

for name in follower newcomer; do
	echo "== $name"
	cat "$work/$name.out"
done
over=$(grep -h '^follow t=.* used=' "$work/follower.out" |
	awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] + 0 } if (v["used"] > v["total"]) print }')
[[ -z $over ]] || fail "the device's Used passed its Total: $over"
echo "== the follower: $a0 blocks alone, $target for the newcomer's claim of $claim MiB (at reading $rs, the claim first counted at $r1), $a0 again; the newcomer: predicted $predicted, measured $measured bytes"
