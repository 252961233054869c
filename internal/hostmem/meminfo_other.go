//go:build !linux && !darwin

package hostmem

import (
	"errors"
	"runtime"
)

// MemInfo is not implemented on this OS: it returns an error.
func MemInfo() (free, total int64, err error) {
	return 0, 0, errors.New("host memory figures are not implemented on " + runtime.GOOS)
}

// ModelName gives no model name on this OS: the name is left empty.
func ModelName() (string, error) { return "", nil }
