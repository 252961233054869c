package memtrack

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKindString(t *testing.T) {
	assert.Equal(t, "cpu", KindCPU.String())
	assert.Equal(t, "cuda", KindCUDA.String())
	assert.Equal(t, "metal", KindMetal.String())
	assert.Equal(t, "rocm", KindROCm.String())
	assert.Equal(t, "invalid", Kind(0).String())
	assert.Equal(t, "kind(9)", Kind(9).String())
}

// TestZeroDeviceIsNoDevice: the zero Device, which the constructors return
// beside their errors, is no device. Every method with an error fails with
// ErrInvalidDevice, the reads return zero figures, and nothing registers it
// (or the CPU) as used.
func TestZeroDeviceIsNoDevice(t *testing.T) {
	resetState(t)
	var d Device
	assert.NotEqual(t, CPU(), d)
	assert.Equal(t, Kind(0), d.Kind())
	assert.Equal(t, "invalid", d.String())
	assert.NotContains(t, listDevices(t), d)

	_, err := d.Alloc(1)
	assert.ErrorIs(t, err, ErrInvalidDevice)
	_, err = d.Track(1, 0)
	assert.ErrorIs(t, err, ErrInvalidDevice)
	assert.ErrorIs(t, d.SetMemoryLimit(1), ErrInvalidDevice)
	_, _, err = d.MemGetInfo()
	assert.ErrorIs(t, err, ErrInvalidDevice)
	_, err = d.Usage()
	assert.ErrorIs(t, err, ErrInvalidDevice)
	_, err = d.Info()
	assert.ErrorIs(t, err, ErrInvalidDevice)
	_, err = d.Measure(func() error { return nil })
	assert.ErrorIs(t, err, ErrInvalidDevice)
	assert.ErrorIs(t, d.History().Enable(1), ErrInvalidDevice)
	assert.ErrorIs(t, d.Sites().Enable(1), ErrInvalidDevice)

	assert.Zero(t, d.MemoryAllocated())
	assert.Zero(t, d.MaxMemoryAllocated())
	assert.Equal(t, Stats{Device: d}, d.MemoryStats())
	assert.Zero(t, d.MemoryLimit())
	assert.Equal(t, SiteStats{}, d.Sites().Stats())
	d.ResetPeakMemoryStats()
	d.ResetAccumulatedMemoryStats()
	assert.Empty(t, UsedDevices(), "the zero Device registers nothing")
}

