package memtrack

import (
	"errors"
	"math"
	"runtime/metrics"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The profile tests use the CPU and expect no other test to allocate on it
// at the same time (none runs in parallel).

func mustAlloc(t *testing.T, d Device, n int64) *Buffer {
	t.Helper()
	b, err := d.Alloc(n)
	require.NoError(t, err)
	return b
}

func TestMeasure(t *testing.T) {
	cpu := CPU()
	weights := mustAlloc(t, cpu, 8<<10)
	defer weights.Free()
	base := cpu.MemoryAllocated()

	var kept *Buffer
	p, err := cpu.Measure(func() error {
		a := mustAlloc(t, cpu, 2<<20) // mapped from the OS
		b := mustAlloc(t, cpu, 3<<10)
		kept = mustAlloc(t, cpu, 5<<10)
		require.NoError(t, a.Free())
		require.NoError(t, b.Free())
		return nil
	})
	require.NoError(t, err)
	defer kept.Free()

	assert.Equal(t, cpu, p.Device)
	assert.Equal(t, base, p.BaselineTracked)
	assert.Equal(t, base+2<<20+8<<10, p.PeakTracked)
	assert.Equal(t, int64(2<<20+8<<10), p.TrackedPeakIncrease)
	assert.Equal(t, base+5<<10, p.EndTracked)
	assert.Equal(t, cpu.MaxMemoryAllocated(), p.PeakTracked, "the profile is the device's peak since its reset")

	// The reported figures come from the machine; only their relations are exact.
	assert.Positive(t, p.Total)
	assert.Positive(t, p.BaselineUsed)
	assert.LessOrEqual(t, p.BaselineUsed, p.Total)
	assert.LessOrEqual(t, p.EndUsed, p.Total)
	assert.Equal(t, p.EndUsed-p.BaselineUsed, p.UsedIncrease)
	assert.Equal(t, p.UsedIncrease-(p.EndTracked-p.BaselineTracked), p.Untracked)
}

// TestProfileConcurrentAllocations lets another goroutine allocate while the
// profiled function holds its peak: the profile is the device's, so its
// buffer is in the peak.
func TestMeasureConcurrentAllocations(t *testing.T) {
	cpu := CPU()
	start, allocated, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-start
		b, err := cpu.Alloc(7 << 10)
		if !assert.NoError(t, err) {
			close(allocated)
			return
		}
		close(allocated)
		<-release
		assert.NoError(t, b.Free())
	}()

	p, err := cpu.Measure(func() error {
		a := mustAlloc(t, cpu, 4<<10)
		close(start)
		<-allocated // the other goroutine holds its buffer now
		require.NoError(t, a.Free())
		close(release)
		<-done
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, int64(4<<10+7<<10), p.TrackedPeakIncrease)
	assert.Equal(t, p.BaselineTracked, p.EndTracked)
}

// TestProfileOverlap shows what the documentation says of overlapping
// profiles of one device: the later one's reset hides the earlier one's
// peak from it.
func TestMeasureOverlap(t *testing.T) {
	cpu := CPU()
	peaked, secondStarted, secondDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var second Measurement
	go func() {
		defer close(secondDone)
		<-peaked
		var err error
		second, err = cpu.Measure(func() error {
			close(secondStarted)
			return nil
		})
		assert.NoError(t, err)
	}()

	first, err := cpu.Measure(func() error {
		b := mustAlloc(t, cpu, 6<<10)
		require.NoError(t, b.Free())
		close(peaked)
		<-secondStarted // the second profile has reset the peak
		return nil
	})
	require.NoError(t, err)
	<-secondDone
	assert.Zero(t, first.TrackedPeakIncrease, "the overlapping reset hides the 6 KiB peak")
	assert.Zero(t, second.TrackedPeakIncrease)
}

func TestMeasureErrors(t *testing.T) {
	cpu := CPU()
	held := mustAlloc(t, cpu, 2<<10)
	spike := mustAlloc(t, cpu, 4<<10)
	require.NoError(t, spike.Free())
	defer held.Free()
	peak := cpu.MaxMemoryAllocated()
	require.Greater(t, peak, cpu.MemoryAllocated())

	ran := false
	run := func() error { ran = true; return nil }
	tests := []struct {
		name string
		dev  Device
		f    func() error
		want error
	}{
		{"nil function", cpu, nil, ErrInvalidArgument},
		{"backend not built", Device{kind: KindCUDA, ordinal: pastAnyOrdinal}, run, nil},
		{"invalid device", Device{kind: numKinds}, run, ErrInvalidDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran = false
			p, err := tt.dev.Measure(tt.f)
			require.Error(t, err)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
			}
			assert.False(t, ran, "the function ran")
			assert.Equal(t, Measurement{Device: tt.dev}, p)
			assert.Equal(t, peak, cpu.MaxMemoryAllocated(), "a failed profile reset the CPU's peak")
		})
	}

	t.Run("function fails", func(t *testing.T) {
		boom := errors.New("boom")
		p, err := cpu.Measure(func() error {
			b := mustAlloc(t, cpu, 1<<10)
			require.NoError(t, b.Free())
			return boom
		})
		assert.ErrorIs(t, err, boom)
		assert.ErrorContains(t, err, "memtrack: measurement of cpu: boom")
		assert.Equal(t, int64(1<<10), p.TrackedPeakIncrease, "the figures of a failed run are still returned")
		assert.Positive(t, p.Total)
	})
}

