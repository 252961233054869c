package memtrack

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rss returns the resident set size of the process, from /proc/self/statm.
func rss(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/statm")
	require.NoError(t, err)
	f := strings.Fields(string(data))
	require.GreaterOrEqual(t, len(f), 2)
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize())
}

// TestCPURSSFollowsTrackedFigure allocates and touches a 256 MiB buffer: the
// resident memory rises by about that much, and falls back on Free, because
// large buffers are mapped from the OS and unmapped on Free.
func TestCPURSSFollowsTrackedFigure(t *testing.T) {
	const size = 256 << 20
	before := rss(t)
	b, err := CPU().Alloc(size)
	require.NoError(t, err)
	p := b.Bytes()
	for i := 0; i < len(p); i += os.Getpagesize() {
		p[i] = 1
	}
	during := rss(t)
	require.NoError(t, b.Free())
	after := rss(t)
	assert.Greater(t, during-before, int64(size*9/10), "RSS rose by %d for a %d-byte buffer", during-before, size)
	assert.Less(t, after-before, int64(size/10), "RSS stayed %d above where it started after Free", after-before)
}
