package tracker

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidSize is returned for a size that is zero or negative, or a
	// limit that is negative. Package memtrack returns the same value as its
	// own ErrInvalidSize.
	ErrInvalidSize = errors.New("memtrack: invalid size")

	// ErrFreeExceedsTracked is returned by a free of more than is held. Nothing
	// is freed: the counters keep their values.
	ErrFreeExceedsTracked = errors.New("memtrack: free exceeds the tracked figure")

	// ErrCapacity is returned when an allocation would take a counter past
	// what it can represent ([MaxCount] for a [Counter], [MaxBytes] bytes or
	// [MaxBuffers] live buffers for a [Record]).
	ErrCapacity = errors.New("memtrack: counter capacity exceeded")

	// ErrLimitExceeded is returned when an allocation would take the tracked
	// figure past a limit; the error is a [*LimitError] with the details.
	// Package memtrack returns the same value as its own ErrLimitExceeded.
	ErrLimitExceeded = errors.New("memtrack: memory limit exceeded")
)

// LimitError reports an allocation refused by a limit. It matches
// [ErrLimitExceeded] with [errors.Is].
type LimitError struct {
	Requested int64 // the size asked for
	Tracked   int64 // the current figure when the request was refused
	Limit     int64 // the limit in force
}

// Error describes the refused request.
func (e *LimitError) Error() string {
	return fmt.Sprintf("memtrack: memory limit exceeded: %d requested, %d tracked, limit %d", e.Requested, e.Tracked, e.Limit)
}

// Is reports whether target is [ErrLimitExceeded].
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

func invalidSize(n int64) error {
	return fmt.Errorf("%w: got %d", ErrInvalidSize, n)
}

func freeExceeds(n, tracked int64) error {
	return fmt.Errorf("%w: freeing %d, tracking %d", ErrFreeExceedsTracked, n, tracked)
}
