package tracker

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
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
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gotool); err != nil {
		t.Skipf("no go tool at %s: %v", gotool, err)
	}
	// A test binary of another architecture (GOARCH=386 under qemu) cannot
	// run this toolchain, whose tools are built for the host.
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	if _, err := os.Stat(filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH)); err != nil {
		t.Skipf("the go tool is not built for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := os.Stat("counter.go"); err != nil {
		t.Skipf("the package sources are not in the working directory: %v", err)
	}
	cmd := exec.Command(gotool, "build", "-gcflags=-m=2", ".")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m=2: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`(can|cannot) inline (\S+?):? (?:with )?(.*?)(?: as:|$)`)
	verdict := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			verdict[m[2]] = m[1] + " inline: " + m[3]
		}
	}
	var missing []string
	for _, fn := range intendedInlining {
		v, ok := verdict[fn]
		if !ok {
			v = "no diagnostic"
		}
		t.Logf("%s: %s", fn, v)
		if !strings.HasPrefix(v, "can inline") {
			missing = append(missing, fn+" ("+v+")")
		}
	}
	for _, fn := range []string{"(*Counter).Alloc", "(*Counter).AllocWithin", "(*Record).Alloc", "(*Record).Free"} {
		t.Logf("%s: %s", fn, verdict[fn])
	}
	if len(missing) > 0 {
		t.Errorf("not inlinable any more:\n\t%s", strings.Join(missing, "\n\t"))
	}
}
