#!/usr/bin/env bash
# Builds, here, what checks memtrack on a machine with an NVIDIA GPU and no
# Go toolchain, into out/gpu-check/. memtrack loads the driver at run time,
# so none of it needs cuda.h to build, and every binary starts on any Linux
# with glibc, GPU or not (without one, the CUDA tests skip and say why), but
# cu.test and track:
#
#	memtrack.test       the root package's tests and CUDA benchmarks (-tags cuda)
#	cudadrv.test        the driver bindings' tests: the driver rules memtrack
#	                    relies on (internal/cudadrv/doc.go), on this driver,
#	                    graph memory's and virtual memory management's
#	                    included, each graph test printing the driver's
#	                    graph memory figures beside what its graphs need
#	nvml.test           the NVML binding's tests: the NVML rules memtrack
#	                    relies on (internal/nvml/doc.go), on this machine's NVML
#	memtrack-race.test  the same tests built with -race
#	cu.test, track      the tests and benchmark of package cu, the drop-in for
#	                    mumax's binding, and examples/track, which link
#	                    libcuda as mumax's users do: built only where cgo
#	                    finds cuda.h (after eval "$(./scripts/cuda-dev.sh)", as
#	                    scripts/test-cuda.sh does), run only where
#	                    libcuda.so.1 loads
#	profile             the main job (examples/profile), for two-instances.sh
#	two-instances.sh    scripts/two-instances.sh: two serving instances
#	                    started together on the GPU, each budget from
#	                    NVML's per-process figures against the one alone
#	two-instances-elastic.sh
#	                    scripts/two-instances-elastic.sh: two instances
#	                    with elastic caches that follow the GPU, the first
#	                    shrinking when the second starts and growing back
#	                    when it exits
#	driver-probes/      scripts/driver-probes: small Python programs that
#	                    call the driver through ctypes and print what it
#	                    answers where NVIDIA's documents are silent (calls
#	                    during a capture, graph memory's chunks), whose
#	                    answers on an H200 testdata/fakecuda/RULES.md cites
#	run.sh              runs them: the tests, the race-detector tests, the
#	                    reconciliation table (tracked bytes against the
#	                    driver's change in used memory, for 1 KiB to 1 GiB,
#	                    and the context overhead), NVML's figure of this
#	                    process beside tracked, cuMemGetInfo and the pool,
#	                    the two instances, the two elastic instances
#	                    (which map most of the GPU's memory between
#	                    them: run it on an otherwise idle GPU), the
#	                    stream-ordered table
#	                    (per size: tracked peak, device-side peak, the
#	                    pool's USED_MEM_HIGH and RESERVED_MEM_HIGH, for
#	                    buffers freed behind a memset of 1 GiB), CUDA
#	                    graphs (the root package's graph tests, each
#	                    printing the driver's graph memory figures beside
#	                    memtrack's need of each graph, and the main job
#	                    with its decode step captured in graphs: the
#	                    budget's figure beside what the driver reserved),
#	                    the stream-ordered pair's benchmark (tracked and
#	                    raw side by side, the event's own cost apart),
#	                    the other CUDA benchmarks, and the driver probes
#	                    (each bounded to 60 s; where python3 is missing,
#	                    run.sh says so and runs none)
#
# Copy the folder to the GPU machine and run ./run.sh there; it needs the
# NVIDIA driver (libcuda.so.1, found as the dynamic loader finds it:
# LD_LIBRARY_PATH, then the system's library path), glibc (the oldest version the binaries run
# with is measured here, from their symbol versions, and printed by run.sh)
# and about 1.6 GiB of free GPU memory, and is sized to finish in under 3
# minutes on one GPU. Every step runs even when an earlier one fails, so
# that every figure is printed; run.sh exits non-zero at the end if any step
# failed, and names them. On a machine with one GPU the tests that need two
# skip; run.sh lists every test it skipped, with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=out/gpu-check
rm -rf "$dir"
mkdir -p "$dir"
echo "== go test -c -tags cuda [-race] -> $dir"
go test -c -tags cuda -o "$dir/memtrack.test" .
go test -c -race -tags cuda -o "$dir/memtrack-race.test" .
# mumax's binding includes cuda.h from /usr/local/cuda/include, or where
# CGO_CFLAGS says.
# shellcheck disable=SC2086 # CGO_CFLAGS holds several flags
if echo '#include <cuda.h>' | gcc -E -x c -I/usr/local/cuda/include ${CGO_CFLAGS:-} - >/dev/null 2>&1; then
	go test -c -tags cuda -o "$dir/cu.test" ./cu
	go build -tags cuda -o "$dir/track" ./examples/track
