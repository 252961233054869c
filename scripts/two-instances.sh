#!/usr/bin/env bash
# Two serving instances started together on one GPU, each sizing its KV
# cache by vLLM's formula (Measurement.Budget): builds the main job
# (examples/profile) with the GPU's build tag, runs two instances at once,
# lined up step by step (both take their baseline, both load their
# weights, both measure a forward pass of one request, whose peak is the
# same in every run), then each alone; prints each instance's budget from
# the per-process figures (NVML on an NVIDIA GPU, rocm_smi on an AMD GPU)
# and from the device-wide ones (cuMemGetInfo, hipMemGetInfo). Exits
# non-zero where an instance's budget with the other running differs from
# its budget alone by more than one block, or where the per-process
# figures are missing.
#
# On the fakes (scripts/test-cuda.sh runs it with the fake driver and NVML,
# scripts/test-rocm.sh with KIND=rocm on the fake runtime and rocm_smi)
# every run gets a fresh machine file (FAKECUDA_MACHINE, FAKEHIP_MACHINE)
# shared by the instances of the run; on a GPU (the folders of
# scripts/gpu-check.sh and scripts/gpu-check-rocm.sh run it with
# PROFILE=./profile) the variables of the fakes are ignored. Elsewhere it
# needs the fakes on LD_LIBRARY_PATH (the two test scripts build them
# into .cache); without a driver or runtime, each instance stops with the
# reason its device is unavailable.
#
#	KIND         the GPU's kind: cuda (NVIDIA) or rocm (AMD); cuda
#	PROFILE      a built examples/profile (-tags $KIND, which needs no
#	             vendor header); built here if unset
#	DEVICE       the device ($KIND:0)
#	WEIGHTS      each instance's weights (1GiB)
#	UTILIZATION  each instance's share of the device (0.4)
#	BLOCK        the KV-cache block (16MiB)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kind=${KIND:-cuda}
case $kind in
cuda) fake=FAKECUDA source=NVML ;;
rocm) fake=FAKEHIP source=rocm_smi ;;
*)
	echo "two-instances: KIND=$kind: want cuda or rocm" >&2
	exit 2
	;;
esac
device=${DEVICE:-$kind:0}
weights=${WEIGHTS:-1GiB}
utilization=${UTILIZATION:-0.4}
block=${BLOCK:-16MiB}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
profile=${PROFILE:-}
if [[ -z $profile ]]; then
	cd "$here/.."
	echo "== go build -tags $kind ./examples/profile"
	go build -tags "$kind" -o "$work/profile" ./examples/profile
	profile=$work/profile
fi
# The fake's machine: one GPU of 4 GiB, a context (on an AMD GPU, the
# runtime's own memory) of 300 MiB.
export "${fake}_DEVICES=$(printenv "${fake}_DEVICES" || echo 1)"
export "${fake}_CONTEXT_BYTES=$(printenv "${fake}_CONTEXT_BYTES" || echo $((300 << 20)))"

# run RUN NAME...: runs the instances NAME... together, lined up, on a
# machine of their own, each writing $work/RUN.NAME.out.
run() {
	local r=$1
	shift
	mkdir -p "$work/$r.barrier"
	local pids=()
	for name in "$@"; do
		env "${fake}_MACHINE=$work/$r.machine" "$profile" -device "$device" -weights "$weights" \
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
printf '%-9s %-22s %-18s %-24s %-20s %s\n' instance "together ($source)" "alone ($source)" "together (device-wide)" "alone (device-wide)" figures
status=0
for name in a b; do
	t=$(field together "$name" blocks)
	a=$(field "alone-$name" "$name" blocks)
	td=$(field together "$name" device-wide-blocks)
	ad=$(field "alone-$name" "$name" device-wide-blocks)
	basis=$(field together "$name" basis)
	printf '%-9s %-22s %-18s %-24s %-20s %s\n' "$name" "$t" "$a" "$td" "$ad" "$basis"
	if [[ $basis != process ]]; then
		echo "two-instances: instance $name had no per-process figures ($source): see its output above" >&2
		status=1
	elif [[ -z $t || -z $a || $t == refused || $a == refused ]]; then
		echo "two-instances: instance $name: a budget was refused or missing" >&2
		status=1
	elif ((t - a > 1 || a - t > 1)); then
		echo "two-instances: instance $name: $t blocks with the other running, $a alone: more than one block apart" >&2
		status=1
	fi
done
if ((status == 0)); then
	echo "== each instance's budget from the per-process figures is the one it gets alone"
fi
exit $status
