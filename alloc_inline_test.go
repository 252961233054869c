package memtrack

import (
	"testing"

	"github.com/memtrack/memtrack/internal/inlinetest"
)

// intendedInlining lists the functions of this package whose inlining the
// allocation and release paths rely on to cost what they do with every
// feature off: the exported wrappers of the paths, so that they add no
// call (Device.Alloc, Device.Track, Buffer.Free); the one accessor of the
// device tables (tableOf); the reads of the hook set, of the limits and
// of a category's record (deviceTable.hooksOf, ledger.limited,
// ledger.inCategory); and the features' claim on the release of a buffer
// they have no mark on (claimMarks).
//
// Not listed, because they do not fit the budget of 80 (costs in the test's
// log): Device.lookup, Device.take and deviceTable.release, which are one
// call each on the paths.
var intendedInlining = []string{
	"Device.Alloc",
	"Device.Track",
	"(*Buffer).Free",
	"tableOf",
	"(*deviceTable).hooksOf",
	"(*ledger).limited",
	"(*ledger).inCategory",
	"claimMarks",
}

// TestIntendedInlining builds the package with the compiler's inlining
// diagnostics and fails if a function of intendedInlining is no longer
// inlinable, as package tracker's test of the same name does.
func TestIntendedInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package: not with -short")
	}
	inlinetest.Check(t, "alloc.go", intendedInlining,
		[]string{"Device.lookup", "Device.take", "(*deviceTable).release"})
}
