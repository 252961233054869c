#!/usr/bin/env bash
# The CUDA backend's checks, on any Linux machine, GPU or not:
#
#  1. Without cuda.h: memtrack loads the driver and NVML at run time, so
#     every package of the module but those that import mumax's binding
#     (package cu and examples/track, whose users link libcuda as mumax's
#     do) builds with -tags cuda with cgo and a C compiler alone. The step
#     first checks that the C compiler finds no cuda.h, then vets those
#     packages, builds the root package's test binary and examples/profile,
#     checks with readelf and nm that neither needs libcuda or
#     libnvidia-ml nor leaves a CUDA or NVML symbol unresolved, and runs
#     examples/profile on the CPU and, without the driver, on cuda:0, where
#     it must stop with the reason (also under LD_BIND_NOW=1).
#  2. The fakes: the fake driver of testdata/fakecuda into
#     .cache/fakecuda/libcuda.so.1, against NVIDIA's cuda.h
#     (scripts/cuda-dev.sh, cached in .cache/cuda), and the fake NVML of
#     testdata/fakenvml into .cache/fakenvml/libnvidia-ml.so.1, against
#     NVIDIA's nvml.h as github.com/NVIDIA/go-nvml v0.13.4-1 ships it (go
#     mod download): the headers check the fakes' signatures.
#  3. vet, build and the race-detector tests of every package with -tags
#     cuda against the fakes (cuda.h and its link stub for mumax's binding);
#     then the tests again under LD_BIND_NOW=1, where an unresolved symbol
#     would stop a test binary at start.
#  4. The CUDA packages' tests under each other reading the fake offers,
#     scripts/two-instances.sh (two instances sharing one fake GPU),
#     scripts/two-instances-elastic.sh (two instances whose elastic caches
#     follow the fake GPU: the first shrinks for the second and grows back),
#     scripts/fit-claim-elastic.sh (a newcomer claims the room its load
#     needs, and a follower shrinks for the claim before it allocates),
#     examples/track, package cu on mumax3 itself (scripts/try-mumax3.sh),
#     and the folder of scripts/gpu-check.sh run on the fake driver twice,
#     so that what a GPU machine runs is known to work: once as a one-GPU
#     machine whose device bears a real GPU's name (the tests then cannot
#     tell the fake and take every branch they take on a GPU), once with
#     two devices; last, examples/profile on two fake devices of unequal
#     memory, whose common budget the smaller must limit, and on one with
#     its decode step captured in CUDA graphs (-graphs), whose budget must
#     set aside what the driver then reserves for them; and the main job's
#     -fit, whose prediction must equal what the driver then counts.
#  5. NVIDIA's own driver libraries, 535 and 470, as Debian's non-free
#     packages ship them, fetched and unpacked into .cache/nvidia-libs,
#     never installed (scripts/test-nvidia-libs.sh): every call of
#     memtrack's driver table at the version memtrack asks, the main job's
#     stop at cuInit without a GPU, the CPU with the driver on the path, and
#     each NVML beside the fake driver failing at nvmlInit_v2 alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v gcc >/dev/null; then
	apt-get install -y -qq gcc >/dev/null
fi

# ---- 1. without cuda.h

# nocuda runs a command with no flag or variable that could show the C
# compiler or the linker a CUDA header or library.
nocuda() { env -u CGO_CFLAGS -u CGO_CPPFLAGS -u CGO_LDFLAGS -u CPATH -u C_INCLUDE_PATH -u LIBRARY_PATH "$@"; }
if echo '#include <cuda.h>' | nocuda gcc -E -x c - >/dev/null 2>&1; then
	echo "test-cuda.sh: the C compiler finds a cuda.h of its own (in /usr/include?): the build without CUDA headers cannot be checked on this machine" >&2
	exit 1
fi
echo "== no cuda.h: the C compiler finds none (CGO_CFLAGS unset$([[ -e /usr/local/cuda ]] && echo ", /usr/local/cuda present but on no include path" || echo ", no /usr/local/cuda"))"
mumax=github.com/mumax/3/cuda/cu
nocu=$(go list -tags cuda -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./... |
	awk -v cu="$mumax" '{ for (i = 2; i <= NF; i++) if ($i == cu) next; print $1 }')
withcu=$(go list -tags cuda -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./... |
	awk -v cu="$mumax" '{ for (i = 2; i <= NF; i++) if ($i == cu) { print $1; next } }')