// TestReadsRegisterNothing: reading a figure of a device never used,
// its features' figures included, leaves UsedDevices as it was; so does
// turning off a feature that is off. Allocating registers it. The devices
// are the CPU, which CPU returns unchecked, and a GPU as Devices lists it,
// unchecked too.
func TestReadsRegisterNothing(t *testing.T) {
	// fresh gives every kind fresh records, and a GPU, and returns the
	// devices as Devices lists them.
	fresh := func(t *testing.T) []Device {
		resetState(t)
		onlyGPUKind(t, KindCUDA)
		useBackend(t, KindCUDA, &fakeStreams{fakeBackend: newFakeBackend(1, 1<<30)})
		require.Empty(t, UsedDevices())
		ds := listDevices(t)
		require.Equal(t, []Device{CPU(), {kind: KindCUDA}}, ds)
		return ds
	}
	reads := []struct {
		name string
		read func(d Device)
	}{
		{"MemoryAllocated", func(d Device) { d.MemoryAllocated() }},
		{"MaxMemoryAllocated", func(d Device) { d.MaxMemoryAllocated() }},
		{"MemoryStats", func(d Device) { d.MemoryStats() }},
		{"MemoryLimit", func(d Device) { d.MemoryLimit() }},
		{"MemorySummary", func(d Device) { _ = d.MemorySummary() }},
		{"MemGetInfo", func(d Device) { _, _, _ = d.MemGetInfo() }},
		{"Usage", func(d Device) { _, _ = d.Usage() }},
		{"Baseline", func(d Device) { _, _ = d.Baseline() }},
		{"Info", func(d Device) { _, _ = d.Info() }},
		{"CategoryStats", func(d Device) { d.CategoryStats() }},
		{"Categories", func(d Device) { d.Categories() }},
		{"Sites().Stats", func(d Device) { d.Sites().Stats() }},
		{"Sites().Snapshot", func(d Device) { _, _ = d.Sites().Snapshot() }},
		{"Sites().PeakSnapshot", func(d Device) { _, _ = d.Sites().PeakSnapshot() }},
		{"Sites().Disable", func(d Device) { d.Sites().Disable() }},
		{"History().Snapshot", func(d Device) { _, _ = d.History().Snapshot() }},
		{"History().Range", func(d Device) { _, _ = d.History().Range(func(HistoryEvent) bool { return true }) }},
		{"History().Mark", func(d Device) { _ = d.History().Mark("phase") }},
		{"History().Disable", func(d Device) { d.History().Disable() }},
		{"Leaks().Stats", func(d Device) { d.Leaks().Stats() }},
		{"Leaks().Enabled", func(d Device) { d.Leaks().Enabled() }},
		{"Leaks().Disable", func(d Device) { d.Leaks().Disable() }},
		{"Pool().Stats", func(d Device) { _, _ = d.Pool().Stats() }},
		{"Pool().Usage", func(d Device) { _, _ = d.Pool().Usage() }},
	}
	for i, kind := range []string{"cpu", "gpu"} {
		for _, r := range reads {
			t.Run(kind+"/"+r.name, func(t *testing.T) {
				d := fresh(t)[i]
				r.read(d)
				assert.Empty(t, UsedDevices(), "the read registered %v", d)
			})
		}
	}

	fresh(t)
	cpu := CPU()
	b, err := cpu.Alloc(1)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	assert.Equal(t, []Device{cpu}, UsedDevices())
}

func TestParseDevice(t *testing.T) {
	fakeCUDA(t, 2, 1<<30)
	tests := []struct {
		in   string
		want string // the device's String, if it parses
		err  error
	}{
		// What String writes, and a bare kind name for ordinal 0.
		{"cpu", "cpu", nil},
		{"cuda", "cuda:0", nil},
		{"cuda:0", "cuda:0", nil},
		{"cuda:1", "cuda:1", nil},
		// The CPU is one device, written without an ordinal.
		{"cpu:0", "", ErrInvalidDevice},
		{"cpu:1", "", ErrInvalidDevice},
		// Devices that do not exist.
		{"cuda:2", "", ErrInvalidOrdinal},
		{"cuda:10", "", ErrInvalidOrdinal},
		{"cuda:65536", "", ErrInvalidOrdinal},
		{"cuda:99999999999999999999", "", ErrInvalidOrdinal},
		// Anything String does not write.
		{"cuda:-1", "", ErrInvalidDevice},
		{"cuda:x", "", ErrInvalidDevice},
		{"cuda:", "", ErrInvalidDevice},
		{"cuda:1:", "", ErrInvalidDevice},
		{"cuda:1:0", "", ErrInvalidDevice},
		{":0", "", ErrInvalidDevice},
		{"gpu:0", "", ErrInvalidDevice},
		{"", "", ErrInvalidDevice},
		{"cpu:+0", "", ErrInvalidDevice},
		{"cpu:-0", "", ErrInvalidDevice},
		{"cpu:00", "", ErrInvalidDevice},
		{"cuda:01", "", ErrInvalidDevice},
		{"cuda:+1", "", ErrInvalidDevice},
		{"cuda:1_0", "", ErrInvalidDevice},
		{"cuda:0x1", "", ErrInvalidDevice},
		{"cuda:١", "", ErrInvalidDevice}, // ARABIC-INDIC DIGIT ONE
		{" cpu", "", ErrInvalidDevice},
		{"cpu ", "", ErrInvalidDevice},
		{" cpu:0 ", "", ErrInvalidDevice},
		{"cpu\n", "", ErrInvalidDevice},
		{"cpu\u00a0", "", ErrInvalidDevice},
		{"\u2003cuda:1", "", ErrInvalidDevice},
		{"cuda: 1", "", ErrInvalidDevice},
		{"cuda :1", "", ErrInvalidDevice},
		{"CPU", "", ErrInvalidDevice},
		{"Cuda:0", "", ErrInvalidDevice},
		{"cpu\x00", "", ErrInvalidDevice},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			d, err := ParseDevice(tt.in)
			if tt.err != nil {
				assert.ErrorIs(t, err, tt.err)
				assert.Equal(t, Device{}, d)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, d.String())
			back, err := ParseDevice(d.String())
			require.NoError(t, err)
			assert.Equal(t, d, back, "String and ParseDevice round-trip")
		})
	}
}

