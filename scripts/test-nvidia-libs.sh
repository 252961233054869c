#!/usr/bin/env bash
# memtrack against NVIDIA's own driver libraries, on a machine without a
# GPU: the user-space libraries of two driver branches as Debian ships them
# in its non-free component,
#
#   535 (CUDA 12.2): libcuda1 and libnvidia-ml1
#   470 (CUDA 11.4): libnvidia-tesla-470-cuda1 and libnvidia-tesla-470-ml1
#
# fetched with apt-get download and unpacked with dpkg-deb into
# .cache/nvidia-libs/ (git ignores it), never installed: the machine keeps
# no driver, so the other checks of scripts/test-cuda.sh still run without
# one. With each driver's libcuda.so.1 first on the loader's path:
#
#  a. every call of memtrack's driver table (internal/cudadrv/driver.h)
#     resolves at the CUDA version memtrack asks, or, where that version is
#     above the driver's, is reported as needing a newer driver, exactly as
#     the table says (internal/cudadrv's TestTableAtDriverVersion, which
#     prints the table): a call added to driver.h is checked with the rest;
#  b. examples/profile -device cuda:0 stops with cuInit's reason
#     (CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"), under
#     lazy and immediate binding (LD_BIND_NOW=1);
#  c. examples/profile -device cpu runs;
#
# and with each driver's libnvidia-ml.so.1 beside the fake driver
# (.cache/fakecuda, which scripts/test-cuda.sh builds first):
#
#  d. examples/profile -device cuda:0 runs, and NVML fails at nvmlInit_v2
#     with "Driver Not Loaded" (no kernel driver), under both bindings:
#     memtrack finds every NVML call it uses with dlsym before it
#     initialises NVML, so a library without one would fail before, naming
#     the call.
#
# The packages are fetched once per version (about 7 MB) and their
# libraries kept; a newer version replaces the older. It installs nothing
# else. On a machine with an NVIDIA kernel driver loaded, b and d are not
# run (cuInit and nvmlInit_v2 would answer otherwise). Without apt-get it
# says so and stops, as a failure under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { echo "test-nvidia-libs: $*" >&2; }
fail() {
	log "$*"
	exit 1
}

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	log "needs apt-get and dpkg-deb (Debian) to fetch NVIDIA's libraries: not run"
	[[ ${CI:-} != true ]] || exit 1
	exit 0
fi
fake=$root/.cache/fakecuda
[[ -f $fake/libcuda.so.1 ]] || fail "no fake driver in $fake: scripts/test-cuda.sh builds it, then runs this"

# Each driver: its name, the packages of libcuda.so.1 and libnvidia-ml.so.1,
# and the CUDA version its libcuda reports (cuDriverGetVersion).
drivers=(
	"535 libcuda1 libnvidia-ml1 12.2"
	"470 libnvidia-tesla-470-cuda1 libnvidia-tesla-470-ml1 11.4"
)
packages=()
for d in "${drivers[@]}"; do
	read -r _ cuda nvml _ <<<"$d"
	packages+=("$cuda" "$nvml")
done

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi

candidate() { apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }'; }

# Enable the non-free component where no configured source offers the
# packages (CI's fresh machine).
. scripts/debian-non-free.sh
enable_non_free "${packages[@]}" || fail "non-free cannot be enabled"

