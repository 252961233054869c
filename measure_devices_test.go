package memtrack

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tensorParallelPass returns a pass that splits each of layers layers
// across ds at once, as tensor parallelism does: per layer, a goroutine per
// device allocates its share (shares[i] on ds[i]), and frees it before the
// next layer. It counts its runs in *runs.
func tensorParallelPass(t *testing.T, ds []Device, shares []int64, layers int, runs *int) func() error {
	return func() error {
		*runs++
		for range layers {
			var wg sync.WaitGroup
			errs := make([]error, len(ds))
			for i, d := range ds {
				wg.Go(func() {
					b, err := d.Alloc(shares[i])
					if err == nil {
						err = b.Free()
					}
					errs[i] = err
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestMeasureDevices: one pass over two devices, f run once, gives each
// device its own measurement, with its own peak, start and end, exactly
// as the in-memory fake reports them.
func TestMeasureDevices(t *testing.T) {
	fake, ds := fakeCUDA(t, 2, 1<<30)
	w0, w1 := mustAlloc(t, ds[0], 8<<20), mustAlloc(t, ds[1], 24<<20) // the weights, more on cuda:1
	defer w0.Free()
	defer w1.Free()

	runs := 0
	ms, err := MeasureDevices(ds, tensorParallelPass(t, ds, []int64{3 << 20, 5 << 20}, 4, &runs))
	require.NoError(t, err)
	assert.Equal(t, 1, runs, "f runs once for every device")
	require.Len(t, ms, 2)
	for i, want := range []struct{ weights, peak int64 }{{8 << 20, 3 << 20}, {24 << 20, 5 << 20}} {
		m := ms[i]
		assert.Equal(t, ds[i], m.Device)
		assert.Equal(t, want.weights, m.StartTracked, "%v", ds[i])
		assert.Equal(t, want.weights+want.peak, m.PeakTracked, "%v", ds[i])
		assert.Equal(t, want.peak, m.PeakTrackedIncrease, "%v", ds[i])
		assert.Equal(t, want.peak, m.PeakHeldIncrease, "%v", ds[i])
		assert.Equal(t, want.weights, m.EndTracked, "%v", ds[i])
		assert.Equal(t, int64(1<<30), m.Total, "%v", ds[i])
		used, _, _ := fake.state(i)
		assert.Equal(t, used+1000, m.StartUsed, "%v: the fake's allocations and its context", ds[i])
		assert.Equal(t, m.StartUsed, m.EndUsed, "%v", ds[i])
		assert.Zero(t, m.Untracked, "%v", ds[i])
	}
}

// TestMeasureDevicesIsMeasure: on one device, MeasureDevices is
// Device.Measure: the same figures of the same pass, and the same
// categories.
func TestMeasureDevicesIsMeasure(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	act, err := ds[0].Category(CategoryActivations)
	require.NoError(t, err)
	pass := func() error {
		b, err := act.Alloc(2 << 20)
		if err != nil {
			return err
		}
		return b.Free()
	}
	one, err := ds[0].Measure(pass)
	require.NoError(t, err)
	ms, err := MeasureDevices(ds, pass)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, one, ms[0])
	c, ok := ms[0].Category(CategoryActivations)
	require.True(t, ok)
	assert.Equal(t, int64(2<<20), c.PeakTrackedIncrease)
}

// TestMeasureDevicesScopes: while f runs, a scope of every device is open,
// and none is left open once MeasureDevices returns, also where f panics.
func TestMeasureDevicesScopes(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	open := func() []bool {
		var o []bool
		for _, d := range ds {
			_, r, err := d.lookup(use)
			require.NoError(t, err)
			o = append(o, r.HasOpenScopes())
		}
		return o
	}
	require.Equal(t, []bool{false, false}, open())
	_, err := MeasureDevices(ds, func() error {
		assert.Equal(t, []bool{true, true}, open(), "every device's scope is open while f runs")
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, open())

	assert.PanicsWithValue(t, "f failed", func() {
		_, _ = MeasureDevices(ds, func() error { panic("f failed") })
	})
	assert.Equal(t, []bool{false, false}, open(), "a scope of the panicking pass is still open")
}

// TestMeasureDevicesNested: MeasureDevices inside a measurement of one of
// its devices, and the other way round, each see their own peaks.
func TestMeasureDevicesNested(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	var inner []Measurement
	outer, err := ds[1].Measure(func() error {
		b := mustAlloc(t, ds[1], 6<<20)
		require.NoError(t, b.Free())
		var err error
		runs := 0
		inner, err = MeasureDevices(ds, tensorParallelPass(t, ds, []int64{1 << 20, 2 << 20}, 1, &runs))
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, int64(6<<20), outer.PeakTrackedIncrease)
	require.Len(t, inner, 2)
	assert.Equal(t, int64(1<<20), inner[0].PeakTrackedIncrease)
	assert.Equal(t, int64(2<<20), inner[1].PeakTrackedIncrease)
}

func TestMeasureDevicesErrors(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	held := mustAlloc(t, ds[0], 2<<10)
	spike := mustAlloc(t, ds[0], 4<<10)
	require.NoError(t, spike.Free())
	defer held.Free()
	before := ds[0].MemoryStats()

	ran := false
	run := func() error { ran = true; return nil }
	for _, tt := range []struct {
		name    string
		devices []Device
		f       func() error
		want    error
		msg     string
	}{
		{"no device", nil, run, ErrInvalidArgument, "memtrack: invalid argument: measurement of no device: give at least one"},
		{"nil function", ds, nil, ErrInvalidArgument, "memtrack: invalid argument: measurement of cuda:0, cuda:1: nil function"},
		{"a device twice", []Device{ds[0], ds[1], ds[0]}, run, ErrInvalidArgument,
			"memtrack: invalid argument: measurement of cuda:0, cuda:1, cuda:0: cuda:0 is given twice"},
		{"the zero device", []Device{ds[0], {}}, run, ErrInvalidDevice, ""},
		{"a device past the machine's", []Device{ds[0], ds[1], {kind: KindCUDA, ordinal: 2}}, run, ErrInvalidOrdinal, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ran = false
			ms, err := MeasureDevices(tt.devices, tt.f)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			if tt.msg != "" {
				assert.EqualError(t, err, tt.msg)
			}
			assert.False(t, ran, "the function ran")
			require.Len(t, ms, len(tt.devices))
			for i, d := range tt.devices {
				assert.Equal(t, Measurement{Device: d}, ms[i], "a measurement of nothing")
			}
			assert.Equal(t, before, ds[0].MemoryStats(), "a refused measurement moved a figure")
			_, r, err := ds[0].lookup(use)
			require.NoError(t, err)
			assert.False(t, r.HasOpenScopes())
		})
	}

	t.Run("function fails", func(t *testing.T) {
		boom := errors.New("boom")
		ms, err := MeasureDevices(ds, func() error {
			b := mustAlloc(t, ds[1], 1<<10)
			require.NoError(t, b.Free())
			return boom
		})
		assert.ErrorIs(t, err, boom)
		assert.EqualError(t, err, "memtrack: measurement of cuda:0, cuda:1: boom", "wrapped once")
		require.Len(t, ms, 2)
		assert.Equal(t, int64(1<<10), ms[1].PeakTrackedIncrease, "the figures of a failed run are still returned")
		assert.Positive(t, ms[0].Total)
	})

}

// TestMeasureDevicesLastReadingFails: where a device cannot be read at
// the end, its error is joined to f's, and the other devices' figures are
// whole.
func TestMeasureDevicesLastReadingFails(t *testing.T) {
	failing := &memInfoFailsAfter{fakeBackend: newFakeBackend(2, 1<<30)}
	useBackend(t, KindCUDA, failing)
	d0, err := CUDA(0)
	require.NoError(t, err)
	d1, err := CUDA(1)
	require.NoError(t, err)
	// cuda:0 is read first and last: the first readings of cuda:0 and
	// cuda:1 and the last of cuda:1 succeed, the last of cuda:0 fails.
	failing.left = 3
	boom := errors.New("boom")
	ms, err := MeasureDevices([]Device{d0, d1}, func() error { return boom })
	assert.ErrorIs(t, err, boom)
	assert.ErrorIs(t, err, errFakeDriver, "the device's error is joined to f's")
	assert.ErrorContains(t, err, "memtrack: measurement of cuda:0, cuda:1: boom\n")
	require.Len(t, ms, 2)
	assert.Equal(t, int64(1<<30), ms[1].Total, "cuda:1 was read at both ends")
	assert.Equal(t, ms[1].StartUsed, ms[1].EndUsed)
	assert.Equal(t, d0, ms[0].Device)
	assert.Equal(t, int64(1<<30), ms[0].Total, "cuda:0's first reading")
	assert.Zero(t, ms[0].EndUsed, "cuda:0's last reading failed")
}

// memInfoFailsAfter is a fake backend whose memory can be queried left
// more times; the queries after fail.
type memInfoFailsAfter struct {
	*fakeBackend
	mu   sync.Mutex
	left int
}

func (f *memInfoFailsAfter) memInfo(ordinal int) (free, total int64, err error) {
	f.mu.Lock()
	left := f.left
	f.left--
	f.mu.Unlock()
	if left <= 0 {
		return 0, 0, errFakeDriver
	}
	return f.fakeBackend.memInfo(ordinal)
}

// TestMeasureRefusedRegistersNothing: a measurement refused before f runs
// (a device that does not exist, or whose memory cannot be queried)
// registers no device, not even those of the list that do exist: every
// device is checked and read before any is used.
func TestMeasureRefusedRegistersNothing(t *testing.T) {
	cuda0, cuda1 := Device{kind: KindCUDA}, Device{kind: KindCUDA, ordinal: 1}
	for _, tt := range []struct {
		name    string
		devices []Device // one for Device.Measure, more for MeasureDevices
		failing int      // the ordinal of the CUDA device whose memory cannot be queried
		want    error
	}{
		{"the zero device after the CPU", []Device{CPU(), {}}, -1, ErrInvalidDevice},
		{"a device past the machine's after the CPU", []Device{CPU(), {kind: KindCUDA, ordinal: 2}}, -1, ErrInvalidOrdinal},
		{"cuda:1 cannot be queried", []Device{CPU(), cuda0, cuda1}, 1, errFakeDriver},
		{"Measure of cuda:0, which cannot be queried", []Device{cuda0}, 0, errFakeDriver},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resetState(t)
			useBackend(t, KindCUDA, &memInfoFails{fakeBackend: newFakeBackend(2, 1<<30), ordinal: tt.failing})
			require.Empty(t, UsedDevices())
			ran := false
			f := func() error { ran = true; return nil }
			var err error
			if len(tt.devices) == 1 {
				_, err = tt.devices[0].Measure(f)
			} else {
				_, err = MeasureDevices(tt.devices, f)
			}
			assert.ErrorIs(t, err, tt.want)
			assert.False(t, ran, "the function ran")
			assert.Empty(t, UsedDevices(), "a refused measurement registered a device")
		})
	}
}

// memInfoFails is a fake backend whose device ordinal cannot be queried.
type memInfoFails struct {
	*fakeBackend
	ordinal int
}

func (f *memInfoFails) memInfo(ordinal int) (free, total int64, err error) {
	if ordinal == f.ordinal {
		return 0, 0, errFakeDriver
	}
	return f.fakeBackend.memInfo(ordinal)
}
