//go:build !metal

package memtrack

// newMetalBackend returns the stand-in for the Metal backend, which this
// build leaves out. Rebuild with -tags metal on macOS to track Apple GPU
// memory.
func newMetalBackend() backend { return unbuilt{kind: KindMetal, note: " on macOS"} }
