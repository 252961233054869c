//go:build !cuda

package memtrack

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStreamsWithoutCUDA: without -tags cuda, the stream-ordered calls keep
// the CUDA build's contract. The CPU never supports them (ErrNotSupported,
// with no advice to rebuild), the zero Device is no device, and only a CUDA
// device would need the tag.
func TestStreamsWithoutCUDA(t *testing.T) {
	d := freshCPU(t)
	for _, tc := range []struct {
		name string
		dev  Device
		want error
	}{
		{"cpu", d, ErrNotSupported},
		{"metal", Device{kind: KindMetal}, ErrNotSupported},
		{"zero Device", Device{}, ErrInvalidDevice},
		{"cuda", Device{kind: KindCUDA}, ErrBackendNotBuilt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.dev.AllocAsync(8, DefaultStream)
			assert.Nil(t, b)
			require.ErrorIs(t, err, tc.want)
			if tc.want == ErrNotSupported {
				assert.NotErrorIs(t, err, ErrBackendNotBuilt)
				assert.NotContains(t, err.Error(), "-tags", "a rebuild would not help")
			}
			for _, err := range []error{err, func() error { _, err := tc.dev.Pool().Stats(); return err }(),
				func() error { _, err := tc.dev.Pool().Usage(); return err }(), tc.dev.Pool().Trim(0), tc.dev.Pool().SetReleaseThreshold(0)} {
				assert.ErrorIs(t, err, tc.want)
				assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), err.Error())
			}
		})
	}
	assert.Zero(t, d.MemoryStats().FailedAllocs, "nothing counted")

	b, err := d.Alloc(8)
	require.NoError(t, err)
	assert.ErrorIs(t, b.FreeAsync(DefaultStream), ErrInvalidArgument, "a buffer of Alloc is freed with Free")
	require.NoError(t, b.Free())
	assert.ErrorIs(t, (*Buffer)(nil).FreeAsync(DefaultStream), ErrNilBuffer)
}
