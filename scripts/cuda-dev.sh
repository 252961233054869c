#!/usr/bin/env bash
# Provides what the builds against NVIDIA's headers need on a Debian
# machine without the CUDA toolkit (memtrack itself needs none: it loads the
# driver at run time), taken from Debian's own nvidia-cuda-dev package (its
# non-free component) into .cache/cuda/, which git ignores:
#
#   - cuda.h and the libcuda.so link stub, for the fake driver of
#     testdata/fakecuda and for github.com/mumax/3/cuda/cu (package cu and
#     examples/track import it);
#   - cufft.h, curand.h and the libcufft.so and libcurand.so link stubs, with
#     the toolkit headers those two include, for mumax3's own cufft and
#     curand bindings (github.com/mumax/3/cuda/cufft and .../curand), which
#     a program that imports github.com/mumax/3/cuda links.
#
# The first run downloads the package (about 800 MB) and keeps only those
# files; later runs reuse them. A cache that lacks any of them (one made
# before the cufft and curand files were kept) is made again.
#
# It prints the variables to export, so that
#
#	eval "$(./scripts/cuda-dev.sh)"
#
# prepares the current shell. On a machine with /usr/local/cuda it does
# nothing and prints nothing: the cu package already looks there.
#
# A binary linked against the stubs needs the real libraries at run time:
# libcuda.so.1 (the NVIDIA driver), and libcufft.so.N and libcurand.so.N
# (the toolkit) where it links those; the tests use the fake driver of
# testdata/fakecuda.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { echo "cuda-dev: $*" >&2; }

if [[ -d /usr/local/cuda ]]; then
	log "/usr/local/cuda is present: nothing to do"
	exit 0
fi

cache=$root/.cache/cuda
# The headers the bindings include (the ones these include are kept beside
# them) and the link stubs, as found in the package.
headers=(cuda.h cufft.h curand.h)
stubs=(libcuda.so libcufft.so libcurand.so)

print_flags() {
	echo "export CGO_CFLAGS='-I$cache/include'"
	echo "export CGO_LDFLAGS='-L$cache/lib'"
}

complete() {
	local f
	for f in "${headers[@]}"; do
		[[ -f $cache/include/$f ]] || return 1
	done
	for f in "${stubs[@]}"; do
		[[ -f $cache/lib/$f ]] || return 1
	done
}

if complete; then
	log "reusing $cache"
	print_flags
	exit 0
fi
if ! command -v gcc >/dev/null; then
	log "gcc is needed (cgo compiles with it; it also lists the headers to keep)"
	exit 1
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi

# Enable the non-free component if no configured source offers the package.
. scripts/debian-non-free.sh
mkdir -p "$(dirname "$cache")"
enable_non_free nvidia-cuda-dev || exit 1

work=$cache.tmp
rm -rf "$work"
mkdir -p "$work"
log "downloading nvidia-cuda-dev"
# As root, apt downloads as its _apt user, which may not reach the cache.
sandbox=()
if [[ $(id -u) -eq 0 ]]; then
	sandbox=(-o APT::Sandbox::User=root)
fi
(cd "$work" && apt-get download -qq "${sandbox[@]}" nvidia-cuda-dev >&2)
deb=$(ls "$work"/nvidia-cuda-dev_*.deb)
log "extracting ${headers[*]}, the headers they include and the ${stubs[*]} stubs from $(basename "$deb")"
stub_globs=()
for f in "${stubs[@]}"; do
	stub_globs+=("*/stubs/$f")
done
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" --wildcards '*/include/*' "${stub_globs[@]}"
rm -f "$deb"
inc=$(dirname "$(find "$work" -path '*/include/cuda.h' | head -n1)")
stubdir=$(dirname "$(find "$work" -path '*/stubs/libcuda.so' | head -n1)")
new=$work/out
mkdir -p "$new/include" "$new/lib"
# Every file under the package's include directory that the three headers
# include, directly or not, as the C compiler finds them (cgo compiles C).
for f in "${headers[@]}"; do
	printf '#include <%s>\n' "$f"
done | gcc -M -MT x -x c -I"$inc" - | tr -d '\\' | tr ' ' '\n' | grep -F "$inc/" | sort -u |
	while read -r path; do
		rel=${path#"$inc"/}
		mkdir -p "$new/include/$(dirname "$rel")"
		cp "$path" "$new/include/$rel"
	done
for f in "${stubs[@]}"; do
	cp "$stubdir/$f" "$new/lib/$f"
done
rm -rf "$cache.old"
if [[ -d $cache ]]; then
	mv "$cache" "$cache.old"
fi
mv "$new" "$cache"
rm -rf "$work" "$cache.old"
log "cached in $cache"
print_flags
