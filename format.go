package memtrack

import (
	"math"
	"strconv"
)

// formatBytes writes n bytes in IEC units with three significant figures:
// "512 B", "1.50 KiB", "2.00 GiB".
func formatBytes(n int64) string {
	const units = "KMGTPE"
	neg := n < 0
	v := math.Abs(float64(n))
	if v < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	i := -1
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	prec := 2
	if v >= 100 {
		prec = 0
	} else if v >= 10 {
		prec = 1
	}
	s := strconv.FormatFloat(v, 'f', prec, 64) + " " + units[i:i+1] + "iB"
	if neg {
		s = "-" + s
	}
	return s
}
