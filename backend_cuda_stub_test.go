//go:build !cuda

package memtrack_test

import (
	"errors"
	"fmt"

	"github.com/memtrack/memtrack"
)

// In a build without -tags cuda, CUDA devices answer with an error that
// names the tag.
func ExampleCUDA() {
	_, err := memtrack.CUDA(0)
	fmt.Println(errors.Is(err, memtrack.ErrBackendNotBuilt))
	fmt.Println(err)
	// Output:
	// true
	// memtrack: backend not built: the cuda backend is compiled only with -tags cuda; rebuild with go build -tags cuda
}
