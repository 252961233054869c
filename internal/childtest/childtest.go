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
	var run []string
	for _, part := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.v", "-test.count=1")
	// The race detector's pause at exit is of no use here.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), env+"="+t.Name(), "GORACE="+gorace)
	cmd.Env = append(cmd.Env, extra...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child output:\n%s", out)
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skipf("child skipped:\n%s", out)
	}
	assert.Contains(t, string(out), "--- PASS: "+t.Name(), "child output:\n%s", out)
	return false
}
