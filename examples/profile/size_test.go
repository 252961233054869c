package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096},
		{"4096B", 4096},
		{"16MiB", 16 << 20},
		{" 16 MiB ", 16 << 20},
		{"16Mi", 16 << 20},
		{"16MB", 16_000_000},
		{"16kB", 16_000},
		{"16KB", 16_000},
		{"1.5GiB", 3 << 29},
		{"1.5GB", 1_500_000_000},
		{"0.5KiB", 512},
		{".5Ki", 512},
		{"2.TiB", 2 << 40},
		{"1Ti", 1 << 40},
		{"3GB", 3_000_000_000},
		{"9223372036854775807", math.MaxInt64},
		// Exact where float64 is not: 2^53+1, and 0.1 (not a binary fraction).
		{"9007199254740993B", 1<<53 + 1},
		{"0.1GB", 100_000_000},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseSizeErrors(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{"99999999999GiB", "too large"},
		{"9223372036854775808", "too large"},
		{"8EiB", `unknown unit "EiB"`},
		{"16M", `unknown unit "M"`},
		{"16 mib", `unknown unit "mib"`},
		{"0", "want a positive size"},
		{"0.0MiB", "want a positive size"},
		{"-1MiB", "want a number"},
		{"1.5B", "is 1.500 bytes: want a whole number of bytes"},
		{"0.1KiB", "whole number of bytes"},
		{"", "want a number"},
		{"MiB", "want a number"},
		{".", "want a number"},
		{"1.2.3MiB", "want a number"},
		{"1e3", `unknown unit "e3"`},
		{"16MiB!", `unknown unit "MiB!"`},
		{"0x10", `unknown unit "x10"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize(tc.in)
			assert.ErrorContains(t, err, tc.msg)
			assert.Zero(t, got)
		})
	}
}
