#!/usr/bin/env bash
# Provides what `go build -tags cuda` needs on a Debian machine without the
# CUDA toolkit: cuda.h and the libcuda.so link stub, taken from Debian's own
# nvidia-cuda-dev package (its non-free component) into .cache/cuda/, which
# git ignores. The first run downloads the package (about 800 MB) and keeps
# only those two files; later runs reuse them.
#
# It prints the variables to export, so that
#
#	eval "$(./scripts/cuda-dev.sh)"
#
# prepares the current shell. On a machine with /usr/local/cuda it does
# nothing and prints nothing: the cu package already looks there.
#
# A binary linked against the stub needs a real libcuda.so.1 (the NVIDIA
# driver) at run time; the tests use the fake one in testdata/fakecuda.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { echo "cuda-dev: $*" >&2; }

if [[ -d /usr/local/cuda ]]; then
	log "/usr/local/cuda is present: nothing to do"
	exit 0
fi

cache=$root/.cache/cuda
header=$cache/include/cuda.h
stub=$cache/lib/libcuda.so

print_flags() {
	echo "export CGO_CFLAGS='-I$cache/include'"
	echo "export CGO_LDFLAGS='-L$cache/lib'"
}

if [[ -f $header && -f $stub ]]; then
	log "reusing $cache"
	print_flags
	exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi

# nonfree_entry prints the machine's own first Debian source entry, in deb822
# form, with its component set to non-free alone (main is configured already).
nonfree_entry() {
	local f
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/*.sources; do
		[[ -f $f && $f != */memtrack-non-free.sources ]] || continue
		awk 'BEGIN { RS = ""; ORS = "\n" } NR == 1 { print; exit }' "$f" |
			sed -E 's/^Components:.*/Components: non-free/'
		return
	done
	local line uri suite
	line=$(grep -hE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1 || true)
	[[ -n $line ]] || return 1
	read -r _ uri suite _ <<<"$line"
	printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: non-free\n' "$uri" "$suite"
}

# Enable the non-free component if no configured source offers the package,
# and refresh only that source.
if [[ -z $(apt-cache policy nvidia-cuda-dev 2>/dev/null | awk '/Candidate:/ && $2 != "(none)"') ]]; then
	entry=/etc/apt/sources.list.d/memtrack-non-free.sources
	mkdir -p "$(dirname "$cache")"
	if ! nonfree_entry >"$cache.sources" || [[ ! -s $cache.sources ]]; then
		log "no apt source found to derive the non-free entry from"
		exit 1
	fi
	log "enabling non-free in $entry"
	"${sudo[@]}" install -m 0644 "$cache.sources" "$entry"
	rm -f "$cache.sources"
	"${sudo[@]}" apt-get update -qq \
		-o Dir::Etc::sourcelist="$entry" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 >&2
fi

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
log "extracting cuda.h and the libcuda.so stub from $(basename "$deb")"
dpkg-deb --fsys-tarfile "$deb" |
	tar -x -C "$work" --wildcards '*/include/cuda.h' '*/stubs/libcuda.so'
mkdir -p "$cache/include" "$cache/lib"
cp "$(find "$work" -path '*/include/cuda.h' | head -n1)" "$header.tmp"
cp "$(find "$work" -path '*/stubs/libcuda.so' | head -n1)" "$stub.tmp"
mv "$header.tmp" "$header"
mv "$stub.tmp" "$stub"
rm -rf "$work"
log "cached in $cache"
print_flags