# fetch unpacks the driver libraries of package $1 into
# .cache/nvidia-libs/$1_<version> and prints that folder: the candidate
# version, fetched once; older versions' folders are removed.
cache=$root/.cache/nvidia-libs
fetch() {
	local pkg=$1 version dir work deb
	version=$(candidate "$pkg")
	[[ -n $version ]] || fail "apt offers no $pkg, even with non-free enabled (apt-cache search libnvidia names what this release has)"
	dir=$cache/${pkg}_${version//[^A-Za-z0-9.+-]/_}
	if ! compgen -G "$dir/lib*.so.1" >/dev/null; then
		work=$(mktemp -d)
		log "fetching $pkg $version"
		# As root, apt downloads as its _apt user, which may not reach $work.
		local sandbox=()
		[[ $(id -u) -ne 0 ]] || sandbox=(-o APT::Sandbox::User=root)
		(cd "$work" && apt-get download -qq "${sandbox[@]}" "$pkg=$version" >&2)
		deb=$(ls "$work"/*.deb)
		mkdir -p "$work/x"
		dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" --wildcards '*/lib*.so*'
		rm -rf "$dir" "$cache/${pkg}_"*
		mkdir -p "$dir"
		# The library and its soname link, as the package installs them
		# (libcuda.so.1 -> libcuda.so.535.261.03).
		find "$work/x" -name 'lib*.so*' ! -name '*.so' -exec cp -P {} "$dir/" \;
		rm -rf "$work"
	fi
	echo "$dir"
}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
nocuda() { env -u CGO_CFLAGS -u CGO_CPPFLAGS -u CGO_LDFLAGS -u CPATH -u C_INCLUDE_PATH -u LIBRARY_PATH "$@"; }
echo "== go test -c -tags cuda ./internal/cudadrv and go build -tags cuda ./examples/profile"
nocuda go test -c -tags cuda -o "$bin/cudadrv.test" ./internal/cudadrv
nocuda go build -tags cuda -o "$bin/profile" ./examples/profile

kernel=
if [[ -e /proc/driver/nvidia/version ]]; then
	kernel=$(head -n1 /proc/driver/nvidia/version)
fi

for d in "${drivers[@]}"; do
	read -r name cuda_pkg nvml_pkg version <<<"$d"
	cuda_dir=$(fetch "$cuda_pkg")
	nvml_dir=$(fetch "$nvml_pkg")
	lib=$(readlink "$cuda_dir/libcuda.so.1")

	echo "== $name ($lib): the driver table at the versions memtrack asks (TestTableAtDriverVersion)"
	out=$(cd "$bin" && env LD_LIBRARY_PATH="$cuda_dir" ./cudadrv.test -test.run '^TestTableAtDriverVersion$/^0$' -test.v -test.count=1 2>&1) || {
		printf '%s\n' "$out"
		fail "$name: the driver table does not resolve as memtrack's table says"
	}
	printf '%s\n' "$out"
	grep -q -- '--- PASS: TestTableAtDriverVersion/0 ' <<<"$out" || fail "$name: TestTableAtDriverVersion did not run on the driver"
	grep -qF "CUDA $version at $cuda_dir/libcuda.so.1," <<<"$out" || fail "$name: the driver loaded is not $cuda_dir/libcuda.so.1 of CUDA $version"

	echo "== $name: examples/profile -device cpu"
	out=$(cd "$bin" && env LD_LIBRARY_PATH="$cuda_dir" ./profile -device cpu 2>&1) || {
		printf '%s\n' "$out"
		fail "$name: examples/profile -device cpu failed with the driver on the path"
	}
	grep -q '^device cpu: ' <<<"$out" || fail "$name: examples/profile -device cpu printed no device"
	tail -n 3 <<<"$out"

	if [[ -n $kernel ]]; then
		echo "== $name: examples/profile -device cuda:0 and NVML not checked: this machine has a kernel driver ($kernel)"
		continue
	fi
	for bind in "" 1; do
		echo "== $name: examples/profile -device cuda:0${bind:+, LD_BIND_NOW=1}: it must stop with cuInit's reason"
		if out=$(cd "$bin" && env LD_LIBRARY_PATH="$cuda_dir" ${bind:+LD_BIND_NOW=1} ./profile -device cuda:0 2>&1); then
			printf '%s\n' "$out"
			fail "$name: examples/profile ran on cuda:0 without a GPU"
		fi
		printf '%s\n' "$out"
		for want in 'cuda:0: init failed: CUDA_ERROR_NO_DEVICE (code 100)' 'no CUDA-capable device is detected'; do
			grep -qF "$want" <<<"$out" || fail "$name: examples/profile -device cuda:0 did not say: $want"
		done
	done
	for bind in "" 1; do
		echo "== $name: $(readlink "$nvml_dir/libnvidia-ml.so.1") beside the fake driver${bind:+, LD_BIND_NOW=1}: NVML must fail at nvmlInit_v2 alone"
		out=$(cd "$bin" && env LD_LIBRARY_PATH="$fake:$nvml_dir" ${bind:+LD_BIND_NOW=1} ./profile -device cuda:0 2>&1) || {
			printf '%s\n' "$out"
			fail "$name: examples/profile failed on the fake driver with NVIDIA's NVML"
		}
		grep -F 'NVML' <<<"$out" | head -n 1
		want='per process (NVML): none at the baseline: memtrack: no per-process figures: cuda:0: NVML is unavailable: nvmlInit_v2: Driver Not Loaded (nvmlReturn_t 9)'
		grep -qxF "$want" <<<"$out" || fail "$name: NVML did not fail at nvmlInit_v2 with Driver Not Loaded"
	done
done
