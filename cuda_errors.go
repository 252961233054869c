//go:build cuda

package memtrack

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/mumax/3/cuda/cu"
)

// guard runs f, a sequence of cu calls, and turns a panic into an error: a
// cu.Result (every driver error, which cu panics with) into the error of
// resultError, and any other panic into a *BackendError, so that none
// escapes the package.
func guard(op string, f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = cudaError(op, r)
		}
	}()
	f()
	return nil
}

func cudaError(op string, r any) error {
	res, ok := r.(cu.Result)
	if !ok {
		return &BackendError{Op: op, Err: fmt.Errorf("panic in the CUDA bindings: %v", r)}
	}
	return resultError(op, "", res)
}

// resultError is the error of a failed driver call during op: an
// *OutOfMemoryError for CUDA_ERROR_OUT_OF_MEMORY and a *BackendError for
// the others, which matches [ErrDeviceLost] if the error is sticky. stage,
// if not "", says which step of op failed.
func resultError(op, stage string, res cu.Result) error {
	name, text := errorName(res)
	if stage != "" {
		text = stage + ": " + text
	}
	if res == cu.ERROR_OUT_OF_MEMORY {
		reason := "the CUDA driver refused it: " + name
		if stage != "" {
			reason = stage + ": " + reason
		}
		return &OutOfMemoryError{Code: int(res), Reason: reason}
	}
	e := &BackendError{Op: op, Code: int(res), Name: name, Err: errors.New(text)}
	if sticky(res) {
		e.Err = fmt.Errorf("%w: %s (the CUDA context is unusable until the process restarts)", ErrDeviceLost, text)
	}
	return e
}

// errorName returns the name and description of res: the driver's, which
// knows every code of its version, or else cu's table (of about CUDA 5),
// or else "Unknown CUresult: N".
func errorName(res cu.Result) (name, text string) {
	name, text = driverErrorName(res)
	if name == "" && res == 34 {
		// No driver is there to name it: the link stub answers every
		// call, cuGetErrorName too, with this code.
		name = "CUDA_ERROR_STUB_LIBRARY"
	}
	if name == "" {
		name = res.String() // cu's table; "Unknown CUresult: N" past it
	}
	if text == "" {
		text = "CUresult " + strconv.Itoa(int(res))
	}
	return name, text
}

// withDevice sets the device of a *BackendError, for errors that no device
// operation completes (see fillError).
func withDevice(err error, d Device) error {
	if e, ok := err.(*BackendError); ok {
		e.Device = d
	}
	return err
}
