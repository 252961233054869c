package hostmem

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestResidentCount: only the lowest bit of the kernel's answer is
// residency, counted eight bytes at a time and then one by one.
func TestResidentCount(t *testing.T) {
	v := make([]byte, 21)
	for _, i := range []int{0, 7, 8, 15, 20} {
		v[i] = 1
	}
	v[3] = 0xfe // other bits are not residency
	assert.Equal(t, 5, resident(v))
}
