#!/usr/bin/env bash
# Provides what the ROCm checks need on a Debian machine without ROCm
# (memtrack itself needs none of it: it loads the HIP runtime and the SMI
# library at run time), taken from Debian's own packages (main component)
# into .cache/rocm/, which git ignores, without installing anything:
#
#   - AMD's headers, hip/hip_runtime_api.h (libamdhip64-dev) and
#     rocm_smi/rocm_smi.h (librocm-smi-dev), against which
#     scripts/test-rocm.sh compiles the fakes of testdata/fakehip and
#     testdata/fakesmi, so that AMD's declarations check theirs;
#   - AMD's libraries themselves: the HIP runtime (libamdhip64-N, with the
#     HSA runtime, the code object manager and the kernel thunk it loads)
#     and rocm_smi (librocm-smi64-N), with every library they need that
#     this machine lacks (libllvm15 and its own, on a fresh one), for the
#     tests that run memtrack's loaders against AMD's code.
#
# The package names are found with apt-cache (the highest major version
# Debian offers), and the dependencies with apt-cache depends; each .deb is
# fetched with apt-get download and unpacked with dpkg-deb -x. The first
# run downloads about 45 MB; later runs reuse the cache. It prints the
# variables to export, so that
#
#	eval "$(./scripts/rocm-dev.sh)"
#
# prepares the current shell:
#
#	MEMTRACK_ROCM_INCLUDE    the directory of hip/ and rocm_smi/
#	MEMTRACK_ROCM_REAL_LIBS  the library path of AMD's libraries (for
#	                         LD_LIBRARY_PATH, in the tests that ask for it)
#	MEMTRACK_ROCM_PACKAGES   the packages' names and versions
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cache=$root/.cache/rocm

log() { echo "rocm-dev: $*" >&2; }

multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
print_flags() {
	echo "export MEMTRACK_ROCM_INCLUDE='$cache/root/usr/include'"
	echo "export MEMTRACK_ROCM_REAL_LIBS='$cache/root/usr/lib/$multiarch:$cache/root/usr/lib:$cache/root/lib/$multiarch'"
	echo "export MEMTRACK_ROCM_PACKAGES='$(cat "$cache/packages")'"
}

complete() {
	[[ -f $cache/packages && -f $cache/root/usr/include/hip/hip_runtime_api.h && -f $cache/root/usr/include/rocm_smi/rocm_smi.h ]] &&
		compgen -G "$cache/root/usr/lib/$multiarch/libamdhip64.so.*" >/dev/null &&
		compgen -G "$cache/root/usr/lib*/librocm_smi64.so.*" >/dev/null
}

if complete; then
	log "reusing $cache"
	print_flags
	exit 0
fi
for tool in apt-get apt-cache dpkg-deb dpkg-query; do
	command -v "$tool" >/dev/null || { log "$tool is needed (a Debian machine)"; exit 1; }
done

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi

# newest prints the package of Debian's whose name matches the pattern
# (NAME-N or NAMEN), the highest N first.
newest() { apt-cache search --names-only "$1" | awk '{ print $1 }' | sort -V | tail -n1; }

hip=$(newest '^libamdhip64-[0-9]+$')
if [[ -z $hip ]]; then
	log "no candidate for libamdhip64: refreshing the package lists"
	"${sudo[@]}" apt-get update -qq >&2
	hip=$(newest '^libamdhip64-[0-9]+$')
fi
smi=$(newest '^librocm-smi64-[0-9]+$')
if [[ -z $hip || -z $smi ]]; then
	log "Debian offers no libamdhip64-N or librocm-smi64-N here (its ROCm packages are in main from bookworm on)"
	exit 1
fi
wanted=("$hip" libamdhip64-dev "$smi" librocm-smi-dev)

# Every package those need, recursively, that this machine has not
# installed: virtual names (<...>) and the -dev packages' headers aside.
installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }
fetch=("${wanted[@]}")
while read -r pkg; do
	[[ -z $pkg || $pkg == \<* ]] && continue
	installed "$pkg" && continue
	case " ${fetch[*]} " in *" $pkg "*) continue ;; esac
	fetch+=("$pkg")
done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
	"$hip" "$smi" | grep -v '^ ' | grep -v -- '-dev$' | sort -u)

work=$cache.tmp
rm -rf "$work"
mkdir -p "$work/debs" "$work/root"
# As root, apt downloads as its _apt user, which may not reach the cache.
sandbox=()
if [[ $(id -u) -eq 0 ]]; then
	sandbox=(-o APT::Sandbox::User=root)
fi
log "downloading ${fetch[*]}"
if ! (cd "$work/debs" && apt-get download -qq "${sandbox[@]}" "${fetch[@]}" >&2); then
	log "download failed: refreshing the package lists (a version gone from the archive?) and trying once more"
	"${sudo[@]}" apt-get update -qq >&2
	(cd "$work/debs" && apt-get download -qq "${sandbox[@]}" "${fetch[@]}" >&2)
fi
for deb in "$work"/debs/*.deb; do
	dpkg-deb -x "$deb" "$work/root"
done
for p in "${wanted[@]}"; do
	printf '%s=%s ' "$p" "$(dpkg-deb -f "$work"/debs/"${p}"_*.deb Version)"
done | sed 's/ $//' >"$work/packages"
rm -rf "$work/debs" "$cache"
mv "$work" "$cache"
log "cached in $cache: $(cat "$cache/packages")"
print_flags
