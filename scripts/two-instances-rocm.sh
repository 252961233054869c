#!/usr/bin/env bash
# Two serving instances started together on one AMD GPU, each sizing its KV
# cache by vLLM's formula (Measurement.Budget): builds the main job
# (examples/profile) with -tags rocm, runs two instances at once, lined up
# step by step (both take their baseline, both load their weights, both
# measure a forward pass of one request, whose peak is the same in every
# run), then each alone; prints each instance's budget from the
# per-process figures (rocm_smi) and from the device-wide ones
# (hipMemGetInfo), and what rocm_smi reported. Exits non-zero where an
# instance's budget with the other running differs from its budget alone by
# more than one block, or where rocm_smi gave no per-process figures.
#
# On the fake runtime (scripts/test-rocm.sh runs it there, with the fake
# rocm_smi) every run gets a fresh machine file (FAKEHIP_MACHINE) shared by
# the instances of the run; on a GPU (the folder of scripts/gpu-check-rocm.sh
# runs it with PROFILE=./profile) the variables of the fake are ignored.
# Elsewhere it needs the fakes on LD_LIBRARY_PATH (scripts/test-rocm.sh
# builds them into .cache/fakehip and .cache/fakesmi); without a runtime,
# each instance stops with the reason rocm:0 is unavailable.
#
#	PROFILE      a built examples/profile (-tags rocm, which needs no AMD
#	             header); built here if unset
#	DEVICE       the device (rocm:0)
#	WEIGHTS      each instance's weights (1GiB)
#	UTILIZATION  each instance's share of the device (0.4)
#	BLOCK        the KV-cache block (16MiB)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
device=${DEVICE:-rocm:0}
weights=${WEIGHTS:-1GiB}
utilization=${UTILIZATION:-0.4}
block=${BLOCK:-16MiB}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
profile=${PROFILE:-}
if [[ -z $profile ]]; then
	cd "$here/.."
	echo "== go build -tags rocm ./examples/profile"
	go build -tags rocm -o "$work/profile" ./examples/profile
	profile=$work/profile
fi
# The fake runtime's machine: one GPU of 4 GiB, the runtime's own 300 MiB
# on it.
export FAKEHIP_DEVICES=${FAKEHIP_DEVICES:-1}
export FAKEHIP_CONTEXT_BYTES=${FAKEHIP_CONTEXT_BYTES:-$((300 << 20))}

# run RUN NAME...: runs the instances NAME... together, lined up, on a
# machine of their own, each writing $work/RUN.NAME.out.
run() {
	local r=$1
	shift
	mkdir -p "$work/$r.barrier"
	local pids=()
	for name in "$@"; do
		FAKEHIP_MACHINE=$work/$r.machine "$profile" -device "$device" -weights "$weights" \
			-utilization "$utilization" -block-size "$block" -cache-blocks 0 -workers 1 \
			-barrier "$work/$r.barrier" -instance "$name" -peers $# >"$work/$r.$name.out" 2>&1 &
		pids+=($!)
	done
	local failed=0
	for pid in "${pids[@]}"; do
		wait "$pid" || failed=1
	done
	for name in "$@"; do
		echo "== $r: instance $name"
		cat "$work/$r.$name.out"
	done
	return $failed
}

# field RUN NAME KEY: a field of the instance's budget line.
field() {
	grep '^budget: ' "$work/$1.$2.out" | tr ' ' '\n' | sed -n "s/^$3=//p"
}

run together a b
run alone-a a
run alone-b b

echo "== budgets (blocks of $block, utilization $utilization, weights $weights each)"
printf '%-9s %-22s %-18s %-24s %-20s %s\n' instance "together (rocm_smi)" "alone (rocm_smi)" "together (device-wide)" "alone (device-wide)" figures
status=0
for name in a b; do
	t=$(field together "$name" blocks)
	a=$(field "alone-$name" "$name" blocks)
	td=$(field together "$name" device-wide-blocks)
	ad=$(field "alone-$name" "$name" device-wide-blocks)
	basis=$(field together "$name" basis)
	printf '%-9s %-22s %-18s %-24s %-20s %s\n' "$name" "$t" "$a" "$td" "$ad" "$basis"
	if [[ $basis != process ]]; then
		echo "two-instances-rocm: instance $name had no per-process figures (rocm_smi): see its output above" >&2
		status=1
	elif [[ -z $t || -z $a || $t == refused || $a == refused ]]; then
		echo "two-instances-rocm: instance $name: a budget was refused or missing" >&2
		status=1
	elif ((t - a > 1 || a - t > 1)); then
		echo "two-instances-rocm: instance $name: $t blocks with the other running, $a alone: more than one block apart" >&2
		status=1
	fi
done
if ((status == 0)); then
	echo "== each instance's budget from the per-process figures is the one it gets alone"
fi
exit $status
