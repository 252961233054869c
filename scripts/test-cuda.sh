#!/usr/bin/env bash
# The CUDA backend's checks, on any Linux machine, GPU or not: fetch cuda.h
# and the link stub (scripts/cuda-dev.sh, cached in .cache/cuda), build the
# fake driver of testdata/fakecuda into .cache/fakecuda/libcuda.so.1 and the
# fake NVML of testdata/fakenvml into .cache/fakenvml/libnvidia-ml.so.1, and
# run vet, build and the race-detector tests with -tags cuda against them.
# Then run scripts/two-instances.sh (two instances sharing one fake GPU).
# Then run the CUDA packages' tests again under each other reading the fake
# offers, run examples/track on it, try package cu on mumax3 itself
# (scripts/try-mumax3.sh), and build the folder of scripts/gpu-check.sh
# and run it on the fake driver twice, so that what a GPU machine runs is
# known to work: once as a one-GPU machine whose device bears a real GPU's
# name (the tests then cannot tell the fake and take every branch they take
# on a GPU), once with two devices.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v gcc >/dev/null; then
	apt-get install -y -qq gcc >/dev/null
fi
eval "$(./scripts/cuda-dev.sh)"
include=/usr/local/cuda/include
if [[ -n ${CGO_CFLAGS:-} ]]; then
	include=${CGO_CFLAGS#-I}
fi
fake=$root/.cache/fakecuda
mkdir -p "$fake"
echo "== gcc testdata/fakecuda/fakecuda.c fakecuda_stream.c fakecuda_proc.c -> $fake/libcuda.so.1"
gcc -O2 -Wall -Wextra -Werror -Wno-unused-parameter -shared -fPIC -I"$include" \
	-o "$fake/libcuda.so.1" testdata/fakecuda/fakecuda.c testdata/fakecuda/fakecuda_stream.c testdata/fakecuda/fakecuda_proc.c -lpthread
# The fake NVML (testdata/fakenvml) beside it, against NVIDIA's nvml.h as
# github.com/NVIDIA/go-nvml v0.13.4-1 ships it, which go mod download
# fetches (memtrack does not use the module).
nvml_include=$(go mod download -json github.com/NVIDIA/go-nvml@v0.13.4-1 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/gen/nvml
fakenvml=$root/.cache/fakenvml
mkdir -p "$fakenvml"
echo "== gcc testdata/fakenvml/fakenvml.c -> $fakenvml/libnvidia-ml.so.1"
gcc -O2 -Wall -Wextra -Werror -Wno-unused-parameter -shared -fPIC -I"$nvml_include" \
	-o "$fakenvml/libnvidia-ml.so.1" testdata/fakenvml/fakenvml.c -ldl -lpthread
# The fakes, not a driver the machine may have, answer every test. The
# tests that run a process without NVML drop FAKENVML_DIR from its path.
export LD_LIBRARY_PATH=$fake:$fakenvml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKENVML_DIR=$fakenvml
# One test runs a process on the real link stub, which must fail to init.
stubdir=$root/.cache/cudastub
mkdir -p "$stubdir"
if [[ -f $root/.cache/cuda/lib/libcuda.so ]]; then
	ln -sf "$root/.cache/cuda/lib/libcuda.so" "$stubdir/libcuda.so.1"
else
	ln -sf /usr/local/cuda/lib64/stubs/libcuda.so "$stubdir/libcuda.so.1"
fi
export MEMTRACK_CUDA_STUB_DIR=$stubdir

echo "== go vet -tags cuda ./..."
go vet -tags cuda ./...
echo "== go build -tags cuda ./..."
go build -tags cuda ./...
echo "== go test -race -tags cuda ./... (fake driver)"
go test -race -tags cuda -count=1 ./...

# Where the driver's reference is silent the fake offers each reading behind
# a switch (testdata/fakecuda/RULES.md); the figures must hold under every
# one, not only the default.
for reading in FAKECUDA_POOL_FREE=enqueued FAKECUDA_TRIM_OBSERVED=query FAKECUDA_ALLOC_REUSE=1; do
	echo "== go test -tags cuda (fake driver, $reading)"
	env "$reading" go test -tags cuda -count=1 . ./cu ./internal/cudadrv
done

echo "== scripts/two-instances.sh (fake driver and NVML)"
./scripts/two-instances.sh

echo "== go run -tags cuda ./examples/track (fake driver)"
go run -tags cuda ./examples/track

echo "== scripts/try-mumax3.sh: package cu as a drop-in on mumax3, and its buffer pool on the fake driver"
./scripts/try-mumax3.sh

echo "== scripts/gpu-check.sh, run on the fake driver"
./scripts/gpu-check.sh
echo "== out/gpu-check/run.sh on the fake driver: one device named NVIDIA H200"
FAKECUDA_DEVICES=1 FAKECUDA_NAME="NVIDIA H200" MEMTRACK_BENCHTIME=100x out/gpu-check/run.sh
echo "== out/gpu-check/run.sh on the fake driver: two devices"
FAKECUDA_DEVICES=2 MEMTRACK_BENCHTIME=100x out/gpu-check/run.sh
