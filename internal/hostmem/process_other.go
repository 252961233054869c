//go:build !linux

package hostmem

import (
	"errors"
	"runtime"
)

// ErrNoProcessFigure: this OS gives no figure of the process's memory
// without cgo; the caller falls back to the machine's.
var ErrNoProcessFigure = errors.New("the process's resident memory is not read on " + runtime.GOOS)

// ProcessUsed returns [ErrNoProcessFigure] on this OS.
func ProcessUsed() (int64, error) { return 0, ErrNoProcessFigure }

// ResidentFiles returns [ErrNoProcessFigure] on this OS.
func ResidentFiles() (int64, error) { return 0, ErrNoProcessFigure }
