//go:build cuda

package memtest

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdCUDABuffer allocates on d from a frame of its own.
//
//go:noinline
func holdCUDABuffer(t testing.TB, d memtrack.Device, size int64) *memtrack.Buffer {
	b, err := d.Alloc(size)
	require.NoError(t, err)
	return b
}

// TestVerifyNoneOnCUDA: a CUDA buffer the test leaves live is reported on
// its device, with its site (on the fake driver in CI).
func TestVerifyNoneOnCUDA(t *testing.T) {
	d, err := memtrack.CUDA(0)
	if err != nil {
		t.Skip(err)
	}
	f := newFakeTB(t, t.Name())
	VerifyNone(f, Devices(memtrack.CPU(), d))
	kept := holdCUDABuffer(t, d, 1<<20)
	f.end()
	require.Len(t, f.errors, 1)
	assert.Contains(t, f.errors[0], "memtest: 1 buffer (1048576 bytes) allocated during the test and not freed:\n\t1048576 bytes on cuda:0, buffer allocated at github.com/memtrack/memtrack/memtest.holdCUDABuffer")
	require.NoError(t, kept.Free())
	assert.Zero(t, d.MemoryAllocated())
}
