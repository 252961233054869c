//go:build !cuda

package cu

// Without -tags cuda this package is empty: the drop-in needs the CUDA
// driver API (cuda.h and libcuda.so) that memtrack's CUDA backend needs.
// Rebuild with go build -tags cuda; see the package documentation.
