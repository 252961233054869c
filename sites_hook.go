//go:build !memtrack_nosites

package memtrack

// sitesBuilt reports whether the recording of allocation sites is compiled
// in; -tags memtrack_nosites leaves it out (see sites_hook_stub.go).
const sitesBuilt = true
