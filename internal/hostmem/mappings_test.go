package hostmem

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMappingsNotResident: a mapping's bytes are not resident until its
// pages are written, counted exactly to the mapping's last byte; a mapping
// unmapped leaves the set.
func TestMappingsNotResident(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("residency is read on Linux only")
	}
	page := os.Getpagesize()
	var ms Mappings
	n, err := ms.NotResident()
	require.NoError(t, err)
	assert.Zero(t, n, "empty")
	size := int64(100*page + 123) // a partial last page
	b, err := ms.Map(size)
	require.NoError(t, err)
	c, err := ms.Map(int64(3 * page))
	require.NoError(t, err)
	n, err = ms.NotResident()
	require.NoError(t, err)
	assert.Equal(t, size+int64(3*page), n, "nothing written")
	for _, i := range []int{0, 9 * page, 17*page + 5} {
		b[i] = 1
	}
	n, err = ms.NotResident()
	require.NoError(t, err)
	assert.Equal(t, size+int64(3*page)-int64(3*page), n, "three pages written")
	b[len(b)-1] = 1 // the partial last page
	n, err = ms.NotResident()
	require.NoError(t, err)
	assert.Equal(t, size-int64(3*page)-123+int64(3*page), n, "and the last, of which 123 bytes are the mapping's")
	require.NoError(t, ms.Unmap(c))
	n, err = ms.NotResident()
	require.NoError(t, err)
	assert.Equal(t, size-int64(3*page)-123, n, "the unmapped one is gone")
	require.NoError(t, ms.Unmap(b))
	n, err = ms.NotResident()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestResident: the pages of a mapping are resident from their first
// write, and Resident counts them.
func TestResident(t *testing.T) {
	if !residencyKnown {
		_, err := Resident(make([]byte, 1))
		assert.ErrorIs(t, err, ErrNoResidency)
		return
	}
	var ms Mappings
	page := os.Getpagesize()
	b, err := ms.Map(int64(8 * page))
	require.NoError(t, err)
	defer func() { require.NoError(t, ms.Unmap(b)) }()
	n, err := Resident(b)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing written yet")
	b[0], b[3*page], b[3*page+1] = 1, 1, 1
	n, err = Resident(b)
	require.NoError(t, err)
	assert.Equal(t, int64(2*page), n)
	n, err = Resident(nil)
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestMappingsAdd: memory mapped elsewhere and added counts in
// NotResident as a mapping of Map does, until it is removed; Remove
// unmaps nothing.
func TestMappingsAdd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("residency is read on Linux only")
	}
	page := os.Getpagesize()
	b, err := Map(int64(8 * page)) // mapped outside the set
	require.NoError(t, err)
	defer func() { require.NoError(t, Unmap(b)) }()
	var ms Mappings
	ms.Add(nil) // nothing to add
	ms.Add(b)
	n, err := ms.NotResident()
	require.NoError(t, err)
	assert.Equal(t, int64(8*page), n, "nothing written")
	b[0], b[5*page] = 1, 1
	n, err = ms.NotResident()
	require.NoError(t, err)
	assert.Equal(t, int64(6*page), n, "two pages written")
	ms.Remove(b)
	n, err = ms.NotResident()
	require.NoError(t, err)
	assert.Zero(t, n, "removed")
	b[7*page] = 1 // still mapped
	ms.Remove(nil)
}
