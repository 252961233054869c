//go:build linux

package hostmem

import (
	"os"
	"syscall"
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

func TestParseRollup(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:    99999 kB\nAnonymous:               12345 kB\nKSM:  1 kB\n", 12345 << 10, true},
		{"Anonymous: 0 kB\n", 0, true},
		{"Pss: 1 kB\n", 0, false},
		{"Anonymous: 12 MB\n", 0, false},
		{"Anonymous: -1 kB\n", 0, false},
	} {
		got, err := parseRollup(c.in, "Anonymous:")
		if c.ok {
			assert.NoError(t, err, c.in)
			assert.Equal(t, c.want, got, c.in)
		} else {
			assert.Error(t, err, c.in)
		}
	}
}

func TestProcessAnonymousFollowsPages(t *testing.T) {
	before, err := ProcessAnonymous()
	require.NoError(t, err)
	const size = 16 << 20
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	for i := 0; i < size; i += os.Getpagesize() {
		b[i] = 1
	}
	touched, err := ProcessAnonymous()
	require.NoError(t, err)
	require.NoError(t, syscall.Munmap(b))
	after, err := ProcessAnonymous()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, touched-before, int64(size), "the pages written are resident")
	assert.GreaterOrEqual(t, touched-after, int64(size), "the pages unmapped left the resident set")
}
