//go:build !rocm

package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestROCmNotBuilt: without -tags rocm, AMD GPUs answer with an error that
// names the tag, and every call on one fails so, counting nothing.
func TestROCmNotBuilt(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"ROCm", func() error { _, err := ROCm(0); return err }},
		{"ParseDevice", func() error { _, err := ParseDevice("rocm:0"); return err }},
		{"Alloc", func() error { _, err := Device{kind: KindROCm}.Alloc(8); return err }},
		{"AllocAsync", func() error { _, err := Device{kind: KindROCm}.AllocAsync(8, DefaultStream); return err }},
		{"MemGetInfo", func() error { _, _, err := Device{kind: KindROCm}.MemGetInfo(); return err }},
		{"Pool().Stats", func() error { _, err := Device{kind: KindROCm}.Pool().Stats(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			assert.ErrorIs(t, err, ErrBackendNotBuilt)
			assert.ErrorContains(t, err, "rebuild with go build -tags rocm")
		})
	}
	assert.Zero(t, Device{kind: KindROCm}.MemoryStats().FailedAllocs, "nothing counted")
	ds, err := Devices()
	assert.NotErrorIs(t, err, ErrBackendNotBuilt, "a backend the build lacks is no error of Devices")
	for _, d := range ds {
		assert.NotEqual(t, KindROCm, d.Kind())
	}
}