// FuzzParseDevice checks ParseDevice against a plain model of the forms
// [Device.String] writes: a kind name followed by ":" and an ordinal as
// strconv.Itoa writes it, or a bare kind name for ordinal 0. Exactly the
// strings of those forms get past the syntax (they may still name a device
// this machine lacks), and each parses to the device it names.
func FuzzParseDevice(f *testing.F) {
	for _, s := range []string{"cpu", "cpu:0", "cuda:1", "metal:0", "cpu:+0", "cuda:01", " cpu", "cpu\u00a0", "CPU", "cuda:", "cuda:1:1", "cuda:65536"} {
		f.Add(s)
	}
	fakeCUDA(f, 2, 1<<30)
	f.Fuzz(func(t *testing.T, s string) {
		var want Device
		canonical := false
		for i, k := range kindNames {
			if i == 0 {
				continue // the zero Kind names no device
			}
			ord, ok := strings.CutPrefix(s, k+":")
			n, err := strconv.Atoi(ord)
			switch {
			case s == k:
				want, canonical = Device{kind: Kind(i)}, true
			case Kind(i) != KindCPU && ok && err == nil && n >= 0 && strconv.Itoa(n) == ord:
				want, canonical = Device{kind: Kind(i), ordinal: n}, true
			}
		}
		d, err := ParseDevice(s)
		assert.Equal(t, !canonical, errors.Is(err, ErrInvalidDevice), "%q: %v", s, err)
		if err == nil {
			assert.Equal(t, want, d, "%q", s)
		} else {
			assert.Equal(t, Device{}, d, "%q", s)
		}
	})
}

// listDevices is Devices where every backend of the build must start.
func listDevices(t testing.TB) []Device {
	t.Helper()
	ds, err := Devices()
	require.NoError(t, err, "Devices")
	return ds
}

func TestDevicesListsReachableDevices(t *testing.T) {
	fakeCUDA(t, 2, 1<<30)
	ds, err := Devices()
	assert.NoError(t, err)
	require.GreaterOrEqual(t, len(ds), 3)
	assert.Equal(t, []string{"cpu", "cuda:0", "cuda:1"}, []string{ds[0].String(), ds[1].String(), ds[2].String()})
}

func TestBackendUnavailable(t *testing.T) {
	f := newFakeBackend(0, 0)
	f.initErr = fmt.Errorf("%w: no CUDA driver", ErrBackendUnavailable)
	onlyGPUKind(t, KindCUDA)
	useBackend(t, KindCUDA, f)
	_, err := CUDA(0)
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	_, err = ParseDevice("cuda:0")
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	ds, err := Devices()
	assert.ErrorIs(t, err, ErrBackendUnavailable, "Devices says why it lists no CUDA device")
	assert.ErrorContains(t, err, "no CUDA driver")
	assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), "one prefix: %v", err)
	assert.Equal(t, []Device{CPU()}, ds, "the CPU alone")
	d := Device{kind: KindCUDA}
	_, err = d.Alloc(10)
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	_, _, err = d.MemGetInfo()
	assert.ErrorIs(t, err, ErrBackendUnavailable)
	assert.ErrorIs(t, d.SetMemoryLimit(10), ErrBackendUnavailable)
	assert.Equal(t, Stats{Device: d}, d.MemoryStats())
}

