package memtrack

import (
	"testing"

	"github.com/memtrack/memtrack/internal/inlinetest"
)

// intendedInlining lists the functions of this package whose inlining the
// allocation and release paths rely on to cost what they do with every
// feature off: the exported wrappers of the paths, so that they add no
// call (Device.Alloc, Device.Track); the reads of the hook set and of the
// limits and of a category's record (kindState.hooksOf, admitted.limited,
// Category.recordOf); and the leak watch's
// checks on Free of an unwatched buffer (claimWatched, unwatchBuffer).
//
// Not listed, because they do not fit the budget of 80 (costs in the test's
// log): Device.resolve, Device.admit, Device.allocate and kindState.uncount,
// which are one call each on the path.
var intendedInlining = []string{
	"Device.Alloc",
	"Device.Track",
	"(*kindState).hooksOf",
	"(*admitted).limited",
	"Category.recordOf",
	"claimWatched",
	"unwatchBuffer",
}

// TestIntendedInlining builds the package with the compiler's inlining
// diagnostics and fails if a function of intendedInlining is no longer
// inlinable, as package tracker's test of the same name does.
func TestIntendedInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package: not with -short")
	}
	inlinetest.Check(t, "alloc.go", intendedInlining,
		[]string{"Device.resolve", "Device.admit", "Device.allocate", "(*kindState).uncount"})
}
