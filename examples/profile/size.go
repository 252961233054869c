package main

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// units are the suffixes parseSize reads: decimal (SI) and binary (IEC)
// units, and the binary ones without their B as Kubernetes writes them.
var units = map[string]int64{
	"":    1,
	"B":   1,
	"kB":  1e3,
	"KB":  1e3,
	"MB":  1e6,
	"GB":  1e9,
	"TB":  1e12,
	"KiB": 1 << 10,
	"MiB": 1 << 20,
	"GiB": 1 << 30,
	"TiB": 1 << 40,
	"Ki":  1 << 10,
	"Mi":  1 << 20,
	"Gi":  1 << 30,
	"Ti":  1 << 40,
}

// parseSize reads a positive whole number of bytes: a number, which may have
// a fraction, followed by an optional unit (B; kB, MB, GB, TB in powers of
// 1000; KiB, MiB, GiB, TiB or Ki, Mi, Gi, Ti in powers of 1024), with or
// without a space between: "4096", "16MB", "1.5GiB", "16Mi". It is exact
// (no floating point), and refuses a size of zero, a fraction of a byte and
// a size past the int64 range.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" || num == "." || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("size %q: want a number, optionally with a fraction and a unit, such as 16MiB or 1.5GB", s)
	}
	mult, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q: want B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, Ki, Mi, Gi or Ti", s, unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("size %q: %q is not a number", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	switch {
	case r.Sign() <= 0:
		return 0, fmt.Errorf("size %q: want a positive size", s)
	case !r.IsInt():
		return 0, fmt.Errorf("size %q is %s bytes: want a whole number of bytes", s, r.FloatString(3))
	case r.Num().Cmp(big.NewInt(math.MaxInt64)) > 0:
		return 0, fmt.Errorf("size %q: too large; the most is %d bytes (8 EiB)", s, int64(math.MaxInt64))
	}
	return r.Num().Int64(), nil
}
