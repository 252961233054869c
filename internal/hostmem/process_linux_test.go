//go:build linux

package hostmem

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStatm(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"12345 678 90 1 0 2 0\n", 678 * 4096, true},
		{"1 0 0 0 0 0 0", 0, true},
		{"1", 0, false},
		{"", 0, false},
		{"1 x 0", 0, false},
		{"1 -3 0", 0, false},
	} {
		got, err := parseStatm(tc.in, 4096)
		if !tc.ok {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// TestProcessUsedFollowsTouchedMemory maps and writes 64 MiB: the process's
// figure rises by about that much, and falls back once it is unmapped. (A
// cgroup's usage moves with it too.)
func TestProcessUsedFollowsTouchedMemory(t *testing.T) {
	const size = 64 << 20
	before, err := ProcessUsed()
	require.NoError(t, err)
	require.Positive(t, before)
	b, err := Map(size)
	require.NoError(t, err)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	during, err := ProcessUsed()
	require.NoError(t, err)
	require.NoError(t, Unmap(b))
	after, err := ProcessUsed()
	require.NoError(t, err)
	assert.Greater(t, during-before, int64(size*8/10), "rose by %d for %d bytes written", during-before, size)
	assert.Less(t, after-before, int64(size/4), "stayed %d above where it started once unmapped", after-before)
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tx\nVmRSS:\t  141800 kB\nRssAnon:\t  136160 kB\nRssFile:\t    5640 kB\nRssShmem:\t       0 kB\n"
	n, err := parseStatusKB(status, "RssFile:")
	require.NoError(t, err)
	assert.Equal(t, int64(5640<<10), n)
	for _, bad := range []string{"", "RssFile: 5640", "RssFile: x kB", "RssFile: -1 kB", "RssFile: 5 MB"} {
		_, err := parseStatusKB(bad, "RssFile:")
		assert.Error(t, err, "%q", bad)
	}
	files, err := ResidentFiles()
	require.NoError(t, err)
	assert.Positive(t, files, "a process's code is resident")
}
