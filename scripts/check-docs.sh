#!/usr/bin/env bash
# Checks that the README and docs/ say nothing that has stopped being true
# about how to run things:
#
#  1. Every shell command in their ```sh blocks (and every "$ " line of their
#     ```console blocks) must be in one of the two lists below: run_cmds
#     (cheap, runs on Linux without a GPU or a Mac: this script runs it) or
#     skip_cmds (with where it is run instead). A command in neither list
#     fails the script, and so does a list entry that no document holds any
#     more, so that neither side can drift unnoticed.
#  2. The commands of run_cmds run from the repository root, in the order
#     the documents give them; any failure fails the script.
#  3. Every relative link and #anchor in README.md and docs/*.md must
#     resolve: the file exists, and the anchor is the GitHub slug of one of
#     its headings.
#
# Usage: scripts/check-docs.sh (from anywhere). .ci/run runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
docs=(README.md docs/*.md)

# Commands this script runs. The key is the command as written (trailing
# "# comment" removed, blanks collapsed); the value is what to run instead,
# or empty to run it as written. $DOCS_TMP is a temporary directory of this
# run.
declare -A run_cmds=(
	# README: the main job, on the CPU (a few seconds).
	['go run ./examples/profile']=''
	# README: the fuzz targets exist and fuzz; bounded here, as written they
	# run until stopped.
	['go test -fuzz FuzzCounter ./tracker/']='go test -fuzz FuzzCounter -fuzztime 50x ./tracker/'
	['go test -fuzz FuzzRecord ./tracker/']='go test -fuzz FuzzRecord -fuzztime 50x ./tracker/'
	# docs/categories.md: one category's figures against a sequential model.
	["go test -run '^\$' -fuzz FuzzCategory -fuzztime 25s -fuzzminimizetime 3s ."]="go test -run '^\$' -fuzz FuzzCategory -fuzztime 50x ."
	['go test -fuzz FuzzScope ./tracker/']='go test -fuzz FuzzScope -fuzztime 50x ./tracker/'
	# README: an out-of-memory on purpose, dumped into a temporary directory
	# instead of /tmp/oom, and its peak profile read.
	['go run ./examples/oom -o /tmp/oom']='go run ./examples/oom -o "$DOCS_TMP/oom"'
	['go tool pprof -top /tmp/oom/oom-cpu-*/peak.pb.gz']='go tool pprof -top "$DOCS_TMP"/oom/oom-cpu-*/peak.pb.gz | grep -F main.loadWeights'
	# docs/metal.md: the Go side of the Metal backend type-checks for macOS.
	['GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go vet -tags metal ./...']=''
	# docs/integrations.md: the walk-through, writing into a temporary
	# directory instead of /tmp/prof.
	['go run ./examples/sites -o /tmp/prof']='go run ./examples/sites -o "$DOCS_TMP/prof"'
	['go tool pprof -top /tmp/prof/peak.pb.gz']='go tool pprof -top "$DOCS_TMP/prof/peak.pb.gz" | grep -F main.loadWeights'
	# docs/elastic.md: the elastic cache on the CPU (a few seconds).
	['go run ./examples/profile -elastic -cache-blocks 6 -block-size 8MiB']=''
	# README, docs/fit.md: the main job's load predicted and checked, on the
	# CPU (a few seconds).
	['go run ./examples/profile -fit']=''
	# docs/track.md: Device.Track on the CPU (it checks its own peak).
	['go run ./examples/track']=''
	# docs/cuda.md: the CUDA build needs no CUDA header, into a temporary
	# directory.
	['go build -tags cuda ./examples/profile']='env -u CGO_CFLAGS -u CGO_LDFLAGS go build -tags cuda -o "$DOCS_TMP/profile" ./examples/profile'
	# docs/rocm.md: the ROCm build needs no AMD header, into a temporary
	# directory.
	['go build -tags rocm ./examples/profile']='env -u CGO_CFLAGS -u CGO_CPPFLAGS -u CGO_LDFLAGS go build -tags rocm -o "$DOCS_TMP/profile-rocm" ./examples/profile'
)