echo "== without cuda.h: go vet -tags cuda, every package but those that import mumax's cu ($(echo $withcu))"
# shellcheck disable=SC2086 # the package list splits on blanks
nocuda go vet -tags cuda $nocu
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
echo "== without cuda.h: go test -c -tags cuda . and go build -tags cuda ./examples/profile"
nocuda go test -c -tags cuda -o "$bin/memtrack.test" .
nocuda go build -tags cuda -o "$bin/profile" ./examples/profile
for b in memtrack.test profile; do
	echo "== readelf -d $b: no NEEDED libcuda or libnvidia-ml; nm -D: no undefined CUDA or NVML symbol"
	readelf -d "$bin/$b" | grep NEEDED
	if readelf -d "$bin/$b" | grep -E 'NEEDED.*(libcuda|libnvidia-ml)'; then
		echo "test-cuda.sh: $b needs the driver's libraries to start" >&2
		exit 1
	fi
	if nm -D --undefined-only "$bin/$b" | grep -E ' (cu|nvml)[A-Z]'; then
		echo "test-cuda.sh: $b leaves CUDA or NVML symbols for the dynamic loader to resolve" >&2
		exit 1
	fi
done
echo "== examples/profile -device cpu, built with -tags cuda, without the driver"
(cd "$bin" && env LD_LIBRARY_PATH= ./profile -device cpu >profile-cpu.out)
tail -n 3 "$bin/profile-cpu.out"
system_driver=$(ldconfig -p 2>/dev/null | grep -F 'libcuda.so.1 ' || true)
if [[ -n $system_driver ]]; then
	echo "== examples/profile -device cuda:0 without the driver: not run, this machine has one ($system_driver)"
else
	for bind in "" 1; do
		echo "== examples/profile -device cuda:0 without the driver${bind:+, LD_BIND_NOW=1}: it must stop with the reason"
		if out=$(cd "$bin" && env LD_LIBRARY_PATH= ${bind:+LD_BIND_NOW=1} ./profile -device cuda:0 2>&1); then
			printf '%s\n' "$out" >&2
			echo "test-cuda.sh: examples/profile ran on cuda:0 without a driver" >&2
			exit 1
		fi
		printf '%s\n' "$out"
		for want in 'backend unavailable' 'libcuda.so.1: cannot open shared object file'; do
			grep -qF "$want" <<<"$out" || { echo "test-cuda.sh: examples/profile -device cuda:0 did not say: $want" >&2; exit 1; }
		done
	done
fi

# ---- 2. the fakes, against NVIDIA's headers

