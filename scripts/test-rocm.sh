#!/usr/bin/env bash
# The ROCm backend's checks, on any Linux machine, AMD GPU or not: the
# internal packages below the ROCm backend (internal/hipdrv, the HIP
# runtime; internal/rocmsmi, AMD's SMI library; internal/hiptest and
# internal/smitest, their tests' equipment) and the root package, built
# with -tags rocm.
#
#  1. Without AMD's headers: memtrack loads the HIP runtime and rocm_smi at
#     run time, so the packages build with cgo and a C compiler alone. The
#     step checks that the C compiler finds no hip/hip_runtime_api.h or
#     rocm_smi/rocm_smi.h, vets the packages, builds their test binaries
#     and the root package's, checks with readelf and nm that none needs an
#     AMD library or leaves a hip*, rsmi* or amdsmi* symbol unresolved, and
#     starts them without any AMD library under immediate binding
#     (LD_BIND_NOW=1).
#  2. The fakes, against AMD's headers from Debian (scripts/rocm-dev.sh,
#     cached in .cache/rocm): the fake HIP runtime of testdata/fakehip in
#     two builds, ROCm 6.4's calls (.cache/fakehip/libamdhip64.so.6) and
#     ROCm 5.2's (.cache/fakehip-5.2/libamdhip64.so.5), and the fake SMI
#     library of testdata/fakesmi, ROCm 5.7's (.cache/fakesmi/librocm_smi64.so.5)
#     and ROCm 5.2's, as Debian ships it (.cache/fakesmi-5.2/librocm_smi64.so.1).
#  3. vet and the race-detector tests of the packages against the fakes, no
#     test skipped; again under LD_BIND_NOW=1; again under each reading the
#     fakes offer where AMD's documents are silent (their RULES.md).
#  4. The root package on the fakes: vet, the race-detector tests (no
#     ROCm test skipped), again under LD_BIND_NOW=1; the main job
#     (go run -tags rocm ./examples/profile -device rocm:0);
#     KIND=rocm scripts/two-instances.sh (two instances on one fake AMD GPU, each
#     with the budget it gets alone); and the AMD GPU folder of
#     scripts/gpu-check-rocm.sh, run whole.
#  5. AMD's own libraries, Debian's libamdhip64-N and librocm-smi64-N with
#     what they need, unpacked (never installed): every call of memtrack's
#     table resolves, or is missing exactly where the table says it came in
#     a later release; hipInit's and hipGetDeviceCount's answers, printed in
#     the runtime's own words; rocm_smi loads and fails only at its
#     initialisation, in its words; the main job built with -tags rocm
#     stops on rocm:0 with the runtime's answers, and runs on the CPU.
#     (On a machine without an AMD GPU; with one, the answers are printed
#     and not checked.)
#  6. staticcheck, pinned as CI pins it, with -tags rocm on every package
#     (and its unused-code check without their tests).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v gcc >/dev/null; then
	apt-get install -y -qq gcc >/dev/null
fi
pkgs=(./internal/hipdrv ./internal/hiptest ./internal/rocmsmi ./internal/smitest)

# ---- 1. without AMD's headers

noamd() { env -u CGO_CFLAGS -u CGO_CPPFLAGS -u CGO_LDFLAGS -u CPATH -u C_INCLUDE_PATH -u LIBRARY_PATH "$@"; }
for header in hip/hip_runtime_api.h rocm_smi/rocm_smi.h; do
	if echo "#include <$header>" | noamd gcc -E -x c - >/dev/null 2>&1; then
		echo "test-rocm.sh: the C compiler finds a $header of its own (in /usr/include?): the build without AMD's headers cannot be checked on this machine" >&2
		exit 1
	fi
