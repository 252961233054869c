#!/usr/bin/env bash
# Builds, here, what checks memtrack on a machine with an AMD GPU and no Go
# toolchain, into out/gpu-check-rocm/. memtrack loads the HIP runtime and
# rocm_smi at run time, so none of it needs AMD's headers to build, and
# every binary starts on any Linux with glibc, GPU or not (without one, the
# ROCm tests skip and say why):
#
#	memtrack.test       the root package's tests and ROCm benchmarks (-tags rocm)
#	memtrack-race.test  the same tests built with -race
#	hipdrv.test         the HIP runtime binding's tests: the runtime rules
#	                    memtrack relies on (internal/hipdrv/doc.go), on this
#	                    runtime
#	rocmsmi.test        the rocm_smi binding's tests: its rules
#	                    (internal/rocmsmi/doc.go), on this machine's library
#	profile             the main job (examples/profile), for
#	                    two-instances.sh and a run of its own
#	two-instances.sh    scripts/two-instances.sh (run with KIND=rocm): two serving
#	                    instances started together on the GPU, each budget
#	                    from rocm_smi's per-process figures against the one
#	                    alone
#	run.sh              runs them: the tests, the runtime's and rocm_smi's
#	                    rules, the race-detector tests, the main job on
#	                    rocm:0, the two instances, and the ROCm benchmarks
#	                    (the tracked pairs beside the raw ones)
#
# Copy the folder to the GPU machine and run ./run.sh there; it needs AMD's
# HIP runtime (libamdhip64.so.N) and rocm_smi (librocm_smi64.so.N), found as
# the dynamic loader finds them (LD_LIBRARY_PATH, then the system's library
# path: /opt/rocm/lib is on neither by default), glibc (the oldest version
# the binaries run with is measured here and printed by run.sh) and about
# 2.5 GiB of free GPU memory. Every step runs even when an earlier one
# fails, so that every figure is printed; run.sh exits non-zero at the end if
# any step failed, and names them, and lists every test it skipped, with the
# reason. scripts/test-rocm.sh runs the folder on the fakes.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=out/gpu-check-rocm
rm -rf "$dir"
mkdir -p "$dir"
echo "== go test -c -tags rocm [-race] -> $dir"
go test -c -tags rocm -o "$dir/memtrack.test" .
go test -c -race -tags rocm -o "$dir/memtrack-race.test" .
go test -c -tags rocm -o "$dir/hipdrv.test" ./internal/hipdrv
go test -c -tags rocm -o "$dir/rocmsmi.test" ./internal/rocmsmi
go build -tags rocm -o "$dir/profile" ./examples/profile
cp scripts/two-instances.sh "$dir/two-instances.sh"

# The oldest glibc the binaries run with: the newest GLIBC_x.y symbol
# version any of them needs.
glibc=unknown
if command -v objdump >/dev/null; then
	glibc=$(objdump -T "$dir"/*.test "$dir/profile" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1)
fi
echo "== the binaries need glibc ${glibc#GLIBC_} or later"

cat >"$dir/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs memtrack's ROCm checks on this machine's AMD GPU (see
# scripts/gpu-check-rocm.sh). MEMTRACK_BENCHTIME sets -test.benchtime
# (default 200ms, three runs of each benchmark). Every step runs; the exit
# status says whether all passed.
set -uo pipefail
cd "$(dirname "$0")"
benchtime=${MEMTRACK_BENCHTIME:-200ms}
failed=()
echo "== built for glibc @GLIBC@ or later; this machine: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"

# step NAME CMD...: runs one step, remembering a failure and going on.
step() {
	local name=$1
	shift
	echo "== $name"
	if ! "$@"; then
		failed+=("$name")
		echo "== $name: FAILED"
	fi
}

# The dependency test lists the module's packages with the go command, in
# the source tree, which this folder does not carry.
skip='^TestCoreImportsNoRenderer$'

# skipped LOG: the tests LOG skipped, each with the reason it gave.
skipped() {
	awk '/^=== RUN/ { why = "" }
		/^ +[a-z_]+\.go:[0-9]+: / { why = $0; sub(/^ +[a-z_]+\.go:[0-9]+: /, "", why) }
		/^ *--- SKIP: / { print "==   " $3 ": " why }' "$1"
}
# logged NAME LOG CMD...: runs CMD into LOG, prints it, returns CMD's status.
logged() {
	local log=$1
	shift
	"$@" >"$log" 2>&1
	local rc=$?
	cat "$log"
	return $rc
}
step "tests" logged tests.log ./memtrack.test -test.count=1 -test.v -test.timeout 120s -test.skip "$skip"
step "the HIP runtime rules memtrack relies on (internal/hipdrv)" logged hipdrv-tests.log ./hipdrv.test -test.count=1 -test.v -test.timeout 60s
step "the rocm_smi rules memtrack relies on (internal/rocmsmi)" logged rocmsmi-tests.log ./rocmsmi.test -test.count=1 -test.v -test.timeout 60s
step "tests under the race detector" ./memtrack-race.test -test.count=1 -test.timeout 120s -test.skip "$skip"
step "the main job on rocm:0" ./profile -device rocm:0
step "two instances started together: each budget from rocm_smi's per-process figures against the one alone" \
	env KIND=rocm PROFILE=./profile ./two-instances.sh
step "benchmarks: the tracked pairs against the raw hipMalloc+hipFree and hipMallocAsync+hipFreeAsync" \
	./memtrack.test -test.run '^$' -test.bench ROCm -test.benchmem -test.benchtime "$benchtime" -test.count 3

echo "== skipped on this machine (tests that need two GPUs skip on one; those that need the fakes' switches or call counts skip on a GPU):"
skipped tests.log
skipped hipdrv-tests.log
skipped rocmsmi-tests.log
if ((${#failed[@]} > 0)); then
	printf '== FAILED: %s\n' "${failed[@]}"
	exit 1
fi
echo "== all steps passed"
RUN
sed -i "s/@GLIBC@/${glibc#GLIBC_}/" "$dir/run.sh"
chmod +x "$dir/run.sh"
echo "built $dir:"
ls -l "$dir"
