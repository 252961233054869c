//go:build !arm64 && !ppc64 && !ppc64le && !s390x

package tracker

// cacheLineSize is the size of the unit of cache coherence on this
// architecture: two counters closer than this false-share.
const cacheLineSize = 64
