//go:build !metal

package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMetalNotBuilt(t *testing.T) {
	_, err := Metal(0)
	assert.ErrorIs(t, err, ErrBackendNotBuilt)
	assert.Contains(t, err.Error(), "-tags metal")
	_, err = ParseDevice("metal:0")
	assert.ErrorIs(t, err, ErrBackendNotBuilt)
	ds, err := Devices()
	assert.NotErrorIs(t, err, ErrBackendNotBuilt, "a backend the build lacks is no error of Devices")
	for _, d := range ds {
		assert.NotEqual(t, KindMetal, d.Kind())
	}
}
