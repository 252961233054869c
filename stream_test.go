package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStreamCallsCheckOrder: the stream-ordered and pool calls check in
// one order in every build, with or without -tags cuda: the argument first
// (ErrInvalidSize), then the device (ErrInvalidDevice for the zero Device,
// ErrNotSupported for a device that is not a CUDA GPU), counting nothing.
func TestStreamCallsCheckOrder(t *testing.T) {
	cpu := freshCPU(t)
	cat, err := cpu.Category("stream order")
	require.NoError(t, err)
	calls := []struct {
		name string
		call func(Device) error
		bad  bool // an argument out of range
	}{
		{"AllocAsync(0)", func(d Device) error { _, err := d.AllocAsync(0, DefaultStream); return err }, true},
		{"AllocAsync(-1)", func(d Device) error { _, err := d.AllocAsync(-1, DefaultStream); return err }, true},
		{"Pool().Trim(-1)", func(d Device) error { return d.Pool().Trim(-1) }, true},
		{"Pool().SetReleaseThreshold(-1)", func(d Device) error { return d.Pool().SetReleaseThreshold(-1) }, true},
		{"AllocAsync(8)", func(d Device) error { _, err := d.AllocAsync(8, DefaultStream); return err }, false},
		{"Pool().Trim(0)", func(d Device) error { return d.Pool().Trim(0) }, false},
		{"Pool().SetReleaseThreshold(0)", func(d Device) error { return d.Pool().SetReleaseThreshold(0) }, false},
		{"PoolStats", func(d Device) error { _, err := d.Pool().Stats(); return err }, false},
		{"PoolUsage", func(d Device) error { _, err := d.Pool().Usage(); return err }, false},
	}
	for _, dev := range []struct {
		name string
		d    Device
		want error // for a call whose argument is right
	}{{"zero Device", Device{}, ErrInvalidDevice}, {"cpu", cpu, ErrNotSupported}} {
		for _, c := range calls {
			t.Run(dev.name+"/"+c.name, func(t *testing.T) {
				want := dev.want
				if c.bad {
					want = ErrInvalidSize
				}
				assert.ErrorIs(t, c.call(dev.d), want)
			})
		}
	}
	_, err = cat.AllocAsync(0, DefaultStream)
	assert.ErrorIs(t, err, ErrInvalidSize, "through a category too")
	_, err = cat.AllocAsync(8, DefaultStream)
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.Equal(t, Stats{Device: cpu}, cpu.MemoryStats(), "nothing counted")
}
