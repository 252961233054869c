//go:build !rocm

package memtrack

// newROCmBackend returns the stand-in for the ROCm backend, which this build
// leaves out. Rebuild with -tags rocm to track AMD GPU memory (the HIP
// runtime is loaded at run time: no AMD header or library is needed to
// build, see docs/rocm.md).
func newROCmBackend() backend { return unbuilt{kind: KindROCm} }
