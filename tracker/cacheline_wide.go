//go:build arm64 || ppc64 || ppc64le || s390x

package tracker

// cacheLineSize is 128 bytes on these architectures (Apple silicon and
// Neoverse arm64 parts prefetch line pairs; POWER and Z have 128-byte lines).
const cacheLineSize = 128
