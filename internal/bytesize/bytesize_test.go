package bytesize

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{-1023, "-1023 B"},
		{1024, "1.00 KiB"},
		{1536, "1.50 KiB"},
		{10239, "10.0 KiB"},  // 9.999 KiB: three figures after rounding
		{10234, "9.99 KiB"},  // 9.994 KiB
		{102399, "100 KiB"},  // 99.999 KiB
		{102348, "99.9 KiB"}, // 99.949 KiB
		{1<<20 - 512, "1.00 MiB"},
		{1<<20 - 513, "1023 KiB"},
		{1<<20 - 1, "1.00 MiB"},
		{-(1<<20 - 1), "-1.00 MiB"},
		{1<<30 - 1, "1.00 GiB"},
		{1<<40 - 1, "1.00 TiB"},
		{23 << 20, "23.0 MiB"},
		{300 << 30, "300 GiB"},
		{1 << 60, "1.00 EiB"},
		{math.MaxInt64, "8.00 EiB"},
		{math.MinInt64, "-8.00 EiB"},
	} {
		assert.Equal(t, tc.want, Format(tc.n), "%d", tc.n)
	}
}

func TestExact(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{512, "512 B"},
		{-1023, "-1023 B"},
		{1024, "1.00 KiB (1024 B)"},
		{1572864, "1.50 MiB (1572864 B)"},
		{-2048, "-2.00 KiB (-2048 B)"},
	} {
		assert.Equal(t, tc.want, Exact(tc.n), "%d", tc.n)
	}
}