done
echo "== no AMD header: the C compiler finds neither hip/hip_runtime_api.h nor rocm_smi/rocm_smi.h"
echo "== without AMD's headers: go vet -tags rocm ${pkgs[*]}"
noamd go vet -tags rocm "${pkgs[@]}"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
# The root package's test binary too: the library with its backend, and
# the main job's build (examples/profile) with it.
for p in hipdrv rocmsmi memtrack; do
	dir=./internal/$p
	[[ $p == memtrack ]] && dir=.
	noamd go test -c -tags rocm -o "$bin/$p.test" "$dir"
	echo "== readelf -d $p.test: no NEEDED AMD library; nm -D: no undefined hip*, rsmi* or amdsmi* symbol"
	readelf -d "$bin/$p.test" | grep NEEDED
	if readelf -d "$bin/$p.test" | grep -E 'NEEDED.*(amdhip|rocm_smi|amd_smi|hsa-runtime|hsakmt|amd_comgr)'; then
		echo "test-rocm.sh: $p.test needs AMD's libraries to start" >&2
		exit 1
	fi
	if nm -D --undefined-only "$bin/$p.test" | grep -E ' (hip|rsmi_|amdsmi_)[A-Za-z_]'; then
		echo "test-rocm.sh: $p.test leaves HIP or SMI symbols for the dynamic loader to resolve" >&2
		exit 1
	fi
	echo "== $p.test starts without any AMD library, every symbol bound at start (LD_BIND_NOW=1)"
	(cd "$bin" && env LD_LIBRARY_PATH= LD_BIND_NOW=1 "./$p.test" -test.list . >/dev/null)
done

# ---- 2. the fakes, against AMD's headers

eval "$(./scripts/rocm-dev.sh)"
echo "== Debian's packages: $MEMTRACK_ROCM_PACKAGES"
cflags=(-O2 -Wall -Wextra -Werror -Wno-unused-parameter -shared -fPIC -I"$MEMTRACK_ROCM_INCLUDE")
build() { # build DIR SONAME [FLAGS...] -- SOURCES... LIBS...
	local dir=$root/.cache/$1 soname=$2
	shift 2
	mkdir -p "$dir"
	echo "== gcc $* -> .cache/${dir##*/.cache/}/$soname"
	gcc "${cflags[@]}" -Wl,-soname,"$soname" -o "$dir/$soname" "$@"
}
hip_src=(testdata/fakehip/fakehip.c testdata/fakehip/fakehip_stream.c testdata/fakehip/fakehip_proc.c -lpthread)
build fakehip libamdhip64.so.6 "${hip_src[@]}"
build fakehip-5.2 libamdhip64.so.5 -DFAKEHIP_ABI=502 "${hip_src[@]}"
build fakesmi librocm_smi64.so.5 -Itestdata/fakehip testdata/fakesmi/fakesmi.c -ldl -lpthread
build fakesmi-5.2 librocm_smi64.so.1 -Itestdata/fakehip -DFAKESMI_ROCM=502 testdata/fakesmi/fakesmi.c -ldl -lpthread
export MEMTRACK_FAKEHIP_DIR=$root/.cache/fakehip MEMTRACK_FAKEHIP52_DIR=$root/.cache/fakehip-5.2
export MEMTRACK_FAKESMI_DIR=$root/.cache/fakesmi MEMTRACK_FAKESMI52_DIR=$root/.cache/fakesmi-5.2
# The fakes, not a runtime the machine may have, answer every test; each
# test that needs another library path sets its own in a child process.
export LD_LIBRARY_PATH=$MEMTRACK_FAKEHIP_DIR:$MEMTRACK_FAKESMI_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# ---- 3. the tests, against the fakes

echo "== go vet -tags rocm ${pkgs[*]}"
go vet -tags rocm "${pkgs[@]}"
log=$bin/test.log
echo "== go test -race -tags rocm ${pkgs[*]} (fakes; AMD's libraries for TestReal*)"
go test -race -tags rocm -count=1 -v "${pkgs[@]}" >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E '^(ok|FAIL|---)' "$log" | grep -v -- '--- PASS' || true
if grep -- '--- SKIP' "$log"; then
	echo "test-rocm.sh: tests skipped (above): the fakes or AMD's libraries did not reach them" >&2
	exit 1
fi
echo "== LD_BIND_NOW=1 go test -tags rocm ${pkgs[*]} (every symbol bound at start)"
LD_BIND_NOW=1 go test -tags rocm -count=1 "${pkgs[@]}"
for reading in FAKEHIP_MEMINFO=process FAKEHIP_POOL_FREE=enqueued FAKEHIP_TRIM_OBSERVED=executed FAKEHIP_HIGH_RESET=zero \
	FAKEHIP_PROC_VERSION=check FAKESMI_LIST_FIELDS=all FAKESMI_GPUS=queues; do
	echo "== go test -tags rocm ./internal/hipdrv ./internal/rocmsmi ($reading)"
	env "$reading" go test -tags rocm -count=1 ./internal/hipdrv ./internal/rocmsmi
done

# ---- 4. the root package, the main job and the GPU folder, on the fakes

