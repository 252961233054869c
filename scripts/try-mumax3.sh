#!/usr/bin/env bash
# Tries package cu as a drop-in on mumax3 itself (github.com/mumax/3 at the
# version go.mod requires), in copies of its source from the module cache
# in a temporary directory, each given a require and a replace directive
# for this checkout (and this checkout's go.sum), then go mod tidy:
#
#  1. The bindings need their headers and stubs: mumax3's cuda packages,
#     unchanged, do not build against cuda.h and libcuda.so alone (cufft.h
#     is missing), its command does not link without the libcufft.so and
#     libcurand.so stubs, and both succeed with what scripts/cuda-dev.sh
#     provides.
#  2. The import changed in cuda/ but not in mumax3's cufft binding: the
#     build fails, with exactly want_some_errors errors, all in
#     cuda/fft3dc2r.go and cuda/fft3dr2c.go, where cu.DevicePtr values of
#     the drop-in go to cufft's Exec calls, which take mumax's.
#  3. The import changed in every file that imports mumax's cu
#     (want_importers of them, test files included): mumax3 and its tests
#     build with -tags cuda; without the tag, or with mumax3's own go line
#     instead of this module's, the build fails.
#  4. The import changed only in the files that allocate and free
#     (cuda/alloc.go, slice.go, buffer.go, bytes.go): mumax3 and its tests
#     build, and no other non-test file outside cuda/cu calls MemAlloc,
#     MemFree or Free of mumax's cu; testdata/mumax3pool then runs on the fake driver
#     (.cache/fakecuda/libcuda.so.1, built by scripts/test-cuda.sh, which
#     runs this script) with the cufft stub standing in for libcufft at run
#     time (it calls no cufft function), and checks that memory mumax3's
#     buffer pool keeps after Recycle stays counted until FreeBuffers.
#
# Any other outcome fails the script. Usage: scripts/try-mumax3.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

want_importers=86
want_some_errors=4
alloc_files=(cuda/alloc.go cuda/slice.go cuda/buffer.go cuda/bytes.go)
mumax_cu='"github.com/mumax/3/cuda/cu"'
drop_in='"github.com/memtrack/memtrack/cu"'

fail() {
	echo "try-mumax3: $*" >&2
	exit 1
}

