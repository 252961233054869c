# Sourced by the scripts that fetch NVIDIA's packages from Debian's
# non-free component (scripts/cuda-dev.sh, scripts/test-nvidia-libs.sh):
# enable_non_free PACKAGE... adds the component, in
# /etc/apt/sources.list.d/memtrack-non-free.sources, where no configured
# source offers one of the packages (a fresh machine), and refreshes that
# source alone. It installs nothing. It expects the caller's sudo array
# (empty as root) and a log function.

# nonfree_entry prints the machine's own first Debian source entry, in
# deb822 form, with its component set to non-free alone (main is
# configured already).
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

enable_non_free() {
	local p missing=
	for p in "$@"; do
		if [[ -z $(apt-cache policy "$p" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)"') ]]; then
			missing=$p
			break
		fi
	done
	[[ -n $missing ]] || return 0
	local entry=/etc/apt/sources.list.d/memtrack-non-free.sources new
	if [[ ! -f $entry ]]; then
		new=$(mktemp)
		if ! nonfree_entry >"$new" || [[ ! -s $new ]]; then
			rm -f "$new"
			log "no apt source found to derive the non-free entry from"
			return 1
		fi
		log "enabling non-free in $entry"
		"${sudo[@]}" install -m 0644 "$new" "$entry"
		rm -f "$new"
	fi
	"${sudo[@]}" apt-get update -qq \
		-o Dir::Etc::sourcelist="$entry" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 >&2
}