// TestCountingPerDevice counts allocations on two devices: each device's
// figures are exact and independent.
func TestCountingPerDevice(t *testing.T) {
	f, ds := fakeCUDA(t, 2, 1<<30)
	a, b := ds[0], ds[1]
	a1, err := a.Alloc(100)
	require.NoError(t, err)
	a2, err := a.Alloc(200)
	require.NoError(t, err)
	b1, err := b.Alloc(5000)
	require.NoError(t, err)
	assert.Equal(t, int64(300), a.MemoryAllocated())
	assert.Equal(t, int64(5000), b.MemoryAllocated())
	require.NoError(t, a1.Free())
	assert.Equal(t, Stats{Device: a, Tracked: 200, PeakTracked: 300, AllocBytes: 300, FreedBytes: 100,
		Buffers: 1, PeakBuffers: 2, Allocs: 2, Frees: 1, Held: 200, PeakHeld: 300}, a.MemoryStats())
	assert.Equal(t, int64(300), a.MaxMemoryAllocated())
	a.ResetPeakMemoryStats()
	assert.Equal(t, int64(200), a.MaxMemoryAllocated())
	a.ResetAccumulatedMemoryStats()
	assert.Equal(t, Stats{Device: a, Tracked: 200, PeakTracked: 200, Buffers: 1, PeakBuffers: 1, Held: 200, PeakHeld: 200}, a.MemoryStats())
	require.NoError(t, a2.Free())
	require.NoError(t, b1.Free())
	for i := range ds {
		used, live, _ := f.state(i)
		assert.Zero(t, used)
		assert.Zero(t, live)
	}
	assert.Equal(t, int64(0), b.MemoryAllocated())
	assert.Equal(t, int64(5000), b.MaxMemoryAllocated())
}

func TestBufferAccessors(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	b, err := ds[0].Alloc(64)
	require.NoError(t, err)
	assert.Equal(t, int64(64), b.Size())
	assert.Equal(t, ds[0], b.Device())
	assert.Nil(t, b.Bytes(), "device memory has no host view")
	assert.False(t, b.Freed())
	require.NoError(t, b.Free())
	assert.True(t, b.Freed())

	var nilBuf *Buffer
	assert.Zero(t, nilBuf.Size())
	assert.Equal(t, Device{}, nilBuf.Device())
	assert.Nil(t, nilBuf.Bytes())
	assert.False(t, nilBuf.Freed())
}

