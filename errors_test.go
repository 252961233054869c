package memtrack

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/tracker"
)

// TestSentinelsShared: a case that both packages report has one sentinel,
// the same value in each.
func TestSentinelsShared(t *testing.T) {
	assert.Same(t, tracker.ErrInvalidSize, ErrInvalidSize)
	assert.Same(t, tracker.ErrLimitExceeded, ErrLimitExceeded)

	d := freshCPU(t)
	require.NoError(t, d.SetMemoryLimit(100))
	_, err := d.Alloc(200)
	assert.ErrorIs(t, err, ErrOutOfMemory)
	assert.ErrorIs(t, err, ErrLimitExceeded, "the limit refused it")
	assert.ErrorIs(t, err, tracker.ErrLimitExceeded)
	_, err = d.Alloc(-1)
	assert.ErrorIs(t, err, tracker.ErrInvalidSize)

	oom := &OutOfMemoryError{Device: d, Requested: 1, Capacity: 1}
	assert.NotErrorIs(t, oom, ErrLimitExceeded, "the device refused it, not the limit")
}

// TestOnePrefix: every message carries "memtrack: " once, however many of
// the package's errors it wraps.
func TestOnePrefix(t *testing.T) {
	d := freshCPU(t)
	require.NoError(t, d.SetMemoryLimit(1<<20))
	live, err := d.Track(64, 0x4000)
	require.NoError(t, err)
	released, err := d.Track(64, 0x8000)
	require.NoError(t, err)
	require.NoError(t, released.Release())
	defer live.Release()
	closed, err := d.OpenPeakScope()
	require.NoError(t, err)
	require.NoError(t, closed.Close())

	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"Alloc over the limit", func() error { _, err := d.Alloc(2 << 20); return err }, ErrLimitExceeded},
		{"Track over the limit", func() error { _, err := d.Track(2<<20, 0x1000); return err }, ErrLimitExceeded},
		{"TrackAddr over the limit", func() error { return d.TrackAddr(2<<20, 0x1000) }, ErrLimitExceeded},
		{"Measure of a failing function", func() error {
			_, err := d.Measure(func() error { _, err := d.Alloc(2 << 20); return err })
			return err
		}, ErrOutOfMemory},
		{"AllocAsync on the CPU", func() error { _, err := d.AllocAsync(8, DefaultStream); return err }, ErrNotSupported},
		{"TrackAddr at address 0", func() error { return d.TrackAddr(8, 0) }, ErrInvalidAddress},
		{"second Release", released.Release, ErrAlreadyReleased},
		{"nil Release", (*Tracked)(nil).Release, ErrNilTracked},
		{"nil Free", (*Buffer)(nil).Free, ErrNilBuffer},
		{"negative site rate", func() error { return d.Sites().SetRate(-1) }, ErrInvalidArgument},
		{"zero Device", func() error { _, err := Device{}.Alloc(8); return err }, ErrInvalidDevice},
		{"second PeakScope.Close", closed.Close, ErrScopeClosed},
		// As the CUDA backend writes a sticky error (resultError), which
		// TestCUDAChildDeviceLost checks on the driver.
		{"BackendError of a lost device", func() error {
			return &BackendError{Device: d, Op: "free", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS",
				Err: fmt.Errorf("%w: an illegal memory access was encountered", ErrDeviceLost)}
		}, ErrDeviceLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), err.Error())
			assert.True(t, strings.HasPrefix(err.Error(), "memtrack: "), err.Error())
		})
	}
}

// TestWrapfOnePrefix: wrapf keeps the chain and drops the inner prefix.
func TestWrapfOnePrefix(t *testing.T) {
	inner := errors.New("memtrack: inner")
	err := wrapf(wrapf(inner, "middle %d", 1), "outer")
	assert.Equal(t, "memtrack: outer: middle 1: inner", err.Error())
	assert.ErrorIs(t, err, inner)
	assert.Equal(t, "memtrack: outer: plain", wrapf(errors.New("plain"), "outer").Error())
}
