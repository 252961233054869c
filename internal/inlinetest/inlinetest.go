// Package inlinetest is the machinery of the TestIntendedInlining tests
// of package memtrack and package tracker: it builds the package in the
// working directory with the compiler's inlining diagnostics and fails the
// test where a function meant to inline does not, as the Go compiler's
// test of the same name does for the standard library.
package inlinetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// Check builds the package in the working directory, whose sources hold
// the file source (the test is skipped where they are not there, or where
// no go tool of this platform is), and fails t for each function of want
// that the compiler cannot inline. It logs the verdict of each function of
// want and of also, whose costs the callers' comments cite.
func Check(t *testing.T, source string, want, also []string) {
	t.Helper()
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	root := runtime.GOROOT()
	gotool := filepath.Join(root, "bin", "go")
	if _, err := os.Stat(gotool); err != nil {
		t.Skipf("no go tool at %s: %v", gotool, err)
	}
	// A test binary of another architecture (GOARCH=386 under qemu) cannot
	// run this toolchain, whose tools are built for the host.
	if _, err := os.Stat(filepath.Join(root, "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH)); err != nil {
		t.Skipf("the go tool is not built for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if _, err := os.Stat(source); err != nil {
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
	for _, fn := range want {
		v, ok := verdict[fn]
		if !ok {
			v = "no diagnostic"
		}
		t.Logf("%s: %s", fn, v)
		if !strings.HasPrefix(v, "can inline") {
			missing = append(missing, fn+" ("+v+")")
		}
	}
	for _, fn := range also {
		t.Logf("%s: %s", fn, verdict[fn])
	}
	if len(missing) > 0 {
		t.Errorf("not inlinable any more:\n\t%s", strings.Join(missing, "\n\t"))
	}
}
