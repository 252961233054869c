//go:build rocm

package rocmsmi_test

import (
	"errors"
	"os"
	"testing"

	"github.com/memtrack/memtrack/internal/rocmsmi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AMD's own rocm_smi (Debian's librocm-smi64, which scripts/rocm-dev.sh
// unpacks; MEMTRACK_ROCM_REAL_LIBS is its library path): it loads, has
// every call the package needs, and, on a machine without an AMD GPU,
// fails only at its initialisation, in its own words, which the test
// prints.
func TestRealLibrary(t *testing.T) {
	libs := os.Getenv("MEMTRACK_ROCM_REAL_LIBS")
	if libs == "" {
		t.Skip("needs AMD's libraries (MEMTRACK_ROCM_REAL_LIBS: scripts/rocm-dev.sh)")
	}
	if !inChild(t, libs) {
		return
	}
	l, err := rocmsmi.Open()
	if _, kfd := os.Stat("/dev/kfd"); kfd == nil {
		require.NoError(t, err)
		t.Logf("this machine has an AMD GPU: %+v", l.Library())
		return
	}
	require.ErrorIs(t, err, rocmsmi.ErrUnavailable)
	t.Logf("Open: %v", err)
	var e *rocmsmi.Error
	require.True(t, errors.As(err, &e), "it loaded, with every call, and failed at its initialisation: %v", err)
	assert.Equal(t, "rsmi_init", e.Op)
	assert.Equal(t, rocmsmi.InitError, e.Code)
	assert.Contains(t, err.Error(), "librocm_smi64.so.1 at ")
}
