//go:build linux

package claims

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStart(t *testing.T) {
	for line, want := range map[string]uint64{
		"1234 (memtrack) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 4 0 98765 1000000 100":          98765,
		"1234 (a (strange) name) R 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 4 0 424242 1000000 100": 424242,
		"77 (with ) and spaces) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0":                             5,
	} {
		got, err := parseStart(line)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5 0"} {
		_, err := parseStart(bad)
		assert.Error(t, err, "%q", bad)
	}
}
