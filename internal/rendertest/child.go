package rendertest

import (
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
)

// InChild runs test t in a process of its own (childtest.InChild), with
// the environment variable env naming it. Tests that add a device to the
// used devices, which the other tests of the package list, run this way.
func InChild(t *testing.T, env string) bool {
	t.Helper()
	return childtest.InChild(t, env)
}
