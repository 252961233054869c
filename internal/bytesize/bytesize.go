package bytesize

import (
	"math"
	"strconv"
)

const units = "KMGTPE"

// Format writes n bytes in IEC units with three significant figures:
// "512 B", "1.50 KiB", "10.0 MiB", "300 GiB". A count under 1024 is
// written exactly. The unit is chosen after rounding, so that a count just
// under a unit is written in that unit ("1.00 MiB" for 1048575, never
// "1024 KiB").
func Format(n int64) string {
	if n > -1024 && n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, u := math.Abs(float64(n)), -1
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	prec := precision(v)
	if r := round(v, prec); r >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
		prec = precision(v)
	}
	s := strconv.FormatFloat(v, 'f', prec, 64) + " " + units[u:u+1] + "iB"
	if n < 0 {
		s = "-" + s
	}
	return s
}

// precision returns the digits after the point that leave v with three
// significant figures once rounded: 9.996 is written 10.0, not 10.00.
func precision(v float64) int {
	switch {
	case round(v, 1) >= 100:
		return 0
	case round(v, 2) >= 10:
		return 1
	}
	return 2
}

// round rounds v to prec digits after the point, as FormatFloat does.
func round(v float64, prec int) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', prec, 64), 64)
	return r
}

// Exact writes n as Format does, followed by the exact figure where the
// unit rounds it: "512 B", "1.50 MiB (1572864 B)".
func Exact(n int64) string {
	s := Format(n)
	if n > -1024 && n < 1024 {
		return s
	}
	return s + " (" + strconv.FormatInt(n, 10) + " B)"
}