# Commands this script does not run, each with where it is run instead.
declare -A skip_cmds=(
	['./scripts/test.sh']='.ci/run runs it, just before this script'
	['./scripts/test-cuda.sh']='.ci/run runs it (it needs apt and root the first time, and minutes)'
	['eval "$(./scripts/cuda-dev.sh)"']='scripts/test-cuda.sh runs it (the first run downloads about 800 MB)'
	['go build -tags cuda ./...']='scripts/test-cuda.sh builds with -tags cuda after scripts/cuda-dev.sh (package cu and examples/track need cuda.h)'
	['./scripts/gpu-check.sh']='scripts/test-cuda.sh runs it, and its run.sh on the fake driver'
	["go test -run '^\$' -bench CPUNotResident -benchtime 200x -count 3 ."]='by hand on a quiet machine (docs/devices.md); .ci/run runs every root benchmark once with -benchtime 1x'
	['LD_LIBRARY_PATH=$PWD/.cache/fakecuda:$PWD/.cache/fakenvml go run -tags cuda ./examples/profile -device cuda:0 -graphs']='scripts/test-cuda.sh runs it on the fake driver, which it builds first, and checks the budget'"'"'s graph figure against the driver'"'"'s (docs/graphs.md)'
	['go run -tags cuda ./examples/profile -device cuda:0,cuda:1']='scripts/test-cuda.sh runs it on the fake driver with two devices (it needs a GPU or the fake)'
	['./scripts/two-instances.sh']='scripts/test-cuda.sh runs it on the fake driver and NVML (it needs a GPU or the fakes)'
	['./scripts/two-instances-elastic.sh']='scripts/test-cuda.sh runs it on the fake driver and NVML (it needs a GPU or the fakes)'
	['./scripts/fit-claim-elastic.sh']='scripts/test-cuda.sh runs it on the fake driver and NVML (it needs a GPU or the fakes)'
	['go run -tags cuda ./examples/profile -device cuda:0 -fit -graphs -elastic']='scripts/test-cuda.sh runs the main job with -fit on the fake driver, with and without -graphs and -elastic, and checks that it measures what it predicted'
	['go run -tags cuda ./examples/profile -device cuda:0,cuda:1 -fit']='scripts/test-cuda.sh runs it on the fake driver with two devices, and checks that it measures what it predicted'
	['go run -tags cuda ./examples/profile -device cuda:0 -graphs -fit-save pass.json']='scripts/test-cuda.sh runs it on the fake driver, into a temporary file'
	['go run -tags cuda ./examples/profile -device cuda:0 -graphs -fit -fit-from pass.json']='scripts/test-cuda.sh runs it on the fake driver, from the file the run before wrote'
	['go run -tags cuda ./examples/profile -device cuda:0 -fit -claim -fit-headroom 1GiB']='scripts/fit-claim-elastic.sh runs a newcomer with -fit -claim beside a follower on the fake driver (scripts/test-cuda.sh runs it)'
	['./scripts/test-rocm.sh']='.ci/run runs it (it needs apt the first time, and minutes)'
	['KIND=rocm ./scripts/two-instances.sh']='scripts/test-rocm.sh runs it on the fake runtime and rocm_smi (it needs an AMD GPU or the fakes)'
	['./scripts/gpu-check-rocm.sh']='scripts/test-rocm.sh runs it, and its run.sh on the fakes'
	['./scripts/metal-standin.sh']='.ci/run runs it (it may install gcc with apt)'
	['go test -tags metal ./...']='only on a Mac, by hand: Metal is not compiled on Linux'
	['go run -tags metal ./examples/profile -device metal:0']='only on a Mac, by hand: Metal is not compiled on Linux'
	["go test -tags cuda -run '^\$' -bench MemAllocFree -count 10 ./cu/"]='by hand (it needs cuda.h and a driver); scripts/test-cuda.sh runs ./cu on the fake driver, scripts/gpu-check.sh its benchmark'
	['./scripts/bench.sh']='by hand on a quiet machine (about 7 minutes); .ci/run runs every benchmark once with -benchtime 1x'
	["PKG=./bench BENCH='^BenchmarkSerial/op=(pair|snapshot)/design=(atomic|Counter|Counter-limit|Record|Record-limit|mutexrecord)\$' ./scripts/bench-base.sh"]='by hand on a quiet machine (about a minute)'
	["PKG=./bench BENCH='^BenchmarkDevice\$' ./scripts/bench-base.sh"]='by hand on a quiet machine (a few minutes)'
	['./scripts/bench-scopes.sh']='by hand on a quiet machine (a few minutes); .ci/run runs BenchmarkScopes once with -benchtime 1x'
	['./scripts/bench-base.sh']='by hand on a quiet machine (about a minute); .ci/run runs one round of it with -benchtime 1x where the clone holds its BASE commit'
	["go test -run '^\$' -bench HistoryAllocFree -count 8 ./bench"]='by hand on a quiet machine; .ci/run runs every benchmark once with -benchtime 1x'
	["go test -run '^\$' -bench HistoryRecord -count 6 ."]='by hand on a quiet machine (docs/timeline.md)'
	["go test -run '^\$' -bench PageRead -benchmem -benchtime 5x ./web"]='by hand on a quiet machine (docs/performance.md; about 40 s, 1 GB); .ci/run runs its smallest ring once'
	# docs/performance.md: the follower's reading.
	["go test -run '^\$' -bench FollowerRead -benchmem -count 3 ."]='by hand on a quiet machine (seconds); .ci/run runs every benchmark once with -benchtime 1x'
	["go test -tags cuda -run '^\$' -bench FollowerRead -benchmem -count 3 ."]='by hand in scripts/test-cuda.sh'"'"'s environment (the fakes on LD_LIBRARY_PATH)'
	["FAKENVML_TRACE=/tmp/trace ./memtrack.test -test.run '^\$' -test.bench CUDAFollowerRead -test.benchtime 100x"]='by hand, on a test binary built with go test -c -tags cuda, in scripts/test-cuda.sh'"'"'s environment'
	["BASE=HEAD BENCH='^BenchmarkCUDAFollowerRead\$' TAGS=cuda OVERLAY= N1=200 N2=1200 ./scripts/bench-instructions.sh"]='by hand in scripts/test-cuda.sh'"'"'s environment (a few minutes; valgrind, the fake driver): docs/performance.md'
	["BASE=HEAD BENCH='^BenchmarkFollowerRead\$' OVERLAY=follow_bench_test.go N1=100 N2=600 ./scripts/bench-instructions.sh"]='by hand (a few minutes; it needs valgrind, from Debian'"'"'s packages): docs/performance.md'
	['SCREENSHOT=docs/timeline.png ./scripts/test-browser.sh']='.ci/run runs scripts/test-browser.sh (without renewing the screenshot)'
	['go tool pprof http://localhost:6060/debug/memtrack/cpu?peak=1']='needs the program of docs/timeline.md serving; web/handler_test.go checks the path serves the profile'
	["go test -run '^\$' -bench Forward -count 10 ./model > old.txt"]='an example of the reader'"'"'s own benchmark (docs/leaks.md); memtest/bench_test.go checks ReportMemory'"'"'s figures'
	["go test -run '^\$' -bench Forward -count 10 ./model > new.txt"]='an example of the reader'"'"'s own benchmark (docs/leaks.md)'
	['go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da old.txt new.txt']='by hand, after the two runs above (it fetches benchstat)'
	['./scripts/bench-leaks.sh']='by hand on a quiet machine (under a minute); .ci/run runs every root benchmark once with -benchtime 1x'
	['TAGS=cuda ./scripts/bench-leaks.sh']='by hand in scripts/test-cuda.sh'"'"'s environment (it needs cuda.h and a driver)'
	["go test -run '^\$' -bench CategoryLayer -count 10 -benchtime 20000x ."]='by hand on a quiet machine (docs/performance.md); .ci/run runs every benchmark once with -benchtime 1x'
	["go test -run '^\$' -bench CategoryAllocFree -count 10 -benchtime 2000x ./bench"]='by hand on a quiet machine (docs/performance.md); .ci/run runs every benchmark once with -benchtime 1x'
	["BENCH='^BenchmarkDeviceLayer/sites=off\$|^BenchmarkCPUPair/design=tracked\$' BASE=3b0b79e ./scripts/bench-base.sh"]='by hand on a quiet machine (a few minutes)'
	# docs/devices.md: the cost of reading NotResident.
	["go test -run '^\$' -bench CPUNotResident -benchtime 200x -count 3 ."]='by hand on a quiet machine (seconds)'
	# docs/performance.md: the one allocation path against the commits before it.
	["OVERLAY=alloc_bench_test.go BASE=fef912d BENCH='^BenchmarkPair\$' COUNT=10 BENCHTIME=200ms ./scripts/bench-base.sh"]='by hand on a quiet machine (a few minutes)'
	["OVERLAY=alloc_bench_test.go BASE=e14c725 BENCH='^BenchmarkPair\$' COUNT=10 BENCHTIME=200ms ./scripts/bench-base.sh"]='by hand on a quiet machine (a few minutes)'
	['BASE=fef912d ./scripts/bench-instructions.sh']='by hand (about a minute; it needs valgrind, from Debian'"'"'s packages)'
	['BASE=e14c725 ./scripts/bench-instructions.sh']='by hand (about a minute; it needs valgrind, from Debian'"'"'s packages)'
	['BASE=f206511 ./scripts/bench-instructions.sh']='by hand (about a minute; it needs valgrind, from Debian'"'"'s packages)'
	["BASE=2434dcd BENCH='^BenchmarkPair\$|^BenchmarkPairFeature\$' OVERLAY='alloc_bench_test.go alloc_features_bench_test.go' ./scripts/bench-instructions.sh"]='by hand (about 20 minutes; it needs valgrind, from Debian'"'"'s packages)'
	["BASE=84b2c4f BENCH='^BenchmarkPair\$|^BenchmarkPairFeature\$' OVERLAY='alloc_bench_test.go alloc_features_bench_test.go' ./scripts/bench-instructions.sh"]='by hand (about 20 minutes; it needs valgrind, from Debian'"'"'s packages)'
	["go test -run '^\$' -bench BenchmarkMark -benchmem -count 5 ."]='by hand on a quiet machine (docs/timeline.md); .ci/run runs every benchmark once with -benchtime 1x'
	["BASE=fef912d COUNT=6 BENCHTIME=200ms BENCH='^BenchmarkDeviceLayer/sites=off\$|^BenchmarkCategoryLayer\$' ./scripts/bench-base.sh"]='by hand on a quiet machine (about a minute): docs/performance.md'
	["OVERLAY=category_bench_test.go BASE=a007415 BENCH='^Benchmark(DeviceLayer|CategoryPair|Mark|HistoryRecord)\$' ./scripts/bench-instructions.sh"]='by hand (about a minute; it needs valgrind, from Debian'"'"'s packages): docs/performance.md and docs/timeline.md'
	["OVERLAY= TAGS=cuda BASE=6c72bd4 BENCH='^BenchmarkCUDAAllocFree\$/size=/pair=(tracked|backend)\$' ./scripts/bench-instructions.sh"]='by hand in scripts/test-cuda.sh'"'"'s environment (several minutes; valgrind, the fake driver, and cuda.h for the base): docs/performance.md'
	["N1=2000 N2=12000 OVERLAY= TAGS=rocm BASE=c9f3306 BENCH='^BenchmarkROCmAllocFree(Async)?\$/size=1KiB/pair=(tracked|raw)\$' ./scripts/bench-instructions.sh"]='by hand in scripts/test-rocm.sh'"'"'s environment (several minutes; valgrind and the fakes): docs/performance.md'
	["N1=4000 N2=24000 OVERLAY= TAGS=cuda BASE=d86ebc0 BENCH='^BenchmarkCUDAAllocFreeAsync\$/size=(1KiB|1MiB)/pair=(tracked|raw)\$' ./scripts/bench-instructions.sh"]='by hand in scripts/test-cuda.sh'"'"'s environment (several minutes; valgrind, the fake driver, and cuda.h for the base): docs/performance.md and docs/streams.md'
	["OVERLAY= TAGS=cuda BASE=d86ebc0 BENCH='^BenchmarkCUDAAllocFree\$/size=(1KiB|1MiB)/pair=(tracked|backend)\$' ./scripts/bench-instructions.sh"]='by hand in scripts/test-cuda.sh'"'"'s environment (several minutes; valgrind, the fake driver, and cuda.h for the base): docs/performance.md'
	["OVERLAY= TAGS=cuda BASE=d86ebc0 BENCH='^BenchmarkCUDAMapUnmap\$' N1=100 N2=600 ./scripts/bench-instructions.sh"]='by hand in scripts/test-cuda.sh'"'"'s environment (a few minutes; valgrind, the fake driver, and cuda.h for the base): docs/performance.md'
	["BASE=d86ebc0 BENCH='^BenchmarkPair\$' ./scripts/bench-instructions.sh"]='by hand (several minutes; it needs valgrind, from Debian'"'"'s packages): docs/performance.md'
	["./memtrack.test -test.run '^\$' -test.bench 'CUDAAllocFreeAsync/size=.*/pair=interleaved' -test.benchtime 3000x -test.count 5"]='on a GPU, in the folder scripts/gpu-check.sh builds (its run.sh runs the same benchmark shorter): docs/performance.md'
	['COUNT=3 BENCHTIME=100ms ./scripts/bench.sh']='by hand (minutes, and it fetches benchstat); .ci/run runs every benchmark once with -benchtime 1x'
)

