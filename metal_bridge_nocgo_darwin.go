//go:build metal && darwin && !ios && !cgo

package memtrack

import "fmt"

// newMetalBackend returns a Metal backend whose every call says that this
// build has no bridge to Metal: the bridge is Objective-C (metal_bridge.m),
// reached through cgo, and this binary was built with CGO_ENABLED=0.
func newMetalBackend() backend {
	return &metalBackend{err: fmt.Errorf("%w: the metal backend calls Metal through cgo, and this binary was built with CGO_ENABLED=0; "+
		"rebuild with CGO_ENABLED=1 and the Xcode command-line tools installed (xcode-select --install)", ErrBackendNotBuilt)}
}
