//go:build metal && darwin

package memtrack

// newMetalBackend returns the Metal backend over this build's bridge to
// Metal: the Objective-C of metal_bridge.m where cgo is enabled, and where it
// is not, a backend whose every call says that cgo is needed.
func newMetalBackend() backend {
	br, err := openMetalBridge()
	if err != nil {
		return &metalBackend{err: err}
	}
	return newMetalBackendOver(br)
}