// TestBadInput runs every refused operation and checks the error and that no
// figure moved: the device's statistics (FailedAllocs aside, where the
// operation was a refused allocation) and the backend's own memory.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(f *fakeBackend, d Device)
		op     func(d Device, held *Buffer) error
		want   error
		failed int64 // added to FailedAllocs
		calls  int   // alloc calls that reach the backend
	}{
		{name: "alloc zero", op: func(d Device, _ *Buffer) error { _, err := d.Alloc(0); return err }, want: ErrInvalidSize},
		{name: "alloc negative", op: func(d Device, _ *Buffer) error { _, err := d.Alloc(-4096); return err }, want: ErrInvalidSize},
		{name: "alloc min int64", op: func(d Device, _ *Buffer) error { _, err := d.Alloc(math.MinInt64); return err }, want: ErrInvalidSize},
		{
			name: "alloc over the limit",
			setup: func(_ *fakeBackend, d Device) {
				require.NoError(t, d.SetMemoryLimit(150))
			},
			op:     func(d Device, _ *Buffer) error { _, err := d.Alloc(51); return err },
			want:   ErrOutOfMemory,
			failed: 1,
		},
		{
			name:   "alloc larger than the device",
			op:     func(d Device, _ *Buffer) error { _, err := d.Alloc(1 << 40); return err },
			want:   ErrOutOfMemory,
			failed: 1, calls: 1,
		},
		{
			name:   "alloc max int64",
			op:     func(d Device, _ *Buffer) error { _, err := d.Alloc(math.MaxInt64); return err },
			want:   ErrOutOfMemory,
			failed: 1, calls: 1,
		},
		{
			name: "backend alloc error",
			setup: func(f *fakeBackend, _ Device) {
				f.allocErrs = []error{&BackendError{Op: "alloc", Code: 999, Err: errFakeDriver}}
			},
			op:     func(d Device, _ *Buffer) error { _, err := d.Alloc(10); return err },
			want:   errFakeDriver,
			failed: 1, calls: 1,
		},
		{
			name: "backend free error",
			setup: func(f *fakeBackend, _ Device) {
				f.freeErrs = []error{&BackendError{Op: "free", Code: 700, Err: errFakeDriver}}
			},
			op:   func(_ Device, held *Buffer) error { return held.Free() },
			want: errFakeDriver,
		},
		{
			name:  "double free",
			setup: nil,
			op: func(d Device, _ *Buffer) error {
				b, err := d.Alloc(7)
				require.NoError(t, err)
				require.NoError(t, b.Free())
				return b.Free()
			},
			want: ErrDoubleFree, calls: 1,
		},
		{name: "nil buffer", op: func(Device, *Buffer) error { return (*Buffer)(nil).Free() }, want: ErrNilBuffer},
		{name: "negative limit", op: func(d Device, _ *Buffer) error { return d.SetMemoryLimit(-1) }, want: ErrInvalidSize},
		{
			name: "ordinal past the last device",
			op:   func(d Device, _ *Buffer) error { _, err := Device{kind: KindCUDA, ordinal: 1}.Alloc(10); return err },
			want: ErrInvalidOrdinal,
		},
		{
			name: "unknown kind",
			op:   func(d Device, _ *Buffer) error { _, err := Device{kind: numKinds}.Alloc(10); return err },
			want: ErrInvalidDevice,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ds := fakeCUDA(t, 1, 1<<20)
			d := ds[0]
			held, err := d.Alloc(100)
			require.NoError(t, err)
			if tt.setup != nil {
				tt.setup(f, d)
			}
			before := d.MemoryStats()
			usedBefore, liveBefore, callsBefore := f.state(0)

			err = tt.op(d, held)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), "memtrack: ")

			want := before
			want.FailedAllocs += tt.failed
			got := d.MemoryStats()
			if tt.name == "double free" { // the good Alloc and Free in between count
				want.AllocBytes, want.FreedBytes, want.Allocs, want.Frees = 107, 7, 2, 1
				want.PeakBuffers = 2
				want.PeakTracked = 107
				want.PeakHeld = 107
			}
			assert.Equal(t, want, got)
			used, live, calls := f.state(0)
			assert.Equal(t, usedBefore, used, "backend memory")
			assert.Equal(t, liveBefore, live, "backend allocations")
			assert.Equal(t, callsBefore+tt.calls, calls, "backend alloc calls")
			assert.False(t, held.Freed(), "the held buffer is still live")
			f.freeErrs = nil
			assert.NoError(t, held.Free())
		})
	}
}

func TestFreeRetryAfterBackendError(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<20)
	b, err := ds[0].Alloc(4096)
	require.NoError(t, err)
	f.freeErrs = []error{&BackendError{Op: "free", Err: errFakeDriver}}
	require.Error(t, b.Free())
	assert.Equal(t, int64(4096), ds[0].MemoryAllocated())
	require.NoError(t, b.Free(), "a buffer whose free failed can be freed again")
	assert.Equal(t, int64(0), ds[0].MemoryAllocated())
	assert.ErrorIs(t, b.Free(), ErrDoubleFree)
}

func TestOutOfMemoryErrorDetails(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	held, err := d.Alloc(1000)
	require.NoError(t, err)
	defer held.Free()

	require.NoError(t, d.SetMemoryLimit(4096))
	assert.Equal(t, int64(4096), d.MemoryLimit())
	_, err = d.Alloc(5000)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	// The report: the fake driver sees a context of 1000 bytes beside the
	// buffer of 1000.
	report := OutOfMemoryError{PeakTracked: 1000, Buffers: 1, Total: 1 << 20, Free: 1<<20 - 2000, Untracked: 1000}
	want := report
	want.Device, want.Requested, want.Tracked, want.Limit, want.Reason = d, 5000, 1000, 4096, "memory limit"
	assert.Equal(t, want, *oom)
	assert.Equal(t, "memtrack: out of memory on cuda:0: 5000 bytes requested, 1000 tracked, limit 4096: memory limit", err.Error())

	require.NoError(t, d.SetMemoryLimit(0))
	_, err = d.Alloc(1 << 20)
	require.ErrorAs(t, err, &oom)
	want = report
	want.Device, want.Requested, want.Tracked, want.Code, want.Reason = d, 1<<20, 1000, 2, "fake device full"
	assert.Equal(t, want, *oom)
}