func TestBudget(t *testing.T) {
	const gib = 1 << 30
	p := Measurement{
		Total:               80 * gib,
		BaselineUsed:        20 * gib, // context, weights, other processes
		TrackedPeakIncrease: 6 * gib,  // activations of the forward pass
		Untracked:           gib,      // workspaces allocated by libraries
	}
	tests := []struct {
		name        string
		p           Measurement
		utilization float64
		block       int64
		want        Budget
	}{
		{"vLLM-style", p, 0.9, 16 << 20, Budget{Utilization: 0.9, Usable: 72 * gib, Reserved: 27 * gib, Available: 45 * gib, BlockSize: 16 << 20, Blocks: 45 * 64}},
		{"whole device", p, 1, gib, Budget{Utilization: 1, Usable: 80 * gib, Reserved: 27 * gib, Available: 53 * gib, BlockSize: gib, Blocks: 53}},
		{"block does not divide", p, 1, 10 * gib, Budget{Utilization: 1, Usable: 80 * gib, Reserved: 27 * gib, Available: 53 * gib, BlockSize: 10 * gib, Blocks: 5}},
		{"negative untracked is not counted", Measurement{Total: 10 * gib, BaselineUsed: gib, Untracked: -gib}, 0.5, gib,
			Budget{Utilization: 0.5, Usable: 5 * gib, Reserved: gib, Available: 4 * gib, BlockSize: gib, Blocks: 4}},
		{"no room", p, 0.25, gib, Budget{Utilization: 0.25, Usable: 20 * gib, Reserved: 27 * gib, Available: 0, BlockSize: gib, Blocks: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.p.Budget(tt.utilization, tt.block)
			require.NoError(t, err)
			assert.Equal(t, tt.want, b)
		})
	}
}

func TestBudgetErrors(t *testing.T) {
	p := Measurement{Total: 1 << 30}
	tests := []struct {
		name        string
		p           Measurement
		utilization float64
		block       int64
		want        error
		msg         string
	}{
		{"zero utilization", p, 0, 1, ErrInvalidArgument, "want a fraction"},
		{"negative utilization", p, -0.5, 1, ErrInvalidArgument, "-0.5"},
		{"utilization above 1", p, 1.01, 1, ErrInvalidArgument, "1.01"},
		{"NaN utilization", p, math.NaN(), 1, ErrInvalidArgument, "NaN"},
		{"infinite utilization", p, math.Inf(1), 1, ErrInvalidArgument, "+Inf"},
		{"zero block", p, 0.9, 0, ErrInvalidSize, "block size 0"},
		{"negative block", p, 0.9, -4096, ErrInvalidSize, "block size -4096"},
		{"no device total", Measurement{}, 0.9, 1, ErrInvalidSize, "Device.Measure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.p.Budget(tt.utilization, tt.block)
			assert.ErrorIs(t, err, tt.want)
			assert.ErrorContains(t, err, tt.msg)
			assert.Equal(t, Budget{}, b)
		})
	}
}

// A measurement resets every peak that ResetPeakMemoryStats resets, the
// allocation sites' among them: a spike before the measurement must not
// show in the sites at its peak.
func TestMeasureResetsThePeakOfAllocationSites(t *testing.T) {
	d := recording(t, 8)
	spike := allocOK(t)(allocFromA(d, 100<<10))
	require.NoError(t, spike.Free())

	_, err := d.Measure(func() error {
		b, err := allocFromB(d, 10<<10)
		if err != nil {
			return err
		}
		return b.Free()
	})
	require.NoError(t, err)
	snap, err := d.PeakAllocationSites()
	require.NoError(t, err)
	require.Len(t, snap.Sites, 1, "only the measured pass's site is in the peak")
	assert.Equal(t, "github.com/memtrack/memtrack.allocFromB", frameOf(snap.Sites[0].Stack[0]))
	assert.Equal(t, int64(10<<10), snap.Sites[0].Bytes)
	assert.Equal(t, int64(10<<10), snap.Stats.PeakBytes)
}

// processMemory is a CPU backend whose reported figures are this process's
// memory as the Go runtime maps it (everything mapped less what the heap has
// returned to the OS), so that a test of the untracked growth is not at the
// mercy of other processes on the machine, as the machine's figure is.
type processMemory struct{ backend }

func (processMemory) memInfo(int) (free, total int64, err error) {
	const total64 = 1 << 40
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	used := int64(s[0].Value.Uint64() - s[1].Value.Uint64())
	return total64 - used, total64, nil
}

var garbageSink [][]byte

// On the CPU, memory that f allocated from the Go heap and dropped is not
// what stays: Measure collects it (and returns it to the OS) before its
// readings, as vLLM runs gc.collect() and empty_cache(), so the untracked
// growth of a pass that leaves nothing behind stays near zero, run after run.
func TestMeasureUntrackedOnTheCPUIsWhatStays(t *testing.T) {
	useBackend(t, KindCPU, processMemory{&cpuBackend{}})
	cpu := CPU()
	// 32 MiB of garbage in 64 KiB pieces, unreachable once f returns. Without
	// a collection, most of it is still mapped at the final reading (the
	// test read +56 to +68 MiB, and -135 MiB when the scavenger caught up,
	// for 64 MiB before Measure collected).
	garbage := func() error {
		for range 512 {
			garbageSink = append(garbageSink, make([]byte, 64<<10))
		}
		garbageSink = nil
		return nil
	}
	// The tolerance: what the runtime may keep or give back besides f's
	// garbage (its metadata, the test framework's allocations, spans not yet
	// released); measured here within 0.6 MiB, 2.7 MiB on the first run
	// under -race, against the 32 MiB under test.
	const tolerance = 8 << 20
	for run := range 3 {
		p, err := cpu.Measure(garbage)
		require.NoError(t, err)
		t.Logf("run %d: untracked growth %d bytes", run, p.Untracked)
		assert.InDelta(t, 0, p.Untracked, tolerance, "run %d: the garbage counts as untracked growth", run)
	}
}
