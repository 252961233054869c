package tracker

import (
	"testing"

	"github.com/memtrack/memtrack/internal/inlinetest"
)

// intendedInlining lists the functions of this package whose fast paths are
// shaped for the compiler to inline into callers: a
// range check, one atomic add and one call to an outlined slow path.
//
// Not listed, because their exact algorithms do not fit the budget of 80
// (costs measured with Go 1.26, see TestIntendedInlining's log):
//   - (*Counter).Alloc (110 with the check for open peak scopes): its slow
//     path needs both n and the figure its add produced (to raise the peak
//     exactly, or to take a refused add back), and a call passing two
//     values already costs 88 with the range check, the add and the peak
//     check.
//   - (*Counter).AllocWithin (134): a load, a compare-and-swap and the limit
//     and range checks cost 95 before the peak check.
//   - (*Record).Alloc (152) and (*Record).Free (121): two and three atomic
//     adds on fields at a non-zero offset, their checks and one call cost
//     111 and 101 with the peak, limit and fold checks left out.
var intendedInlining = []string{
	"(*Counter).Free",
}

// TestIntendedInlining builds the package with the compiler's inlining
// diagnostics and fails if a function of intendedInlining is no longer
// inlinable, as the Go compiler's test of the same name does for the
// standard library.
func TestIntendedInlining(t *testing.T) {
	inlinetest.Check(t, "counter.go", intendedInlining,
		[]string{"(*Counter).Alloc", "(*Counter).AllocWithin", "(*Record).Alloc", "(*Record).Free"})
}
