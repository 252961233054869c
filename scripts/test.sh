#!/usr/bin/env bash
# The test suite, as the README gives it: vet, the race-detector run of every
# package, and the tests of the tracker and of the device-side figure
# (internal/held) as a 32-bit build (which proves their 64-bit counters stay
# 8-byte aligned on 32-bit platforms).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go vet ./..."
go vet ./...
echo "== go test -race ./..."
go test -race -count=1 ./...
echo "== GOARCH=386 CGO_ENABLED=0 go test ./tracker/... ./internal/held"
# Some kernels run no 32-bit x86 programs (no IA32 emulation: "exec format
# error"). There the tests run under qemu's user-mode emulator, installed
# from Debian's packages when missing; qemu 7 delivers Go's preemption
# signals on the wrong stack ("morestack on gsignal"), so asynchronous
# preemption is off under it (GODEBUG=asyncpreemptoff=1), which the tests do
# not rely on.
exec386=()
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'package main\nfunc main() {}\n' >"$probe/main.go"
GOARCH=386 CGO_ENABLED=0 go build -o "$probe/probe" "$probe/main.go"
if ! "$probe/probe" 2>/dev/null; then
	if ! command -v qemu-i386 >/dev/null; then
		echo "test.sh: this kernel runs no 386 programs; installing qemu-user to run them" >&2
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends qemu-user >/dev/null
	fi
	echo "test.sh: running the 386 tests under qemu-i386"
	exec386=(-exec qemu-i386)
	export GODEBUG=asyncpreemptoff=1
fi
GOARCH=386 CGO_ENABLED=0 go test -count=1 "${exec386[@]}" ./tracker/... ./internal/held
