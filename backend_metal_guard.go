//go:build metal && !darwin

package memtrack

// newMetalBackend stops a build with -tags metal for any system but macOS at
// once, instead of at link time: the name it returns is undefined, so the
// compiler's error is the message. Build for GOOS=darwin, or drop the tag.
func newMetalBackend() backend {
	return the_metal_backend_needs_macOS__build_for_GOOS_darwin_or_without_tags_metal
}
