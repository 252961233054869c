package memtrack

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCPUBuffers(t *testing.T) {
	cpu := CPU()
	base := cpu.MemoryStats()
	sizes := []int64{1, 16, 17, 32, 33, 64, 65, 128, 129, cpuInlineMax, cpuInlineMax + 1, 4095, mmapThreshold - 1, mmapThreshold, 3*mmapThreshold + 5}
	for _, size := range sizes {
		b, err := cpu.Alloc(size)
		require.NoError(t, err, "size %d", size)
		p := b.Bytes()
		require.Len(t, p, int(size))
		require.Equal(t, int(size), cap(p), "the view ends where the buffer does")
		for i := range p {
			if p[i] != 0 {
				t.Fatalf("size %d: byte %d is %d, want zeroed memory", size, i, p[i])
			}
		}
		p[0], p[len(p)-1] = 1, 2 // writable
		assert.Equal(t, base.Tracked+size, cpu.MemoryAllocated())
		require.NoError(t, b.Free())
		assert.Nil(t, b.Bytes(), "no view once freed")
	}
	s := cpu.MemoryStats()
	assert.Equal(t, base.Tracked, s.Tracked)
	assert.Equal(t, base.Allocs+int64(len(sizes)), s.Allocs)
	assert.Equal(t, base.Frees+int64(len(sizes)), s.Frees)
}

// TestCPUHugeRequests asks for more than any machine has: refused with
// ErrOutOfMemory, never a crash, counted as failures and nothing else.
func TestCPUHugeRequests(t *testing.T) {
	cpu := CPU()
	_, total, err := cpu.MemGetInfo()
	require.NoError(t, err)
	for _, size := range []int64{total + 1, 1 << 50, math.MaxInt64} {
		before := cpu.MemoryStats()
		b, err := cpu.Alloc(size)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, ErrOutOfMemory, "size %d", size)
		var oom *OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		assert.Equal(t, size, oom.Requested)
		assert.Equal(t, cpu, oom.Device)
		before.FailedAllocs++
		assert.Equal(t, before, cpu.MemoryStats())
	}
}

func TestCPUMemGetInfo(t *testing.T) {
	free, total, err := CPU().MemGetInfo()
	require.NoError(t, err)
	assert.Positive(t, total)
	assert.Positive(t, free)
	assert.LessOrEqual(t, free, total)
}

// fakeClock is a clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// cpuWithCapacity makes a CPU backend whose machine (or cgroup) gives at
// most *capacity bytes, read through the backend's cache on clk, the CPU
// backend of the test.
func cpuWithCapacity(t *testing.T, capacity *int64, clk *fakeClock) {
	t.Helper()
	c := newCPUBackendOver(func() (int64, error) { return *capacity, nil }, clk.now)
	useBackend(t, KindCPU, c)
}

// TestCPURefusesPastCapacity holds buffers on a CPU whose capacity is 3 MiB:
// each request is checked against what the device already holds, not
// against the capacity alone, for large (mapped) and small (Go heap)
// buffers, and a refusal is an OutOfMemoryError that names the capacity
// and moves nothing but FailedAllocs.
func TestCPURefusesPastCapacity(t *testing.T) {
	capacity := int64(3 << 20)
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	cpuWithCapacity(t, &capacity, clk)
	cpu := CPU()

	first, err := cpu.Alloc(2 << 20)
	require.NoError(t, err)
	defer first.Free()
	for _, size := range []int64{2 << 20, 1<<20 + 1, 1<<20 + 4096} {
		before := cpu.MemoryStats()
		b, err := cpu.Alloc(size)
		assert.True(t, b == nil, "a buffer came with the error")
		var oom *OutOfMemoryError
		require.ErrorAs(t, err, &oom, "%d bytes beside 2 MiB on a 3 MiB machine", size)
		assert.Equal(t, OutOfMemoryError{Device: cpu, Requested: size, Tracked: 2 << 20, Capacity: 3 << 20, Reason: oom.Reason,
			PeakTracked: 2 << 20, Buffers: 1, Total: oom.Total, Free: oom.Free,
			NotResident: 2 << 20, Untracked: oom.Total - oom.Free + 2<<20 - 2<<20}, *oom) // the first buffer was never written
		assert.Positive(t, oom.Total, "the report reads the device's figures")
		assert.Contains(t, oom.Reason, "machine or its cgroup")
		before.FailedAllocs++
		assert.Equal(t, before, cpu.MemoryStats())
	}
	// Small buffers come from the Go heap, and are checked too.
	small, err := cpu.Alloc(512 << 10)
	require.NoError(t, err)
	_, err = cpu.Alloc(512<<10 + 1)
	assert.ErrorIs(t, err, ErrOutOfMemory, "a small buffer past the capacity")
	require.NoError(t, small.Free())
	b, err := cpu.Alloc(1 << 20)
	require.NoError(t, err, "exactly the capacity")
	require.NoError(t, b.Free())
}

// TestCPUCapacityChanges lowers and raises the capacity (as a cgroup's
// memory.max can be) and checks that the backend follows once its cached
// figure is older than cpuCapacityValidity.
func TestCPUCapacityChanges(t *testing.T) {
	capacity := int64(8 << 20)
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	cpuWithCapacity(t, &capacity, clk)
	cpu := CPU()

	capacity = 3 << 20 // lowered
	clk.t = clk.t.Add(cpuCapacityValidity + time.Millisecond)
	_, err := cpu.Alloc(4 << 20)
	assert.ErrorIs(t, err, ErrOutOfMemory, "the lowered capacity was not read")

	capacity = 16 << 20 // raised
	clk.t = clk.t.Add(cpuCapacityValidity + time.Millisecond)
	b, err := cpu.Alloc(12 << 20)
	require.NoError(t, err, "the raised capacity was not read")
	require.NoError(t, b.Free())
	// The figure read now (16 MiB) is kept for cpuCapacityValidity: a small
	// request that it would refuse re-reads it first, once it is stale.
	big, err := cpu.Alloc(16<<20 - 256<<10)
	require.NoError(t, err)
	defer big.Free()
	capacity = 32 << 20
	clk.t = clk.t.Add(cpuCapacityValidity + time.Millisecond)
	s, err := cpu.Alloc(512 << 10)
	require.NoError(t, err, "a small request refused on a stale figure")
	require.NoError(t, s.Free())
}

// TestCPUThreeQuartersTwice asks the real machine for three quarters of its
// memory (or its cgroup's) twice: mapped and untouched, the first costs
// nothing, and the second must be refused because both together pass what
// the machine can give.
func TestCPUThreeQuartersTwice(t *testing.T) {
	cpu := CPU()
	_, total, err := cpu.MemGetInfo()
	require.NoError(t, err)
	size := total / 4 * 3
	first, err := cpu.Alloc(size)
	require.NoError(t, err, "three quarters of %d bytes", total)
	defer first.Free()
	second, err := cpu.Alloc(size)
	if second != nil {
		second.Free()
	}
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom, "two buffers of three quarters of the machine's %d bytes", total)
	assert.Equal(t, total, oom.Capacity)
	assert.GreaterOrEqual(t, oom.Tracked, size)
}
