//go:build !memtrack_nosites

package memtrack

// sitesBuilt reports whether the recording of allocation sites is compiled
// in; -tags memtrack_nosites leaves it out (sitesBuilt is false there).
const sitesBuilt = true