eval "$(./scripts/cuda-dev.sh)"
include=/usr/local/cuda/include
if [[ -n ${CGO_CFLAGS:-} ]]; then
	include=${CGO_CFLAGS#-I}
fi
fake=$root/.cache/fakecuda
mkdir -p "$fake"
echo "== gcc testdata/fakecuda/fakecuda.c fakecuda_stream.c fakecuda_proc.c fakecuda_graph.c fakecuda_vmm.c -> $fake/libcuda.so.1"
gcc -O2 -Wall -Wextra -Werror -Wno-unused-parameter -shared -fPIC -I"$include" \
	-o "$fake/libcuda.so.1" testdata/fakecuda/fakecuda.c testdata/fakecuda/fakecuda_stream.c testdata/fakecuda/fakecuda_proc.c \
	testdata/fakecuda/fakecuda_graph.c testdata/fakecuda/fakecuda_vmm.c -lpthread
nvml_module=$(go mod download -json github.com/NVIDIA/go-nvml@v0.13.4-1 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
fakenvml=$root/.cache/fakenvml
mkdir -p "$fakenvml"
echo "== gcc testdata/fakenvml/fakenvml.c (nvml.h of $nvml_module) -> $fakenvml/libnvidia-ml.so.1"
gcc -O2 -Wall -Wextra -Werror -Wno-unused-parameter -shared -fPIC -I"$nvml_module/gen/nvml" \
	-o "$fakenvml/libnvidia-ml.so.1" testdata/fakenvml/fakenvml.c -ldl -lpthread
# The fakes, not a driver the machine may have, answer every test. The
# tests that run a process without NVML drop FAKENVML_DIR from its path.
export LD_LIBRARY_PATH=$fake:$fakenvml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKENVML_DIR=$fakenvml
# Some tests run a process on the real link stub, which loads but fails
# every call.
stubdir=$root/.cache/cudastub
mkdir -p "$stubdir"
if [[ -f $root/.cache/cuda/lib/libcuda.so ]]; then
	ln -sf "$root/.cache/cuda/lib/libcuda.so" "$stubdir/libcuda.so.1"
else
	ln -sf /usr/local/cuda/lib64/stubs/libcuda.so "$stubdir/libcuda.so.1"
fi
export MEMTRACK_CUDA_STUB_DIR=$stubdir

# ---- 3. the tests, against the fakes

echo "== go vet -tags cuda ./..."
go vet -tags cuda ./...
echo "== go build -tags cuda ./..."
go build -tags cuda ./...
echo "== go test -race -tags cuda ./... (fake driver)"
go test -race -tags cuda -count=1 ./...
echo "== LD_BIND_NOW=1 go test -tags cuda ./... (fake driver; every symbol bound at start)"
LD_BIND_NOW=1 go test -tags cuda -count=1 ./...

# ---- 4. the readings, the examples, the GPU folder

# Where the driver's reference is silent the fake offers each reading behind
# a switch (testdata/fakecuda/RULES.md); the figures must hold under every
# one, not only the default, and on a device whose graph memory comes in
# chunks other than the H200's (FAKECUDA_GRAPH_CHUNK), which memtrack
# learns from the driver.
for reading in FAKECUDA_POOL_FREE=enqueued FAKECUDA_TRIM_OBSERVED=query \
	FAKECUDA_GRAPH_HIGH_RESET=zero FAKECUDA_GRAPH_CHUNK=2097152; do
	echo "== go test -tags cuda (fake driver, $reading)"
	env "$reading" go test -tags cuda -count=1 . ./cu ./internal/cudadrv
done
# A prediction of a load learns the pools' chunk and the granularity from
# the driver: its table holds exact on a device whose pools reserve in
# other steps than the H200's 32 MiB, and whose granules are not 2 MiB.
for machine in FAKECUDA_POOL_STEP=$((8 << 20)) FAKECUDA_GRANULARITY=$((4 << 20)); do
	echo "== go test -tags cuda -run 'TestCUDAFit|TestPoolChunk' . ./internal/cudadrv (fake driver, $machine)"
	env "$machine" go test -tags cuda -count=1 -run 'TestCUDAFit|TestPoolChunk' . ./internal/cudadrv
done
# The readings of virtual memory management (reserve, create, map): the
# driver bindings' tests under each, Map and Unmap included, and the root's
# reservations (Device.Reserve, Reservation.Map and Unmap, the return check).
for reading in FAKECUDA_VMM_ADDRESS_FREE=unmap FAKECUDA_VMM_ADDRESS_FREE=defer FAKECUDA_VMM_ALIGN=page \
	FAKECUDA_VMM_CAPTURE=unsafe; do
	echo "== go test -tags cuda ./internal/cudadrv (fake driver, $reading)"
	env "$reading" go test -tags cuda -count=1 ./internal/cudadrv
	echo "== go test -race -tags cuda -run 'Reserv|ReturnCheck' . (fake driver, $reading)"
	env "$reading" go test -race -tags cuda -count=1 -run 'Reserv|ReturnCheck' .
done

echo "== scripts/two-instances.sh (fake driver and NVML)"
./scripts/two-instances.sh
echo "== scripts/two-instances-elastic.sh (fake driver and NVML)"
./scripts/two-instances-elastic.sh
echo "== scripts/fit-claim-elastic.sh (fake driver and NVML)"
./scripts/fit-claim-elastic.sh

echo "== go run -tags cuda ./examples/track (fake driver)"
go run -tags cuda ./examples/track

# The elastic cache: reserved for the budget, mapped block by block, half
# unmapped, and the return check must find the memory given back.
for dev in cuda:0 cpu; do
	echo "== go run -tags cuda ./examples/profile -device $dev -elastic (fake driver)"
	elastic=$(go run -tags cuda ./examples/profile -device "$dev" -elastic -cache-blocks 6 -block-size 8MiB)
	echo "$elastic"
	if ! grep -qx '    given back' <<<"$elastic"; then
		echo "test-cuda.sh: examples/profile -elastic on $dev: the return check did not find the memory unmapped given back" >&2
		exit 1
	fi
done

echo "== scripts/try-mumax3.sh: package cu as a drop-in on mumax3, and its buffer pool on the fake driver"
./scripts/try-mumax3.sh

echo "== scripts/gpu-check.sh, run on the fake driver"
./scripts/gpu-check.sh
echo "== out/gpu-check/run.sh on the fake driver: one device named NVIDIA H200"
FAKECUDA_DEVICES=1 FAKECUDA_NAME="NVIDIA H200" MEMTRACK_BENCHTIME=100x out/gpu-check/run.sh
echo "== out/gpu-check/run.sh on the fake driver: two devices"
FAKECUDA_DEVICES=2 MEMTRACK_BENCHTIME=100x out/gpu-check/run.sh

# The main job on two devices of unequal memory (4 and 2 GiB, each with a
# 300 MiB context): one forward pass split across both, each device's
# budget, and the blocks both can hold, which the smaller device limits.
echo "== go run -tags cuda ./examples/profile -device cuda:0,cuda:1 (fake driver, two devices of 4 and 2 GiB)"
several=$(FAKECUDA_DEVICES=2 FAKECUDA_CAPACITY=$((4 << 30)),$((2 << 30)) FAKECUDA_CONTEXT_BYTES=$((300 << 20)) \
	go run -tags cuda ./examples/profile -device cuda:0,cuda:1 -utilization 0.8)
echo "$several"
if ! grep -qx '  limited by: *cuda:1' <<<"$several"; then
	echo "test-cuda.sh: the common budget of cuda:0 and cuda:1 is not limited by cuda:1, the smaller device" >&2
	exit 1
fi

# The main job with its decode step captured in CUDA graphs after the pass
# (-graphs): the budget sets aside what the captures say the graphs need,
# and the driver, once they are launched, must have reserved exactly that
# (the fake reserves in 2 MiB granules, and the example's sizes are whole
# granules).
echo "== go run -tags cuda ./examples/profile -device cuda:0 -graphs (fake driver)"
graphs=$(go run -tags cuda ./examples/profile -device cuda:0 -graphs)
echo "$graphs"
grown=$(sed -n "s/.*the driver's GraphReserved grew \([^)]*\)).*/\1/p" <<<"$graphs")
aside=$(sed -n 's/.*; the budget set aside \(.*\)$/\1/p' <<<"$graphs")
if [[ -z $grown || $grown != "$aside" ]] || ! grep -q ' CUDA graphs$' <<<"$graphs"; then
	echo "test-cuda.sh: examples/profile -graphs: the budget set aside ${aside:-nothing} for CUDA graphs, the driver reserved ${grown:-nothing}" >&2
	exit 1
fi

# The main job with -fit: it predicts what the driver will count of its
# load before it loads, and checks the prediction after. On the fake, which
# follows an H200's rules, the prediction is exact: the last line's two
# figures must be equal, on one device and two, with and without -graphs
# and -elastic, and from a pass saved with -fit-save and read back with
# -fit-from. On the CPU the figures differ (the OS's figure holds the whole
# process): the line must be there.
fitsave=$(mktemp)
for args in "-device cuda:0" "-device cuda:0 -graphs -fit-save $fitsave" "-device cuda:0 -graphs -fit-from $fitsave" \
	"-device cuda:0 -elastic" "-device cuda:0 -elastic -graphs" "-device cuda:0,cuda:1" "-device cpu"; do
	echo "== go run -tags cuda ./examples/profile -fit $args (fake driver, two devices, contexts of 300 MiB)"
	# shellcheck disable=SC2086 # the flags split on blanks
	fitout=$(FAKECUDA_DEVICES=2 FAKECUDA_CONTEXT_BYTES=$((300 << 20)) go run -tags cuda ./examples/profile -fit $args)
	sed -n '/^fit: the load planned/,/^  fits:/p; /^fit check/,$p' <<<"$fitout"
	last=$(tail -n1 <<<"$fitout")
	if ! [[ $last =~ ^fit:\ device=[^\ ]+\ predicted=([0-9]+)\ measured=([0-9]+)\ source=[^\ ]+$ ]]; then
		echo "test-cuda.sh: examples/profile -fit $args: the last line is not the fit line: $last" >&2
		exit 1
	fi
	if [[ $args != *cpu* && ${BASH_REMATCH[1]} != "${BASH_REMATCH[2]}" ]]; then
		echo "test-cuda.sh: examples/profile -fit $args: predicted ${BASH_REMATCH[1]} bytes, measured ${BASH_REMATCH[2]}" >&2
		exit 1
	fi
done
rm -f "$fitsave"

# ---- 5. NVIDIA's own driver libraries

echo "== scripts/test-nvidia-libs.sh: NVIDIA's 535 and 470 driver libraries, without a GPU"
./scripts/test-nvidia-libs.sh
