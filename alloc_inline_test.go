package memtrack

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// intendedInlining lists the functions of this package whose inlining the
// allocation and release paths rely on to cost what they do with every
// feature off: the exported wrappers of the paths, so that they add no
// call (Device.Alloc, Device.Track); the reads of the hook set and of the
// limits (kindState.hooksOf, admitted.limited); and the leak watch's
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
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gotool); err != nil {
		t.Skipf("no go tool at %s: %v", gotool, err)
	}
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	if _, err := os.Stat(filepath.Join(runtime.GOROOT(), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH)); err != nil {
		t.Skipf("the go tool is not built for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := os.Stat("alloc.go"); err != nil {
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
	for _, fn := range []string{"Device.resolve", "Device.admit", "Device.allocate", "(*kindState).uncount"} {
		t.Logf("%s: %s", fn, verdict[fn])
	}
	if len(missing) > 0 {
		t.Errorf("not inlinable any more:\n\t%s", strings.Join(missing, "\n\t"))
	}
}
