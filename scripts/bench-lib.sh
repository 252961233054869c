# Sourced by the benchmark scripts that compare the working tree with a base
# commit (bench-base.sh, bench-scopes.sh); $script names the caller in
# messages.

# base_tree checks out commit $1 into a temporary worktree, removed when the
# script exits, and sets tree to its directory. It exits 2 where $1 is not a
# commit of this repository.
base_tree() {
	if ! git cat-file -e "$1^{commit}" 2>/dev/null; then
		echo "$script: $1 is not a commit of this repository (a shallow clone? fetch it first)" >&2
		exit 2
	fi
	tree=$(mktemp -d)
	trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
	git worktree add --detach --force "$tree" "$1" >/dev/null
}

# machine prints what the figures depend on: the machine, Go, the time and
# the load, and the two commits compared (base $1).
machine() {
	echo "== machine"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
	go version
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
	echo "base: $(git log -1 --format='%h %s' "$1")"
	echo "head: $(git log -1 --format='%h %s') (and the working tree's changes)"
}
