package memtrack

import (
	"os"
	"os/exec"
	"reflect"
	"testing"
	"unsafe"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDevicePtrCPU(t *testing.T) {
	for _, size := range []int64{1, 4 << 10, mmapThreshold, 4 << 20} {
		b, err := CPU().Alloc(size)
		require.NoError(t, err)
		assert.Zero(t, b.DevicePtr(), "CPU buffer of %d bytes", size)
		assert.Len(t, b.Bytes(), int(size))
		require.NoError(t, b.Free())
		assert.Zero(t, b.DevicePtr(), "freed")
	}
	var nilBuf *Buffer
	assert.Zero(t, nilBuf.DevicePtr())
}

func TestBufferReserved(t *testing.T) {
	for _, tc := range []struct {
		name string
		buf  *Buffer
		want int64
	}{
		{"nil buffer", nil, 0},
		{"backend reports no rounding", &Buffer{allocation: allocation{size: 100}}, 100},
		{"backend rounds up", &Buffer{allocation: allocation{size: 100, mem: memory{reserved: 16 << 10}}}, 16 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.buf.RoundedSize())
		})
	}
}

func TestBufferReservedCPU(t *testing.T) {
	for _, size := range []int64{1, 4097, mmapThreshold + 1} {
		b, err := CPU().Alloc(size)
		require.NoError(t, err)
		assert.Equal(t, size, b.RoundedSize(), "the CPU backend reports no rounding")
		require.NoError(t, b.Free())
		assert.Equal(t, size, b.RoundedSize(), "a freed buffer keeps its figures")
	}
}

// TestZeroBufferFree frees Buffers that Alloc did not make: a zero Buffer,
// a zero Buffer of each kind, and one with only a size. Each gets
// ErrInvalidBuffer, no panic, and no figure of any device moves.
func TestZeroBufferFree(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<20)
	held, err := ds[0].Alloc(100)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		buf  *Buffer
	}{
		{"zero", new(Buffer)},
		{"zero, from a composite literal", &Buffer{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cpuBefore, cudaBefore := CPU().MemoryStats(), ds[0].MemoryStats()
			used, live, _ := f.state(0)
			var err error
			assert.NotPanics(t, func() { err = tc.buf.Free() })
			assert.ErrorIs(t, err, ErrInvalidBuffer)
			assert.Contains(t, err.Error(), "memtrack: ")
			assert.Equal(t, cpuBefore, CPU().MemoryStats())
			assert.Equal(t, cudaBefore, ds[0].MemoryStats())
			usedAfter, liveAfter, _ := f.state(0)
			assert.Equal(t, used, usedAfter)
			assert.Equal(t, live, liveAfter)
			assert.False(t, tc.buf.Freed())
			assert.Nil(t, tc.buf.Bytes())
			assert.Zero(t, tc.buf.DevicePtr())
		})
	}
	require.NoError(t, held.Free())
}

// copyBuffer copies *b as `c := *b` would, through reflect so that go vet
// does not stop this test file for the copy it is about.
func copyBuffer(b *Buffer) *Buffer {
	c := new(Buffer)
	reflect.ValueOf(c).Elem().Set(reflect.ValueOf(b).Elem())
	return c
}

// TestCopiedBufferFree frees a copy of a buffer, before and after the
// original: the copy is refused with ErrInvalidBuffer and nothing moves, so
// the memory is released and uncounted exactly once.
func TestCopiedBufferFree(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	held, err := d.Alloc(1000)
	require.NoError(t, err)

	b, err := d.Alloc(100)
	require.NoError(t, err)
	early := copyBuffer(b)
	assert.ErrorIs(t, early.Free(), ErrInvalidBuffer, "a copy freed before the original")
	assert.Nil(t, early.Bytes())
	assert.Zero(t, early.DevicePtr())
	assert.False(t, b.Freed(), "freeing the copy freed the original")

	late := copyBuffer(b)
	require.NoError(t, b.Free())
	before := d.MemoryStats()
	used, live, _ := f.state(0)
	assert.ErrorIs(t, late.Free(), ErrInvalidBuffer, "a copy freed after the original")
	assert.Equal(t, before, d.MemoryStats())
	assert.Equal(t, int64(1000), d.MemoryAllocated(), "the copy's Free uncounted the original again")
	usedAfter, liveAfter, _ := f.state(0)
	assert.Equal(t, used, usedAfter, "the copy's Free released the memory again")
	assert.Equal(t, live, liveAfter)
	require.NoError(t, held.Free())
}

// TestBufferCopyIsReportedByVet runs go vet on testdata/vetcopy, which
// copies a Buffer, and expects the copylocks check to report the copy.
func TestBufferCopyIsReportedByVet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	if _, err := os.Stat("testdata/vetcopy/main.go"); err != nil {
		t.Skipf("not run from the source tree: %v", err) // a test binary copied elsewhere
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "vet", "./testdata/vetcopy").CombinedOutput()
	require.Error(t, err, "go vet accepted a copy of a Buffer:\n%s", out)
	assert.Contains(t, string(out), "main.go:12:7: assignment copies lock value to c: github.com/memtrack/memtrack.Buffer")
}

// TestBufferFreeReportsRecordError frees a buffer whose record no longer
// holds it (the test uncounts it behind the buffer's back, as no program
// can): Free reports the record's refusal instead of dropping it, and the
// memory is released.
func TestBufferFreeReportsRecordError(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<20)
	b, err := ds[0].Alloc(100)
	require.NoError(t, err)
	rec := tableOf(KindCUDA).records.Lookup(0)
	require.NotNil(t, rec)
	require.NoError(t, rec.Free(100)) // the record forgets the buffer

	err = b.Free()
	assert.ErrorIs(t, err, tracker.ErrFreeExceedsTracked)
	assert.Contains(t, err.Error(), "memory was released, but its record refused to uncount it")
	assert.True(t, b.Freed(), "the memory was released")
	used, live, _ := f.state(0)
	assert.Zero(t, used, "the backend released the memory")
	assert.Zero(t, live)
}

// TestBufferSize keeps a Buffer within one 64-byte allocation on 64-bit
// platforms, the size class a Device.Alloc pays for besides the memory.
func TestBufferSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("64-bit platforms only")
	}
	var b Buffer
	assert.LessOrEqual(t, unsafe.Sizeof(b), uintptr(64))
}