// TestOutOfMemoryErrorFields checks that a refused allocation fills exactly
// the fields that explain the refusal: Limit only when the memory limit
// refused it, and neither the limit nor the backend's code when the record's
// capacity did.
func TestOutOfMemoryErrorFields(t *testing.T) {
	_, ds := fakeCUDA(t, 1, math.MaxInt64)
	d := ds[0]
	held, err := d.Alloc(1000)
	require.NoError(t, err)
	defer held.Free()

	// The record's capacity refuses, under a limit far above it.
	require.NoError(t, d.SetMemoryLimit(math.MaxInt64))
	_, err = d.Alloc(tracker.MaxBytes)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Zero(t, oom.Limit, "the limit did not refuse it: %v", err)
	assert.Equal(t, int64(1000), oom.Tracked)
	assert.Equal(t, int64(tracker.MaxBytes), oom.Requested)
	assert.NotContains(t, err.Error(), "limit")
	assert.Contains(t, err.Error(), "capacity")
	assert.Equal(t, int64(1000), d.MemoryAllocated())

	// The limit refuses: it is named.
	require.NoError(t, d.SetMemoryLimit(1500))
	_, err = d.Alloc(501)
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(1500), oom.Limit)
	assert.Equal(t, int64(1000), oom.Tracked)
}

// TestLedgerRefusal turns each refusal of a record of the ledger into an
// OutOfMemoryError whose fields say what refused it.
func TestLedgerRefusal(t *testing.T) {
	d := Device{kind: KindCUDA, ordinal: 1}
	for _, tc := range []struct {
		name string
		err  error
		want OutOfMemoryError
	}{
		{
			name: "limit",
			err:  &tracker.LimitError{Requested: 10, Tracked: 95, Limit: 100},
			want: OutOfMemoryError{Device: d, Requested: 10, Tracked: 95, Limit: 100, Reason: "memory limit"},
		},
		{
			name: "capacity",
			err:  fmt.Errorf("%w: a record holds at most 3 buffers", tracker.ErrCapacity),
			want: OutOfMemoryError{Device: d, Requested: 10, Tracked: 7, Reason: "the tracker's capacity: counter capacity exceeded: a record holds at most 3 buffers"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec tracker.Record
			require.NoError(t, rec.Alloc(7))
			l := ledger{rec: &rec}
			got := l.refusal(tc.err, false, d, 10)
			assert.Equal(t, tc.want, *got)
			assert.ErrorIs(t, got, ErrOutOfMemory)
		})
	}
}

// TestLimitUnderContention lets many goroutines race for room under a
// limit: exactly limit/size succeed, the rest fail and are counted, and the
// backend holds exactly what is tracked.
func TestLimitUnderContention(t *testing.T) {
	const size, limit, g = 10, 1000, 400
	f, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	require.NoError(t, d.SetMemoryLimit(limit))
	var wg sync.WaitGroup
	start := make(chan struct{})
	bufs := make(chan *Buffer, g)
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			b, err := d.Alloc(size)
			if err != nil {
				assert.ErrorIs(t, err, ErrOutOfMemory)
				return
			}
			bufs <- b
		}()
	}
	close(start)
	wg.Wait()
	close(bufs)
	assert.Len(t, bufs, limit/size)
	s := d.MemoryStats()
	assert.Equal(t, int64(limit), s.Tracked)
	assert.Equal(t, int64(limit), s.PeakTracked)
	assert.Equal(t, int64(g-limit/size), s.FailedAllocs)
	used, live, _ := f.state(0)
	assert.Equal(t, int64(limit), used, "memory refused after the backend gave it was returned")
	assert.Equal(t, limit/size, live)
	for b := range bufs {
		require.NoError(t, b.Free())
	}
}