else
	echo "== cu.test and track not built: package cu and examples/track link mumax's binding, which needs cuda.h (eval \"\$(./scripts/cuda-dev.sh)\" first)"
fi
go test -c -tags cuda -o "$dir/cudadrv.test" ./internal/cudadrv
go test -c -tags cuda -o "$dir/nvml.test" ./internal/nvml
go build -tags cuda -o "$dir/profile" ./examples/profile
cp scripts/two-instances.sh "$dir/two-instances.sh"
cp scripts/two-instances-elastic.sh "$dir/two-instances-elastic.sh"
cp -r scripts/driver-probes "$dir/driver-probes"
rm -rf "$dir/driver-probes/__pycache__"

# The oldest glibc the binaries run with: the newest GLIBC_x.y symbol
# version any of them needs.
glibc=unknown
if command -v objdump >/dev/null; then
	glibc=$(objdump -T "$dir"/*.test "$dir/profile" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1)
fi
echo "== the binaries need glibc ${glibc#GLIBC_} or later"

cat >"$dir/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs memtrack's CUDA checks on this machine's GPU (see scripts/gpu-check.sh).
# MEMTRACK_BENCHTIME sets -test.benchtime (default 200ms, three runs of each
# benchmark). Every step runs; the exit status says whether all passed.
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
tests() {
	./memtrack.test -test.count=1 -test.v -test.timeout 90s -test.skip "$skip" >tests.log 2>&1
	local rc=$?
	cat tests.log
	return $rc
}
step "tests" tests
rules() {
	./cudadrv.test -test.count=1 -test.v -test.timeout 60s >cudadrv-tests.log 2>&1
	local rc=$?
	cat cudadrv-tests.log
	return $rc
}
step "the driver rules memtrack relies on (internal/cudadrv)" rules
nvmlrules() {
	./nvml.test -test.count=1 -test.v -test.timeout 60s >nvml-tests.log 2>&1
	local rc=$?
	cat nvml-tests.log
	return $rc
}
step "the NVML rules memtrack relies on (internal/nvml)" nvmlrules
step "tests under the race detector" ./memtrack-race.test -test.count=1 -test.timeout 90s -test.skip "$skip"
step "reconciliation: tracked bytes against the driver's used memory" \
	env MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.run '^TestCUDAReconcile$' -test.v -test.timeout 60s
step "per process: NVML's figure of this process beside tracked, cuMemGetInfo and the pool" \
	env MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.run '^TestNVMLReconcile$' -test.v -test.timeout 60s
step "two instances started together: each budget from NVML's per-process figures against the one alone" \
	env PROFILE=./profile ./two-instances.sh
step "two instances with elastic caches following the GPU: the first shrinks when the second starts, grows back when it exits" \
	env PROFILE=./profile ./two-instances-elastic.sh
step "stream-ordered: tracked and device-side peaks against the pool's highs" \
	env MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.run '^TestCUDAStreamReconcile$' -test.v -test.timeout 60s
graphs() {
	env MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.run '^TestCUDAGraph' -test.v -test.timeout 60s >graphs.log 2>&1
	local rc=$?
	grep -E '^(=== RUN|--- |    graphs_cuda_test.go:[0-9]+: .*(driver|memtrack):)' graphs.log
	grep -q -- '--- FAIL' graphs.log && cat graphs.log
	return $rc
}
step "CUDA graphs: the driver's graph memory figures beside memtrack's need of each graph" graphs
step "CUDA graphs in the main job: its decode step captured after the pass, the budget's figure beside what the driver reserved" \
	./profile -device cuda:0 -graphs
# Where the driver's reference is silent, the fake driver offers each
# reading behind a switch; these say which one this driver follows.
readings() {
	env MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.run '^TestCUDA(PoolFree|AllocReuse|Trim)Reading$' -test.v -test.timeout 60s >readings.log 2>&1
	local rc=$?
	cat readings.log
	return $rc
}
step "readings: which semantics this driver follows where the fake offers a choice" readings
# The stream-ordered pair alone, for its table: per size, the raw pair,
# the tracked pair, and, interleaved in one run on a stream of its own and
# on the legacy default stream, each per pair (raw-ns,
# tracked-ns), the raw pair with the tracked pair's driver calls beside it
# (checked-ns: the tracked pair's floor without memtrack's Go code), an
# event's own cost apart (event-ns: cuEventRecord and cuEventQuery of one
# event, what a reading pays for a stream it finds busy), and the ratios of
# tracked to raw and to checked. docs/performance.md predicts the ratio;
# run longer for it: -test.benchtime 3000x -test.count 5.
step "benchmarks: the stream-ordered pair, tracked against raw, the event's own cost apart" \
	./memtrack.test -test.run '^$' -test.bench '^BenchmarkCUDAAllocFreeAsync$' -test.benchmem -test.benchtime "$benchtime" -test.count 3
step "benchmarks: tracked cuMemAlloc+cuMemFree and the other CUDA benchmarks against the raw pairs" \
	./memtrack.test -test.run '^$' -test.bench CUDA -test.skip '^BenchmarkCUDAAllocFreeAsync$' -test.benchmem -test.benchtime "$benchtime" -test.count 3
cutests() {
	./cu.test -test.count=1 -test.short -test.v -test.timeout 90s >cu-tests.log 2>&1
	local rc=$?
	cat cu-tests.log
	return $rc
}
# cu.test links libcuda.so.1, as mumax's binding does: it starts only where
# the driver is.
if [[ ! -x ./cu.test ]]; then
	echo "== the cu drop-in's tests: not built (the build machine had no cuda.h)"
elif ! ./cu.test -test.run '^$' >/dev/null 2>&1; then
	echo "== the cu drop-in's tests: cu.test does not start here (it links libcuda.so.1, which this machine lacks)"
else
	step "the cu drop-in's tests" cutests
	step "benchmarks: the cu drop-in's MemAlloc+MemFree against the raw cu pair" \
		./cu.test -test.run '^$' -test.bench MemAllocFree -test.benchmem -test.benchtime "$benchtime" -test.count 3
fi
if [[ -x ./track ]] && ./cu.test -test.run '^$' >/dev/null 2>&1; then
	step "examples/track" ./track
fi
# The driver probes (scripts/driver-probes): what this driver answers where
# NVIDIA's documents are silent, beside what an H200 answered (each
# script's header, and testdata/fakecuda/RULES.md). Each prints into its
# log and here, bounded to 60 s.
probe() {
	local log=probe-${1%.py}.log
	timeout 60 python3 "driver-probes/$1" >"$log" 2>&1
	local rc=$?
	cat "$log"
	((rc == 124)) && echo "== driver-probes/$1: stopped after 60 s"
	return $rc
}
if command -v python3 >/dev/null; then
	step "driver probe: what the driver answers about a stream whose capture is invalidated" probe invalidated-capture.py
	step "driver probe: whether a node the driver refuses leaves a relaxed capture as it was" probe refused-nodes.py
	step "driver probe: what the driver reserves for a graph of one 1-byte allocation, uploaded" probe upload-chunk.py
	step "driver probe: the graph-chunk probe's calls during a program's capture, and its cost" probe graph-probe-during-capture.py
	step "driver probe: how much graph memory the allocations a launch leaves live pin" probe outliving-pins.py
	step "driver probe: where the driver lays out a graph's allocations" probe outliving-layout.py
else
	echo "== driver probes: not run (no python3 on this machine)"
fi

echo "== skipped on this machine (tests that need two GPUs skip on one; those that need the fake driver's fault injection skip on a GPU):"
skipped tests.log
skipped cudadrv-tests.log
skipped nvml-tests.log
[[ -f cu-tests.log ]] && skipped cu-tests.log
grep -h -o '[a-z]* reading: .*' readings.log 2>/dev/null | sed 's/^/== /'
grep -h -o 'graph [a-z-]* reading: .*' cudadrv-tests.log 2>/dev/null | sed 's/^/== /'
grep -h -o 'vmm [a-z-]* reading: .*' cudadrv-tests.log 2>/dev/null | sed 's/^/== /'
grep -h -o 'free-sync reading: .*' cudadrv-tests.log 2>/dev/null | sed 's/^/== /'
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
