//go:build memtrack_nosites

package memtrack

// sitesBuilt is false under -tags memtrack_nosites: the allocation path has
// no hook for allocation sites, and Device.Sites().Enable fails with
// ErrSitesNotRecorded. Rebuild without the tag to record them; the tag
// exists to measure the cost of the hook (bench/sites_test.go).
const sitesBuilt = false