// TestExactPeakConcurrent holds G buffers per device on two devices at one
// moment (a barrier): each device's peak is exactly its G buffers.
func TestExactPeakConcurrent(t *testing.T) {
	const g = 32
	_, ds := fakeCUDA(t, 2, 1<<30)
	var allocated, release, done sync.WaitGroup
	allocated.Add(2 * g)
	release.Add(1)
	for i := range 2 * g {
		done.Add(1)
		go func() {
			defer done.Done()
			d := ds[i%2]
			b, err := d.Alloc(int64(1024 * (i%2 + 1)))
			allocated.Done()
			if !assert.NoError(t, err) {
				return
			}
			release.Wait()
			assert.NoError(t, b.Free())
		}()
	}
	allocated.Wait()
	release.Done()
	done.Wait()
	for i, d := range ds {
		s := d.MemoryStats()
		assert.Equal(t, int64(g*1024*(i+1)), s.PeakTracked, "%v", d)
		assert.Equal(t, int64(g), s.PeakBuffers)
		assert.Equal(t, int64(0), s.Tracked)
		assert.Equal(t, int64(g), s.Frees)
	}
}

func TestUsage(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	b, err := ds[0].Alloc(4096)
	require.NoError(t, err)
	defer b.Free()
	u, err := ds[0].Usage()
	require.NoError(t, err)
	assert.Equal(t, Usage{Device: ds[0], Tracked: 4096, Total: 1 << 20, Free: 1<<20 - 4096 - 1000, Used: 5096, Untracked: 1000}, u)
	free, total, err := ds[0].MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, u.Free, free)
	assert.Equal(t, u.Total, total)
}