eval "$(./scripts/cuda-dev.sh)"
include=${CGO_CFLAGS:+${CGO_CFLAGS#-I}}
include=${include:-/usr/local/cuda/include}
stubs=${CGO_LDFLAGS:+${CGO_LDFLAGS#-L}}
stubs=${stubs:-/usr/local/cuda/lib64/stubs}

go mod download github.com/mumax/3
src=$(go list -m -f '{{.Dir}}' github.com/mumax/3)
version=$(go list -m -f '{{.Version}}' github.com/mumax/3)
go_line=$(go list -m -f '{{.GoVersion}}' github.com/memtrack/memtrack)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== mumax3 $version from $src, in $tmp"

# copy makes a fresh copy of mumax3 named $1 and prints its path.
copy() {
	cp -r "$src" "$tmp/$1"
	chmod -R u+w "$tmp/$1"
	echo "$tmp/$1"
}

# importers prints the files of the packages go builds (test files
# included, ignored files not) that import mumax's cu.
importers() {
	(cd "$1" && go list -tags cuda -f '{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}} {{end}}{{range .CgoFiles}}{{$d}}/{{.}} {{end}}{{range .TestGoFiles}}{{$d}}/{{.}} {{end}}{{range .XTestGoFiles}}{{$d}}/{{.}} {{end}}' ./... |
		tr ' ' '\n' | grep . | xargs grep -lF "$mumax_cu" || true)
}

# use_drop_in changes the import in the files given after the copy $1, then
# requires this checkout in the copy's go.mod.
use_drop_in() {
	local dir=$1
	shift
	sed -i "s|$mumax_cu|$drop_in|" "$@"
	(cd "$dir" &&
		go mod edit -require=github.com/memtrack/memtrack@v0.0.0-00010101000000-000000000000 \
			-replace=github.com/memtrack/memtrack="$root" &&
		cp "$root/go.sum" go.sum &&
		go mod tidy)
	[[ $(cd "$dir" && go list -m -f '{{.GoVersion}}') == "$go_line" ]] ||
		fail "go mod tidy left the go line at $(cd "$dir" && go list -m -f '{{.GoVersion}}'), not memtrack's $go_line"
}

# builds builds the copy $1 with -tags cuda, and links its tests without
# running them (-vet=off: go vet has findings of its own on mumax3).
builds() {
	(cd "$1" && go build -tags cuda ./... && go test -vet=off -tags cuda -count=1 -run '^$' -exec true ./... >/dev/null) ||
		fail "$2: the build failed"
	echo "$2: builds"
}

# fails_with runs the command after $1 (a description and a pattern
# separated by |) in the copy $2; it must fail, and its output must match.
fails_with() {
	local what=${1%%|*} pattern=${1#*|} dir=$2 out
	shift 2
	if out=$(cd "$dir" && "$@" 2>&1); then
		fail "$what: succeeded, but must fail"
	fi
	grep -qE "$pattern" <<<"$out" || {
		printf '%s\n' "$out" >&2
		fail "$what: failed, but not with /$pattern/"
	}
	echo "$what: fails as it must, with"
	grep -E "$pattern" <<<"$out" | sed 's/^/    /'
}

echo "== 1. mumax3 unchanged: the headers and stubs of its cufft and curand bindings"
plain=$(copy plain)
only_cuda=$tmp/only-cuda
mkdir -p "$only_cuda/include" "$only_cuda/lib"
cp "$include/cuda.h" "$only_cuda/include/"
cp "$stubs/libcuda.so" "$only_cuda/lib/"
# Where the toolkit or another package put cufft in a directory that mumax3's
# cgo flags name, the build finds it there whatever this script hides.
if [[ -n ${CGO_CFLAGS:-} && ! -e /usr/include/cufft.h && ! -e /usr/lib/x86_64-linux-gnu/libcufft.so ]]; then
	fails_with 'cuda.h and libcuda.so alone|cufft.h: No such file or directory' "$plain" \
		env CGO_CFLAGS="-I$only_cuda/include" CGO_LDFLAGS="-L$only_cuda/lib" go build ./cuda/...
	fails_with 'every header, the libcuda.so stub alone, linking cmd/mumax3|cannot find -lcu(fft|rand)' "$plain" \
		env CGO_LDFLAGS="-L$only_cuda/lib" go build -o /dev/null ./cmd/mumax3
else
	echo "cufft is installed outside .cache/cuda: the build without it is not tried"
fi
(cd "$plain" && go build ./cuda/... ./engine/... && go build -o /dev/null ./cmd/mumax3) ||
	fail "mumax3 unchanged: the build failed"
echo "mumax3 unchanged, with scripts/cuda-dev.sh's files: builds, and cmd/mumax3 links"

echo "== 2. the import changed in cuda/, not in mumax3's cufft binding"
some=$(copy some)
mapfile -t files < <(importers "$some" | grep -E "^$some/cuda/[^/]+\.go\$")
echo "${#files[@]} files of cuda/ changed"
use_drop_in "$some" "${files[@]}"
if out=$(cd "$some" && go build -tags cuda ./cuda/ 2>&1); then
	fail "some files: the build succeeded, but a cufft call takes mumax's cu.DevicePtr"
fi
printf '%s\n' "$out"
errors=$(grep -cE '^[^ ]+\.go:[0-9]+:[0-9]+: ' <<<"$out" || true)
where=$(grep -oE '^[^ :]+\.go' <<<"$out" | sort -u | tr '\n' ' ')
[[ $errors -eq $want_some_errors ]] || fail "some files: $errors errors, not $want_some_errors"
[[ $where == 'cuda/fft3dc2r.go cuda/fft3dr2c.go ' ]] || fail "some files: errors in $where, not only in cuda/fft3dc2r.go and cuda/fft3dr2c.go"
grep -E '^[^ ]+\.go:[0-9]+:[0-9]+: ' <<<"$out" | grep -vqF 'as "github.com/mumax/3/cuda/cu".DevicePtr value in argument to p.handle.Exec' &&
	fail "some files: an error other than a drop-in DevicePtr passed to cufft"
echo "some files: fails as it must, with $errors errors in $where"

echo "== 3. the import changed in every importing file"
all=$(copy all)
mapfile -t files < <(importers "$all")
[[ ${#files[@]} -eq $want_importers ]] || fail "${#files[@]} files import mumax's cu, not $want_importers"
echo "${#files[@]} files import mumax's cu; all changed"
use_drop_in "$all" "${files[@]}"
[[ -z $(importers "$all") ]] || fail "every importing file: some still import mumax's cu"
builds "$all" "every importing file, -tags cuda"
fails_with 'every importing file, no -tags cuda|undefined: cu\.' "$all" go build ./cuda/
mumax_go=$(cd "$src" && go list -m -f '{{.GoVersion}}')
(cd "$all" && go mod edit -go="$mumax_go")
fails_with "every importing file, mumax3's go line $mumax_go|updates to go.mod needed" "$all" go build -tags cuda ./cuda/

echo "== 4. the import changed in the ${#alloc_files[@]} files that allocate and free"
four=$(copy four)
(cd "$four" && grep -lF "$mumax_cu" "${alloc_files[@]}" >/dev/null) || fail "the allocating files do not import mumax's cu"
use_drop_in "$four" "${alloc_files[@]/#/$four/}"
builds "$four" "${alloc_files[*]}"
# No other file of mumax3 outside cu itself (tests aside) allocates or frees
# with mumax's cu.
others=$(cd "$four" && go list -tags cuda -f '{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}} {{end}}{{range .CgoFiles}}{{$d}}/{{.}} {{end}}' ./... |
	tr ' ' '\n' | grep . | grep -v "^$four/cuda/cu/" | xargs -r grep -lF "$mumax_cu" |
	xargs -r grep -nE 'cu\.(MemAlloc|MemFree)\(|cu\.DevicePtr\(.*\)\.Free\(\)' || true)
[[ -z $others ]] || fail "files other than ${alloc_files[*]} allocate or free with mumax's cu: $others"
echo "no other non-test file outside cuda/cu allocates or frees with mumax's cu"

fake=$root/.cache/fakecuda/libcuda.so.1
if [[ ! -f $fake ]]; then
	fail "$fake is missing: scripts/test-cuda.sh builds it (and runs this script)"
fi
mkdir -p "$four/cmd/mumax3pool" "$tmp/lib"
cp testdata/mumax3pool/main.go "$four/cmd/mumax3pool/"
(cd "$four" && go build -tags cuda -o "$tmp/mumax3pool" ./cmd/mumax3pool)
soname=$(objdump -p "$stubs/libcufft.so" | awk '$1 == "SONAME" { print $2 }')
ln -s "$stubs/libcufft.so" "$tmp/lib/$soname"
echo "== testdata/mumax3pool on the fake driver ($soname: the stub; no cufft call is made)"
LD_LIBRARY_PATH=$(dirname "$fake"):$tmp/lib "$tmp/mumax3pool"
