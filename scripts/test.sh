#!/usr/bin/env bash
# The test suite, as the README gives it: vet, the race-detector run of every
# package, and the tracker's tests as a 32-bit build (which proves the 64-bit
# counters stay 8-byte aligned on 32-bit platforms).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go vet ./..."
go vet ./...
echo "== go test -race ./..."
go test -race -count=1 ./...
echo "== GOARCH=386 CGO_ENABLED=0 go test ./tracker/..."
GOARCH=386 CGO_ENABLED=0 go test -count=1 ./tracker/...
