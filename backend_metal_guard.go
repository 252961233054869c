//go:build metal && (!darwin || ios)

package memtrack

// newMetalBackend stops a build with -tags metal for any system but macOS at
// once, instead of at link time: the name it returns is undefined, so the
// compiler's error is the message. GOOS=ios satisfies the darwin build
// constraint but lacks what the bridge calls (MTLCopyAllDevices), so it stops
// here too. Build for GOOS=darwin (macOS), or drop the tag.
func newMetalBackend() backend {
	return the_metal_backend_needs_macOS__build_for_GOOS_darwin_or_without_tags_metal
}
