//go:build !linux && !darwin

package memtrack

import (
	"errors"
	"runtime"
)

// hostMemInfo is not implemented on this OS.
func hostMemInfo() (free, total int64, err error) {
	return 0, 0, errors.New("memtrack: host memory figures are not implemented on " + runtime.GOOS)
}

// cpuModelName gives no model name on this OS: the name is left empty.
func cpuModelName() (string, error) { return "", nil }
