//go:build cuda

package memtrack

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCUDAOutOfMemoryReport: on the driver, a refusal of cuMemAlloc and
// one of AllocAsync by the memory limit both carry the driver's figures
// and run the device's observer once each.
func TestCUDAOutOfMemoryReport(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	var seen []*OutOfMemoryError
	o, err := d.OnOutOfMemory(func(e *OutOfMemoryError) { seen = append(seen, e) })
	require.NoError(t, err)
	defer o.Remove()
	_, total, err := d.MemGetInfo()
	require.NoError(t, err)

	_, err = d.Alloc(total + 1<<30)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.Len(t, seen, 1)
	e := seen[0]
	assert.Equal(t, total, e.Total)
	assert.Positive(t, e.Free)
	assert.Equal(t, max(e.Total-e.Free, 0)-e.Tracked, e.Untracked)
	assert.NoError(t, e.MemInfoErr)
	report := fmt.Sprintf("%+v", err)
	assert.Contains(t, report, "CUDA_ERROR_OUT_OF_MEMORY")
	assert.Contains(t, report, "device:         ")

	if _, err := d.Pool().Stats(); err != nil {
		t.Skipf("no memory pool for AllocAsync: %v", err)
	}
	require.NoError(t, d.SetMemoryLimit(d.MemoryAllocated()+1))
	defer d.SetMemoryLimit(0)
	s := newStream(t, d)
	_, err = d.AllocAsync(4096, s)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.Len(t, seen, 2)
	assert.Equal(t, "memory limit", seen[1].Reason)
	assert.Equal(t, total, seen[1].Total)
}