echo "== go vet -tags rocm ."
go vet -tags rocm .
echo "== go test -race -tags rocm . (the fakes)"
go test -race -tags rocm -count=1 -v . >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -E '^(ok|FAIL)' "$log"
grep -E -- '^--- (PASS|FAIL): TestROCm' "$log"
# Every ROCm test runs on the fakes; the holder is another process of the
# per-process test, and skips where it runs alone.
if grep -E -- '--- SKIP: TestROCm' "$log" | grep -v -- '--- SKIP: TestROCmChildHolder '; then
	echo "test-rocm.sh: ROCm tests of the root package skipped (above): the fakes did not reach them" >&2
	exit 1
fi
echo "== LD_BIND_NOW=1 go test -tags rocm . (every symbol bound at start)"
LD_BIND_NOW=1 go test -tags rocm -count=1 .
echo "== go run -tags rocm ./examples/profile -device rocm:0 (the fakes)"
out=$(go run -tags rocm ./examples/profile -device rocm:0)
echo "$out"
grep -q '^  figures:   per process (rocm_smi)$' <<<"$out" || { echo "test-rocm.sh: the main job's budget on rocm:0 is not from rocm_smi's per-process figures" >&2; exit 1; }
echo "== KIND=rocm scripts/two-instances.sh (the fakes)"
KIND=rocm ./scripts/two-instances.sh
echo "== scripts/gpu-check-rocm.sh, then its run.sh (the fakes)"
./scripts/gpu-check-rocm.sh
MEMTRACK_BENCHTIME=100x out/gpu-check-rocm/run.sh >"$bin/gpu-check.log" 2>&1 || { cat "$bin/gpu-check.log"; exit 1; }
grep '^== ' "$bin/gpu-check.log" | grep -v '^== \(together\|alone\)'

# ---- 5. AMD's own libraries

echo "== AMD's HIP runtime from Debian, on this machine ($(test -e /dev/kfd && echo "/dev/kfd present" || echo "no AMD GPU"))"
MEMTRACK_HIPDRV_CHILD=TestRealRuntime LD_LIBRARY_PATH=$MEMTRACK_ROCM_REAL_LIBS \
	go test -tags rocm -count=1 -v -run '^TestRealRuntime$' ./internal/hipdrv | grep -v '^=== RUN'
echo "== AMD's rocm_smi from Debian"
MEMTRACK_ROCMSMI_CHILD=TestRealLibrary LD_LIBRARY_PATH=$MEMTRACK_ROCM_REAL_LIBS \
	go test -tags rocm -count=1 -v -run '^TestRealLibrary$' ./internal/rocmsmi 2>&1 | grep -v '^=== RUN'
echo "== the main job (-tags rocm) with AMD's libraries from Debian: rocm:0, then the CPU"
go build -tags rocm -o "$bin/profile" ./examples/profile
if out=$(LD_LIBRARY_PATH=$MEMTRACK_ROCM_REAL_LIBS "$bin/profile" -device rocm:0 2>&1); then
	echo "$out"
	if [[ ! -e /dev/kfd ]]; then
		echo "test-rocm.sh: the main job ran on rocm:0 without an AMD GPU" >&2
		exit 1
	fi
else
	echo "$out"
	# The runtime's own answers on a machine without an AMD GPU, as the
	# runtime names them (hipGetErrorName), in the error that says why
	# rocm:0 cannot start.
	want='hipInit answered hipErrorInvalidDevice, hipGetDeviceCount hipErrorNoDevice'
	if [[ ! -e /dev/kfd ]] && ! grep -qF "$want" <<<"$out"; then
		echo "test-rocm.sh: the main job did not say why rocm:0 cannot start in the runtime's words ($want)" >&2
		exit 1
	fi
fi
LD_LIBRARY_PATH=$MEMTRACK_ROCM_REAL_LIBS "$bin/profile" -device cpu >"$bin/cpu.out" 2>&1 || { cat "$bin/cpu.out"; exit 1; }
head -n 3 "$bin/cpu.out"

# ---- 6. staticcheck

staticcheck=$(go env GOPATH)/bin/staticcheck
if ! "$staticcheck" -version 2>/dev/null | grep -q '0.8.2'; then
	go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
echo "== staticcheck -tags rocm ./..."
"$staticcheck" -tags rocm ./...
echo "== staticcheck -tests=false -checks U1000 -tags rocm ./..."
"$staticcheck" -tests=false -checks U1000 -tags rocm ./...
