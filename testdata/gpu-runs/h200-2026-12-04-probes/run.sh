#!/usr/bin/env bash
# The checks of this tree on a GPU, bounded to fit the device time left.
cd "$(dirname "$0")" && tar xJf b.tar.xz && cd b || exit 1
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | tee "$O/machine.log"
st() { echo "== $1: rc=$2"; }
timeout 30 ./cudadrv.test -test.count=1 -test.v >"$O/cudadrv.log" 2>&1; st cudadrv $?
grep -E '^(--- FAIL|FAIL|PASS)|reading:' "$O/cudadrv.log" | head -30
timeout 15 ./nvml.test -test.count=1 -test.v >"$O/nvml.log" 2>&1; st nvml $?
grep -E '^(--- FAIL|FAIL|PASS)' "$O/nvml.log"
for p in driver-probes/*.py; do echo "== $p"; timeout 8 python3 "$p"; echo "rc=$?"; done >"$O/probes.log" 2>&1
grep -E 'rc=' "$O/probes.log" | sort | uniq -c
{ timeout 25 ./profile -device cuda:0 -graphs -fit; st profile-graphs-fit $?; timeout 20 ./profile -device cuda:0 -elastic -fit; st profile-elastic-fit $?; } >"$O/profile.log" 2>&1
grep -E 'graph reserved|^fit:|rc=' "$O/profile.log"
timeout 90 env MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.v -test.timeout 85s -test.skip '^TestCoreImportsNoRenderer$' >"$O/tests.log" 2>&1; st tests $?
grep -E '^(--- FAIL|FAIL|ok|PASS)' "$O/tests.log" | head -40
