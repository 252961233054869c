#!/usr/bin/env bash
# Builds, here and against the CUDA link stub, what checks memtrack on a
# machine with an NVIDIA GPU and no Go toolchain, into out/gpu-check/:
#
#	memtrack.test  the root package's tests and CUDA benchmarks (-tags cuda)
#	bench.test     the bench/ package's benchmarks (-tags cuda), if it exists
#	run.sh         runs them: the tests, the reconciliation table (tracked
#	               bytes against the driver's change in used memory, for
#	               1 KiB to 1 GiB, and the context overhead), the
#	               stream-ordered table (per size: tracked peak, device-side
#	               peak, the pool's USED_MEM_HIGH and RESERVED_MEM_HIGH, for
#	               buffers freed behind a memset of 1 GiB), the benchmarks
#
# Copy the folder to the GPU machine and run ./run.sh there; it needs the
# NVIDIA driver (libcuda.so.1) and about 1.6 GiB of free GPU memory.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(./scripts/cuda-dev.sh)"
dir=out/gpu-check
rm -rf "$dir"
mkdir -p "$dir"
echo "== go test -c -tags cuda -> $dir"
go test -c -tags cuda -o "$dir/memtrack.test" .
if [[ -d bench ]]; then
	go test -c -tags cuda -o "$dir/bench.test" ./bench
fi

cat >"$dir/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs memtrack's CUDA checks on this machine's GPU (see scripts/gpu-check.sh).
# MEMTRACK_BENCHTIME sets -test.benchtime (default 1s).
set -euo pipefail
cd "$(dirname "$0")"
benchtime=${MEMTRACK_BENCHTIME:-1s}

echo "== tests"
./memtrack.test -test.count=1 -test.v

echo "== reconciliation: tracked bytes against the driver's used memory"
MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.run '^TestCUDAReconcile$' -test.v

echo "== stream-ordered: tracked and device-side peaks against the pool's highs"
MEMTRACK_RECONCILE=1 ./memtrack.test -test.count=1 -test.run '^TestCUDAStreamReconcile$' -test.v

echo "== benchmarks: tracked cuMemAlloc+cuMemFree and cuMemAllocAsync+cuMemFreeAsync against the raw pairs"
./memtrack.test -test.run '^$' -test.bench CUDA -test.benchmem -test.benchtime "$benchtime"
if [[ -x bench.test ]]; then
	./bench.test -test.run '^$' -test.bench . -test.benchmem -test.benchtime "$benchtime"
fi
RUN
chmod +x "$dir/run.sh"
echo "built $dir:"
ls -l "$dir"
