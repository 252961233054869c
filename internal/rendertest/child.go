package rendertest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// InChild runs test t in a process of its own: in the test's process it
// runs the test binary again for t alone, with the environment variable env
// naming it, requires the child to pass (or skips where the child skipped)
// and returns false; in the child it returns true, and the caller goes on
// with the test. Tests that add a device to the used devices, which the
// other tests of the package list, run this way.
func InChild(t *testing.T, env string) bool {
	t.Helper()
	if os.Getenv(env) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), env+"="+t.Name(), "GORACE="+gorace)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child output:\n%s", out)
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skipf("child skipped:\n%s", out)
	}
	assert.Contains(t, string(out), "--- PASS: "+t.Name(), "child output:\n%s", out)
	return false
}
