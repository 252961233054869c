package childtest

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// InChild runs test t in a process of its own: in the test's process it
// runs the test binary again for t alone (a subtest too), with the
// environment variable env naming it and the variables of extra
// ("NAME=value") added, requires the child to pass (or skips where the
// child skipped) and returns false; in the child it returns true, and the
// caller goes on with the test.
func InChild(t *testing.T, env string, extra ...string) bool {
	t.Helper()
	if os.Getenv(env) == t.Name() {
		return true
	}
	out, err := child(t, env, extra).CombinedOutput()
	require.NoError(t, err, "child output:\n%s", out)
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skipf("child skipped:\n%s", out)
	}
	assert.Contains(t, string(out), "--- PASS: "+t.Name(), "child output:\n%s", out)
	return false
}

// InStoppedChild runs test t in a process of its own, as InChild does,
// where the child is to stop the process before the test ends (a fake
// driver that aborts on undefined behaviour): in the test's process it
// requires the child to exit with a failure, neither passing nor skipping
// t, and returns false and the child's output, for the caller to check
// why it stopped; in the child it returns true, and the caller goes on
// with the test.
func InStoppedChild(t *testing.T, env string, extra ...string) (inChild bool, output string) {
	t.Helper()
	if os.Getenv(env) == t.Name() {
		return true, ""
	}
	out, err := child(t, env, extra).CombinedOutput()
	require.Error(t, err, "the child was to stop; its output:\n%s", out)
	require.NotContains(t, string(out), "--- SKIP: "+t.Name(), "child output:\n%s", out)
	require.NotContains(t, string(out), "--- PASS: "+t.Name(), "child output:\n%s", out)
	return false, string(out)
}

// child returns the command that runs the test binary again for t alone,
// with env naming it and extra added to the environment.
func child(t *testing.T, env string, extra []string) *exec.Cmd {
	var run []string
	for _, part := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.v", "-test.count=1")
	// The race detector's pause at exit is of no use here.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), env+"="+t.Name(), "GORACE="+gorace)
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}