fail=0
complain() {
	echo "check-docs: $*" >&2
	fail=1
}

# extract_commands FILE: prints "LINE<TAB>COMMAND" for every command in the
# file's ```sh blocks and every "$ " line of its ```console blocks. Fences
# may be indented (inside list items). A line ending in a backslash
# continues on the next.
extract_commands() {
	awk '
	function emit(line, cmd) {
		sub(/[ \t]+#[ \t].*$/, "", cmd)   # a trailing comment
		gsub(/[ \t]+/, " ", cmd)
		sub(/^ /, "", cmd); sub(/ $/, "", cmd)
		if (cmd != "") printf "%d\t%s\n", line, cmd
	}
	{
		line = $0
		sub(/^[ \t]+/, "", line)
	}
	fence == "" && line ~ /^```/ {
		fence = substr(line, 4)
		sub(/[ \t]+$/, "", fence)
		if (fence == "") fence = "none"
		next
	}
	fence != "" && line ~ /^```[ \t]*$/ { fence = ""; next }
	fence == "sh" || fence == "bash" || fence == "shell" {
		if (line ~ /^#/ && cont == "") next
		if (line ~ /\\$/) {
			if (cont == "") start = NR
			cont = cont substr(line, 1, length(line) - 1) " "
			next
		}
		if (cont != "") { emit(start, cont line); cont = ""; next }
		emit(NR, line)
		next
	}
	fence == "console" && line ~ /^\$ / { emit(NR, substr(line, 3)) }
	' "$1"
}

# 1. Every command is listed.
declare -A seen=()
todo=()
for f in "${docs[@]}"; do
	while IFS=$'\t' read -r line cmd; do
		seen[$cmd]=1
		if [[ ${run_cmds[$cmd]+set} ]]; then
			todo+=("$f:$line"$'\t'"$cmd")
		elif [[ ${skip_cmds[$cmd]+set} ]]; then
			echo "skip $f:$line: $cmd  -- ${skip_cmds[$cmd]}"
		else
			complain "$f:$line: command in neither list of scripts/check-docs.sh: $cmd"
		fi
	done < <(extract_commands "$f")
done
for cmd in "${!run_cmds[@]}" "${!skip_cmds[@]}"; do
	[[ ${seen[$cmd]+set} ]] || complain "listed in scripts/check-docs.sh but in no document any more: $cmd"
done

# 2. Run the listed commands, in document order.
DOCS_TMP=$(mktemp -d)
export DOCS_TMP
trap 'rm -rf "$DOCS_TMP"' EXIT
for entry in "${todo[@]}"; do
	where=${entry%%$'\t'*}
	cmd=${entry#*$'\t'}
	actual=${run_cmds[$cmd]:-$cmd}
	echo "== $where: $actual"
	start=$SECONDS
	if ! out=$(cd "$root" && bash -euo pipefail -c "$actual" 2>&1); then
		printf '%s\n' "$out" | tail -n 40 >&2
		complain "$where: command failed: $actual"
	fi
	echo "   ($((SECONDS - start)) s)"
done

# 3. Links and anchors. slugs FILE prints the GitHub anchor of every
# heading outside code blocks: lower case, inline code marks and link
# targets dropped, everything but letters, digits, blanks, "-" and "_"
# removed, blanks made "-", and "-1", "-2"... added to repeats.
slugs() {
	awk '
	{ line = $0; sub(/^[ \t]+/, "", line) }
	line ~ /^```/ { infence = !infence; next }
	!infence && $0 ~ /^#+ / { sub(/^#+ +/, ""); sub(/ +#+ *$/, ""); print }
	' "$1" | perl -CSD -ne '
		chomp;
		s/\[([^\]]*)\]\([^)]*\)/$1/g;
		$_ = lc;
		s/[^\p{L}\p{N}\p{M} _-]//g;
		s/ /-/g;
		my $s = $_;
		$s .= "-" . $n{$_} if $n{$_};
		$n{$_}++;
		print "$s\n";
	'
}

# links FILE prints "LINE<TAB>TARGET" for every inline link [text](target)
# outside code blocks and inline code.
links() {
	awk '
	{ line = $0; sub(/^[ \t]+/, "", line) }
	line ~ /^```/ { infence = !infence; next }
	infence { next }
	{
		s = $0
		gsub(/`[^`]*`/, "", s)
		while (match(s, /\]\([^)]+\)/)) {
			printf "%d\t%s\n", NR, substr(s, RSTART + 2, RLENGTH - 3)
			s = substr(s, RSTART + RLENGTH)
		}
	}
	' "$1"
}

nlinks=0
for f in "${docs[@]}"; do
	dir=$(dirname "$f")
	while IFS=$'\t' read -r line target; do
		target=${target%% *} # drop a "title"
		case $target in
		http://* | https://* | mailto:*) continue ;;
		esac
		nlinks=$((nlinks + 1))
		path=${target%%#*}
		anchor=
		[[ $target == *#* ]] && anchor=${target#*#}
		if [[ -z $path ]]; then
			dest=$f
		else
			dest=$dir/$path
		fi
		if [[ ! -e $dest ]]; then
			complain "$f:$line: link to a missing file: $target"
			continue
		fi
		if [[ -n $anchor ]]; then
			if [[ $dest != *.md ]]; then
				complain "$f:$line: anchor into a file that is not Markdown: $target"
			elif ! slugs "$dest" | grep -qxF -- "$anchor"; then
				complain "$f:$line: no heading in $dest has the anchor #$anchor"
			fi
		fi
	done < <(links "$f")
done
echo "== ${#todo[@]} commands run, ${#skip_cmds[@]} skipped as listed, $nlinks relative links checked"

if ((fail)); then
	echo "check-docs: FAILED (see above)" >&2
	exit 1
fi
echo "check-docs: ok"
