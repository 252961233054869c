//go:build !memtrack_nosites

package memtest

// sitesBuilt: allocation sites are compiled in (see sites_nosites_test.go).
const sitesBuilt = true
