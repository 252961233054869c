package memtrack

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TrackAddr counts as Track does, and UntrackAddr uncounts, with no handle.
func TestTrackAddrAccounts(t *testing.T) {
	d := freshCPU(t)
	before := d.MemoryStats()
	require.NoError(t, d.TrackAddr(1000, 0x7000))
	s := d.MemoryStats()
	assert.Equal(t, before.Tracked+1000, s.Tracked)
	assert.Equal(t, before.Buffers+1, s.Buffers)
	assert.Equal(t, before.Allocs+1, s.Allocs)

	tracked, err := KindCPU.UntrackAddr(0x7000, nil)
	assert.True(t, tracked)
	assert.NoError(t, err)
	s = d.MemoryStats()
	assert.Equal(t, before.Tracked, s.Tracked)
	assert.Equal(t, before.Frees+1, s.Frees)
	assert.Equal(t, before.Tracked+1000, s.PeakTracked)
}

// Bad input to TrackAddr and UntrackAddr moves no figure.
func TestTrackAddrBadInput(t *testing.T) {
	d := freshCPU(t)
	require.NoError(t, d.TrackAddr(64, 0x8000))
	h, err := d.Track(32, 0x9000)
	require.NoError(t, err)
	require.NoError(t, d.SetMemoryLimit(1<<20))
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"zero size", func() error { return d.TrackAddr(0, 0x100) }, ErrInvalidSize},
		{"negative size", func() error { return d.TrackAddr(-1, 0x100) }, ErrInvalidSize},
		{"address 0", func() error { return d.TrackAddr(8, 0) }, ErrInvalidAddress},
		{"an address counted by TrackAddr", func() error { return d.TrackAddr(8, 0x8000) }, ErrAlreadyTracked},
		{"an address tracked by Track", func() error { return d.TrackAddr(8, 0x9000) }, ErrAlreadyTracked},
		{"Track of an address counted by TrackAddr", func() error { _, err := d.Track(8, 0x8000); return err }, ErrAlreadyTracked},
		{"over the limit", func() error { return d.TrackAddr(2<<20, 0x100) }, ErrOutOfMemory},
		{"invalid device", func() error { return Device{kind: numKinds}.TrackAddr(8, 0x100) }, ErrInvalidDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := d.MemoryStats()
			err := tt.run()
			assert.ErrorIs(t, err, tt.want)
			after := d.MemoryStats()
			if errors.Is(tt.want, ErrOutOfMemory) {
				before.FailedAllocs++
			}
			assert.Equal(t, before, after)
		})
	}
	for _, p := range []uintptr{0, 0x100, 0xdead00} {
		tracked, err := KindCPU.UntrackAddr(p, func() error { t.Fatal("free called"); return nil })
		assert.False(t, tracked, "%#x", p)
		assert.NoError(t, err)
	}
	tracked, err := numKinds.UntrackAddr(0x8000, nil)
	assert.False(t, tracked)
	assert.NoError(t, err)
	assert.Equal(t, int64(96), d.MemoryAllocated(), "nothing tracked was lost")
	require.NoError(t, h.Release())
	tracked, err = KindCPU.UntrackAddr(0x8000, nil)
	assert.True(t, tracked)
	assert.NoError(t, err)
}

// A failing free leaves the count tracked; the next free ends it.
func TestUntrackAddrFreeFails(t *testing.T) {
	d := freshCPU(t)
	require.NoError(t, d.TrackAddr(512, 0xa000))
	before := d.MemoryStats()
	errFree := errors.New("free failed")
	tracked, err := KindCPU.UntrackAddr(0xa000, func() error {
		assert.Nil(t, KindCPU.TrackedAt(0xa000), "not tracked while free runs")
		return errFree
	})
	assert.True(t, tracked)
	assert.ErrorIs(t, err, errFree)
	assert.Equal(t, before, d.MemoryStats())
	calls := 0
	tracked, err = KindCPU.UntrackAddr(0xa000, func() error { calls++; return nil })
	assert.True(t, tracked)
	assert.NoError(t, err)
	assert.Equal(t, 1, calls)
	assert.Equal(t, before.Tracked-512, d.MemoryStats().Tracked)
	tracked, _ = KindCPU.UntrackAddr(0xa000, nil)
	assert.False(t, tracked, "released twice")
}

// TrackedAt makes a handle for a count of TrackAddr; the handle and
// UntrackAddr then release the same count once.
func TestTrackedAtOfTrackAddr(t *testing.T) {
	d := freshCPU(t)
	require.NoError(t, d.TrackAddr(256, 0xb000))
	h := KindCPU.TrackedAt(0xb000)
	require.NotNil(t, h)
	assert.Equal(t, d, h.Device())
	assert.Equal(t, int64(256), h.Size())
	assert.Equal(t, uintptr(0xb000), h.DevicePtr())
	assert.Same(t, h, KindCPU.TrackedAt(0xb000), "one handle")
	before := d.MemoryStats()
	tracked, err := KindCPU.UntrackAddr(0xb000, nil)
	assert.True(t, tracked)
	assert.NoError(t, err)
	assert.True(t, h.Released())
	assert.ErrorIs(t, h.Release(), ErrAlreadyReleased)
	assert.Equal(t, before.Tracked-256, d.MemoryStats().Tracked)
	assert.Nil(t, KindCPU.TrackedAt(0xb000))
}
