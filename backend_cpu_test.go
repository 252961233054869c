package memtrack

import (
	"math"
	"testing"
	"time"

	"github.com/memtrack/memtrack/internal/hostmem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCPUBuffers(t *testing.T) {
	cpu := CPU()
	base := cpu.MemoryStats()
	sizes := []int64{1, 16, 17, 32, 33, 64, 65, 128, 129, inlineMax, inlineMax + 1, 4095, mmapThreshold - 1, mmapThreshold, 3*mmapThreshold + 5}
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

// TestCPURefusesPastCapacity fills a fresh CPU device to within room bytes
// of the real capacity (the machine's memory or its cgroup's limit, read
// as the backend reads it) with a mapped buffer, never written, and a
// count of Device.Track, which holds no memory: each request is checked
// against what the device already holds, not against the capacity alone,
// for large (mapped) and small (Go heap) buffers; a refusal is an
// OutOfMemoryError that names the capacity and moves nothing but
// FailedAllocs, and a request of exactly the room left succeeds.
func TestCPURefusesPastCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		room int64
	}{
		{"mapped", 2 << 20},
		{"Go heap", 512 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			capacity, err := hostCapacity()
			require.NoError(t, err, "the capacity the backend reads")
			cpu := freshCPU(t)
			mapped, err := cpu.Alloc(mmapThreshold)
			require.NoError(t, err)
			defer mapped.Free()
			held := capacity - tc.room
			rest, err := cpu.Track(held-mmapThreshold, 0)
			require.NoError(t, err)
			defer rest.Release()

			for _, size := range []int64{tc.room + 1, tc.room + 4096, 2 * tc.room} {
				before := cpu.MemoryStats()
				b, err := cpu.Alloc(size)
				assert.True(t, b == nil, "a buffer came with the error")
				var oom *OutOfMemoryError
				require.ErrorAs(t, err, &oom, "%d bytes beside %d on a machine of %d", size, held, capacity)
				assert.Equal(t, OutOfMemoryError{Device: cpu, Requested: size, Tracked: held, Capacity: capacity, Reason: oom.Reason,
					PeakTracked: held, Buffers: 2, Total: oom.Total, Free: oom.Free,
					NotResident: mmapThreshold, Untracked: max(max(oom.Total-oom.Free, 0)+mmapThreshold-held, 0)}, *oom) // the mapped buffer was never written
				assert.Equal(t, capacity, oom.Total, "the report reads the device's figures")
				assert.Contains(t, oom.Reason, "machine or its cgroup")
				before.FailedAllocs++
				assert.Equal(t, before, cpu.MemoryStats())
			}
			b, err := cpu.Alloc(tc.room)
			require.NoError(t, err, "exactly the capacity")
			require.NoError(t, b.Free())
		})
	}
}

// TestCPUAllocReadsStaleCapacity runs the backend's alloc, on the real
// clock and machine, over a capacity whose figure the test read first (at
// a time it chose, from a figure it chose): a figure older than
// hostmem.CapacityValidity is read again (the machine's, which has room for
// the request) by a large request and by a small one it would refuse; one
// within it (read "in an hour") refuses them.
func TestCPUAllocReadsStaleCapacity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		readAt time.Duration // when the figure was read, from now
		figure int64
		size   int64
		want   int64 // the capacity that refuses the request; 0 where it succeeds
	}{
		{"large, stale", -hostmem.CapacityValidity, 3 << 20, 4 << 20, 0},
		{"large, within validity", time.Hour, 3 << 20, 4 << 20, 3 << 20},
		{"small, stale", -hostmem.CapacityValidity, 256 << 10, 512 << 10, 0},
		{"small, within validity", time.Hour, 256 << 10, 512 << 10, 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := new(cpuBackend)
			require.Equal(t, tc.figure, c.capacity.Get(time.Now().Add(tc.readAt), func() (int64, error) { return tc.figure, nil }))
			var m memory
			err := c.alloc(0, tc.size, &m)
			if tc.want == 0 {
				require.NoError(t, err, "the machine's capacity was not read again")
				require.NotNil(t, m.hostBytes(tc.size))
				require.NoError(t, c.free(0, tc.size, &m))
				return
			}
			var ce *callError
			require.ErrorAs(t, err, &ce, "the seam's error")
			assert.True(t, ce.oom, "out of memory")
			assert.Equal(t, tc.want, ce.capacity, "the figure within its validity")
			assert.Nil(t, m.host)
		})
	}
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