func TestMemorySummary(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	require.NoError(t, d.SetMemoryLimit(1<<29))
	b, err := d.Alloc(3 << 20)
	require.NoError(t, err)
	c, err := d.Alloc(1536)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	defer c.Free()
	s := d.MemorySummary()
	for _, want := range []string{
		"memtrack memory summary: cuda:0",
		"now      peak    allocs     frees",
		"tracked bytes  1.50 KiB  3.00 MiB  3.00 MiB  3.00 MiB",
		"buffers         1         2         2         1",
		"failed allocs: 0",
		"memory limit: 512 MiB (536870912 bytes)",
		"device (reported): 2.48 KiB used of 1.00 GiB",
		"tracked 1.50 KiB, untracked 1000 B",
	} {
		assert.Contains(t, s, want)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB", 10 << 20: "10.0 MiB",
		500 << 30: "500 GiB", -2048: "-2.00 KiB", math.MaxInt64: "8.00 EiB",
	} {
		assert.Equal(t, want, bytesize.Format(n), "%d", n)
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	oom := error(&OutOfMemoryError{})
	assert.ErrorIs(t, oom, ErrOutOfMemory)
	be := &BackendError{Device: Device{kind: KindCUDA, ordinal: 1}, Op: "free", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS", Err: errFakeDriver}
	assert.ErrorIs(t, be, errFakeDriver)
	assert.Equal(t, "memtrack: cuda:1: free failed: CUDA_ERROR_ILLEGAL_ADDRESS (code 700): fake driver failure", be.Error())
	assert.False(t, errors.Is(be, ErrOutOfMemory))
}

func TestDeviceText(t *testing.T) {
	text, err := CPU().MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "cpu", string(text))

	var d Device
	require.NoError(t, d.UnmarshalText([]byte("cpu")))
	assert.Equal(t, CPU(), d)

	out, err := json.Marshal(Stats{Device: CPU(), Tracked: 7})
	require.NoError(t, err)
	assert.Contains(t, string(out), `"Device":"cpu"`)

	for _, bad := range []string{"", "tpu:0", "cpu:-1", "cpu:1"} {
		d := CPU()
		assert.Error(t, d.UnmarshalText([]byte(bad)), "%q", bad)
		assert.Equal(t, CPU(), d, "a failed UnmarshalText changed the device")
	}
}

func TestUsedDevices(t *testing.T) {
	b, err := CPU().Alloc(1) // uses the CPU (reading a figure would not)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	_, err = CUDA(pastAnyOrdinal)
	require.Error(t, err, "no machine has that many GPUs")

	used := UsedDevices()
	assert.Contains(t, used, CPU())
	for _, d := range used {
		assert.Less(t, d.Ordinal(), pastAnyOrdinal, "a refused ordinal was listed")
		_, err := ParseDevice(d.String())
		assert.NoError(t, err, "a listed device does not exist: %v", d)
	}
}

// pastAnyOrdinal is an ordinal past any machine's devices.
const pastAnyOrdinal = 1000

// TestUsedDevicesCreatesNoTable hides the GPU kinds' tables, as in a
// process that never used a GPU, and checks that listing does not create
// them (which would initialise their drivers).
func TestUsedDevicesCreatesNoTable(t *testing.T) {
	for _, k := range []Kind{KindCUDA, KindMetal, KindROCm} {
		saved := tables[k].p.Swap(nil)
		t.Cleanup(func() { tables[k].p.Store(saved) })
	}
	b, err := CPU().Alloc(1) // the CPU is used, whatever ran before
	require.NoError(t, err)
	require.NoError(t, b.Free())
	CPU().MemoryAllocated()

	assert.Equal(t, []Device{CPU()}, UsedDevices())
	assert.Nil(t, tableOf(KindCUDA), "UsedDevices created the cuda table")
	assert.Nil(t, tableOf(KindMetal), "UsedDevices created the metal table")
	assert.Nil(t, tableOf(KindROCm), "UsedDevices created the rocm table")
}

// onlyGPUKind gives every GPU kind but k the stand-in of a build without
// its tag for the rest of the test, so that Devices lists the CPU and k's
// devices alone whatever the build's tags (-tags rocm on the fake runtime
// lists its devices too).
func onlyGPUKind(t *testing.T, k Kind) {
	t.Helper()
	for other := KindCPU + 1; other < numKinds; other++ {
		if other != k {
			useBackend(t, other, unbuilt{kind: other})
		}
	}
}

// resetState gives every kind fresh, empty records for the rest of the test,
// so that UsedDevices starts empty.
func resetState(t *testing.T) {
	t.Helper()
	for k := KindCPU; k < numKinds; k++ {
		useBackend(t, k, newBackend(k))
	}
}

// TestBackendStartFailureNamesDevice: where a kind's backend cannot start
// (no driver), the error of each function given a device of that kind
// names the device asked for, not the kind's first.
func TestBackendStartFailureNamesDevice(t *testing.T) {
	f := newFakeBackend(0, 0)
	f.initErr = &BackendError{Device: Device{kind: KindCUDA}, Op: "init", Err: fmt.Errorf("%w: no driver", ErrBackendUnavailable)}
	useBackend(t, KindCUDA, f)
	cuda1 := Device{kind: KindCUDA, ordinal: 1}
	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"CUDA(1)", func() error { _, err := CUDA(1); return err }},
		{"ParseDevice", func() error { _, err := ParseDevice("cuda:1"); return err }},
		{"Alloc", func() error { _, err := cuda1.Alloc(1); return err }},
		{"MemGetInfo", func() error { _, _, err := cuda1.MemGetInfo(); return err }},
		{"SetMemoryLimit", func() error { return cuda1.SetMemoryLimit(1) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			assert.ErrorIs(t, err, ErrBackendUnavailable)
			var be *BackendError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, cuda1, be.Device)
			assert.EqualError(t, err, "memtrack: cuda:1: init failed: backend unavailable: no driver")
		})
	}
	var be *BackendError
	require.ErrorAs(t, f.initErr, &be)
	assert.Equal(t, Device{kind: KindCUDA}, be.Device, "the backend's own error is left as it was")
}
