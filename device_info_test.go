package memtrack

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// infoFake is a fakeBackend that names its devices, or fails to.
type infoFake struct {
	*fakeBackend
	err   error
	calls int
}

func (f *infoFake) info(ordinal int) (name, uuid string, err error) {
	f.calls++
	if f.err != nil {
		return "", "", f.err
	}
	return "Fake GPU", []string{"GPU-0", "GPU-1"}[ordinal], nil
}

func TestDeviceInfo(t *testing.T) {
	driverGone := errors.New("driver gone")
	tests := []struct {
		name    string
		b       backend
		ordinal int
		want    DeviceInfo
		wantErr error
	}{
		{"named", &infoFake{fakeBackend: newFakeBackend(2, 1<<20)}, 1,
			DeviceInfo{Device: Device{kind: KindCUDA, ordinal: 1}, Name: "Fake GPU", UUID: "GPU-1"}, nil},
		{"backend without info", newFakeBackend(2, 1<<20), 0,
			DeviceInfo{Device: Device{kind: KindCUDA}}, nil},
		{"invalid ordinal", &infoFake{fakeBackend: newFakeBackend(2, 1<<20)}, 2,
			DeviceInfo{Device: Device{kind: KindCUDA, ordinal: 2}}, ErrInvalidOrdinal},
		{"driver error", &infoFake{fakeBackend: newFakeBackend(2, 1<<20), err: &BackendError{Op: "info", Err: driverGone}}, 0,
			DeviceInfo{Device: Device{kind: KindCUDA}}, driverGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			useBackend(t, KindCUDA, tt.b)
			d := Device{kind: KindCUDA, ordinal: tt.ordinal}
			got, err := d.Info()
			assert.Equal(t, tt.want, got)
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			var be *BackendError
			if errors.As(err, &be) {
				assert.Equal(t, d, be.Device, "the error names the device")
				assert.Contains(t, err.Error(), "cuda:0: info failed")
			}
			if f, ok := tt.b.(*infoFake); ok && errors.Is(err, ErrInvalidOrdinal) {
				assert.Zero(t, f.calls, "the backend was asked about a device that does not exist")
			}
		})
	}
}

func TestDeviceInfoInvalidKind(t *testing.T) {
	d := Device{kind: numKinds}
	info, err := d.Info()
	require.ErrorIs(t, err, ErrInvalidDevice)
	assert.Equal(t, DeviceInfo{Device: d}, info)
}

// TestCPUInfoNoIdentifier: the CPU has a name where the OS gives one, and
// never a UUID.
func TestCPUInfoNoIdentifier(t *testing.T) {
	info, err := CPU().Info()
	require.NoError(t, err)
	assert.Equal(t, CPU(), info.Device)
	assert.Empty(t, info.UUID)
}
