#!/usr/bin/env bash
# The browser test of the page at /debug/memtrack/ (package web): headless
# Chromium from Debian's packages, installed here when missing, driven from
# Go by chromedp in the module web/browsertest (so that the core does not
# depend on it). Without Chromium the test fails under CI=true and is
# skipped, saying so, elsewhere.
#
#	./scripts/test-browser.sh                    # the test
#	SCREENSHOT=docs/timeline.png ./scripts/test-browser.sh   # and renew the README's screenshot
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
	if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
		echo "== apt-get install -y chromium"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
	else
		echo "test-browser.sh: no Chromium, and no apt-get as root to install it with" >&2
	fi
fi

args=()
if [ -n "${SCREENSHOT:-}" ]; then
	args=(-screenshot "$(realpath "$SCREENSHOT")")
fi
cd web/browsertest
echo "== (web/browsertest) go vet ./... && go test ./..."
go vet ./...
go test -count=1 -v ./... "${args[@]}" 2>&1 | grep -Ev '^=== (RUN|PAUSE|CONT)'
