//go:build !cuda

package memtrack

// newCUDABackend returns the stand-in for the CUDA backend, which this build
// leaves out. Rebuild with -tags cuda (and the CUDA driver API headers, see
// README.md) to track NVIDIA GPU memory.
func newCUDABackend() backend { return unbuilt{kind: KindCUDA} }
