#!/usr/bin/env bash
# Runs the Metal backend (backend_metal.go, which only a macOS build with
# -tags metal compiles), its tests over an in-memory bridge
# (backend_metal_test.go), its cgo layer (metal_bridge_cgo_darwin.go) and its
# macOS tests (metal_test.go) on Linux, under -race, against a C stand-in for
# metal_bridge.m (scripts/metal_bridge_standin.c). It works on a copy of the
# package, built with -tags metal, in which those files are retargeted from
# darwin to Linux; Metal's own behaviour is verified only by
# go test -tags metal ./... on a Mac.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
if ! command -v "$(go env CC)" >/dev/null; then
	echo "metal-standin: installing a C compiler for cgo" >&2
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar --exclude=./.git --exclude=./.cache -cf - . | tar -xf - -C "$tmp"
cp scripts/metal_bridge_standin.c "$tmp"/
cd "$tmp"

# retarget FILE OLD NEW: replace the //go:build line OLD by NEW, or fail.
retarget() {
	grep -qxF "//go:build $2" "$1" || { echo "metal-standin: $1 has no '//go:build $2' line" >&2; exit 1; }
	sed -i "s|^//go:build $2\$|//go:build ${3//&/\\&}|" "$1"
}
retarget metal_bridge_cgo_darwin.go 'metal && darwin && !ios && cgo' 'metal && linux && cgo'
retarget metal_bridge.h 'metal && darwin && !ios && cgo' 'metal && linux && cgo'
retarget metal_test.go 'metal && darwin && !ios' 'metal && linux'
retarget backend_metal.go 'metal && darwin && !ios' 'metal && linux'
retarget backend_metal_test.go 'metal && darwin && !ios' 'metal && linux'
mv metal_bridge_cgo_darwin.go metal_bridge_cgo_linux.go
# The Apple frameworks do not exist here, the Objective-C is replaced, and
# the guard against -tags metal on Linux must not stop this build.
sed -i '/^#cgo LDFLAGS: -framework /d; s/^#cgo CFLAGS: -fobjc-arc /#cgo CFLAGS: /' metal_bridge_cgo_linux.go
rm metal_bridge.m backend_metal_guard.go

go vet -tags metal .
go test -tags metal -race -count=1 -run Metal -v .
