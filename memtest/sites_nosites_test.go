//go:build memtrack_nosites

package memtest

// sitesBuilt is false under -tags memtrack_nosites: buffers have no
// allocation site, and the tests that read sites skip.
const sitesBuilt = false
