package memtrack

import (
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/memtrack/memtrack/internal/siterec"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The allocation helpers are the known call sites of the tests: each
// allocates from a frame of its own.

//go:noinline
func allocFromA(d Device, size int64) (*Buffer, error) { return d.Alloc(size) }

//go:noinline
func allocFromB(d Device, size int64) (*Buffer, error) { return d.Alloc(size) }

// allocOK returns the buffer of an allocation helper, failing the test on
// an error: allocOK(t)(allocFromA(d, n)).
func allocOK(t testing.TB) func(*Buffer, error) *Buffer {
	return func(b *Buffer, err error) *Buffer {
		t.Helper()
		require.NoError(t, err)
		return b
	}
}

// frameOf returns the innermost function at a return address.
func frameOf(pc uintptr) string {
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	return f.Function
}

// recording enables allocation sites on the CPU for the test, every
// allocation recorded (rate 1), and disables them when it ends.
func recording(t *testing.T, depth int) Device {
	t.Helper()
	d := exactSites(t)
	require.NoError(t, d.Sites().Enable(depth))
	t.Cleanup(d.Sites().Disable)
	return d
}

// exactSites sets the CPU's site rate to 1 for the test, and back to the
// default when it ends.
func exactSites(t *testing.T) Device {
	t.Helper()
	d := CPU()
	require.NoError(t, d.Sites().SetRate(1))
	t.Cleanup(func() { require.NoError(t, d.Sites().SetRate(0)) })
	return d
}

func freeAll(t testing.TB, bufs ...*Buffer) {
	for _, b := range bufs {
		require.NoError(t, b.Free())
	}
}

func TestEnableAllocationSitesErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     Device
		depth int
		err   error
	}{
		{"depth 0", CPU(), 0, ErrInvalidArgument},
		{"negative depth", CPU(), -1, ErrInvalidArgument},
		{"depth past the maximum", CPU(), MaxSiteDepth + 1, ErrInvalidArgument},
		{"bad kind", Device{kind: numKinds}, 8, ErrInvalidDevice},
		{"bad ordinal", Device{kind: KindCPU, ordinal: 3}, 8, ErrInvalidOrdinal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.d.Sites().Enable(tc.depth), tc.err)
			assert.Equal(t, SiteStats{}, tc.d.Sites().Stats(), "nothing is recorded")
			assert.Nil(t, openTable(KindCPU).hooks.vals.Load(), "the CPU table stays off")
		})
	}
}

func TestEnableDisable(t *testing.T) {
	d := CPU()
	s := openTable(KindCPU)
	require.Nil(t, s.hooks.vals.Load(), "off before any test enables it")

	require.NoError(t, d.Sites().Enable(4))
	r := s.siteRecorderOf(0)
	require.NotNil(t, r)
	require.NoError(t, d.Sites().Enable(16))
	assert.Same(t, r, s.siteRecorderOf(0), "enabling again keeps the recorder")
	assert.Equal(t, 16, d.Sites().Stats().Depth)

	d.Sites().Disable()
	assert.Nil(t, s.hooks.vals.Load(), "the table is nil again: the off path is one nil load")
	d.Sites().Disable() // off stays off
	assert.Equal(t, SiteStats{}, d.Sites().Stats())

	b := allocOK(t)(allocFromA(d, 100))
	assert.Nil(t, siteOf(&b.allocation), "nothing recorded while off")
	require.NoError(t, b.Free())
}

// A buffer allocated before recording began, or freed after it ended, must
// leave the recorder's figures exact.
func TestSitesAcrossEnableAndDisable(t *testing.T) {
	d := exactSites(t)
	before := allocOK(t)(allocFromA(d, 1000))

	require.NoError(t, d.Sites().Enable(8))
	first := openTable(KindCPU).siteRecorderOf(0)
	during := allocOK(t)(allocFromB(d, 300))
	require.NoError(t, before.Free())
	assert.Equal(t, SiteStats{Enabled: true, Depth: 8, Rate: 1, Sites: 1, Buffers: 1, Bytes: 300, PeakBytes: 300}, d.Sites().Stats(),
		"the free of a buffer allocated before enabling changes nothing")

	d.Sites().Disable()
	require.NoError(t, d.Sites().Enable(8))
	assert.NotSame(t, first, openTable(KindCPU).siteRecorderOf(0), "re-enabling starts afresh")
	require.NoError(t, during.Free())
	assert.Equal(t, SiteStats{Enabled: true, Depth: 8, Rate: 1}, d.Sites().Stats(),
		"the free of a buffer recorded by the old recorder leaves the new one alone")
	assert.Equal(t, SiteStats{Enabled: true, Depth: 8, Rate: 1, Sites: 1, PeakBytes: 300}, siteStats(first.Stats()),
		"the old recorder forgot the buffer, keeping its site for the peak")
	first.ResetPeak()
	assert.Equal(t, 0, siteStats(first.Stats()).Sites, "no site left behind")
	d.Sites().Disable()
}

func TestFirstFrameIsTheCaller(t *testing.T) {
	d := recording(t, 1)
	b := allocOK(t)(allocFromA(d, 10))
	defer freeAll(t, b)
	require.Len(t, siteOf(&b.allocation).Stack(), 1)
	assert.Equal(t, "github.com/memtrack/memtrack.allocFromA", frameOf(siteOf(&b.allocation).Stack()[0]))
}

// Recording toggled, and the peak reset, while goroutines allocate and free:
// race-free, and every recorder's figures are exact.
func TestSitesToggledUnderLoad(t *testing.T) {
	d := exactSites(t)
	held := d.MemoryAllocated()
	workers, iters, toggles := 8, 2000, 200
	if testing.Short() {
		iters, toggles = 200, 20
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	kept := make([][]*Buffer, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range iters {
				b, err := allocFromA(d, int64(1+i%97))
				if !assert.NoError(t, err) {
					return
				}
				if i%10 == 0 {
					kept[w] = append(kept[w], b)
				} else if !assert.NoError(t, b.Free()) {
					return
				}
			}
		}()
	}
	workersDone := make(chan struct{})
	toggled := make(chan struct{})
	go func() {
		defer close(toggled)
		<-start
		// Toggle for as long as the workers run, and at least toggles times.
		for i := 0; ; i++ {
			select {
			case <-workersDone:
				if i >= toggles {
					assert.NoError(t, d.Sites().Enable(4))
					return
				}
			default:
			}
			assert.NoError(t, d.Sites().Enable(1+i%8))
			d.ResetPeakMemoryStats()
			d.Sites().Disable()
		}
	}()
	close(start)
	wg.Wait()
	close(workersDone)
	<-toggled
	defer d.Sites().Disable()

	final := openTable(KindCPU).siteRecorderOf(0)
	require.NotNil(t, final)
	// Every kept buffer is either unrecorded or counted by exactly the
	// recorder it points to; sum them per recorder.
	want := map[*siterec.Recorder][2]int64{}
	var all []*Buffer
	for _, bs := range kept {
		for _, b := range bs {
			all = append(all, b)
			if siteOf(&b.allocation) != nil {
				f := want[siteOf(&b.allocation).Recorder()]
				want[siteOf(&b.allocation).Recorder()] = [2]int64{f[0] + 1, f[1] + b.size}
			}
		}
	}
	// Buffers allocated after the final enable, from a second site.
	for i := range 10 {
		b := allocOK(t)(allocFromB(d, int64(100+i)))
		all = append(all, b)
		f := want[final]
		want[final] = [2]int64{f[0] + 1, f[1] + b.size}
	}
	recorded := 0
	for _, b := range all {
		if siteOf(&b.allocation) != nil {
			recorded++
		}
	}
	t.Logf("%d recorders counted %d of %d kept buffers", len(want), recorded, len(all))
	for r, f := range want {
		st := r.Stats()
		assert.Equal(t, f, [2]int64{st.Buffers, st.Bytes}, "a recorder's live figures equal its buffers'")
	}
	st := final.Stats()
	assert.Equal(t, want[final][1], st.Bytes)

	freeAll(t, all...)
	for r := range want {
		r.ResetPeak()
		assert.Equal(t, siterec.Stats{Depth: r.Depth(), Rate: 1, Folded: r.Stats().Folded}, r.Stats(),
			"after every free: no live figure, no site left")
	}
	assert.Equal(t, held, d.MemoryAllocated(), "the device's own count is untouched by the toggling")
}

func TestAllocationSitesErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Device
		err  error
	}{
		{"not recording", CPU(), ErrSitesNotRecorded},
		{"bad device", Device{kind: numKinds}, ErrInvalidDevice},
		{"bad ordinal", Device{kind: KindCPU, ordinal: 1}, ErrInvalidOrdinal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, get := range []func() (SiteSnapshot, error){tc.d.Sites().Snapshot, tc.d.Sites().PeakSnapshot} {
				snap, err := get()
				assert.ErrorIs(t, err, tc.err)
				assert.Empty(t, snap.Sites)
			}
		})
	}
}

// Past MaxAllocationSites stacks, allocations fold into one site with a nil
// stack, OtherSite, and are counted in SiteStats.Folded.
func TestAllocationSitesFoldIntoOther(t *testing.T) {
	d := recording(t, 32)
	// A recorder that holds one stack, in place of the one of recording.
	s := openTable(KindCPU)
	s.setHook(0, sitesSlot, &siteHook{rec: siterec.New(32, 1, 1)})
	a := allocOK(t)(allocFromA(d, 100))
	b := allocOK(t)(allocFromB(d, 200))
	defer freeAll(t, a, b)
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	require.Len(t, snap.Sites, 2)
	assert.Nil(t, snap.Sites[0].Stack, "the folded site, the largest")
	assert.Equal(t, [2]int64{1, 200}, [2]int64{snap.Sites[0].Buffers, snap.Sites[0].Bytes})
	assert.Equal(t, "github.com/memtrack/memtrack.allocFromA", frameOf(snap.Sites[1].Stack[0]))
	assert.Equal(t, [2]int64{1, 100}, [2]int64{snap.Sites[1].Buffers, snap.Sites[1].Bytes})
	assert.Equal(t, int64(1), snap.Stats.Folded)
	assert.False(t, snap.AtPeak)
}

func TestSetAllocationSiteRate(t *testing.T) {
	d := CPU()
	t.Cleanup(func() { require.NoError(t, d.Sites().SetRate(0)) })
	for _, tc := range []struct {
		name string
		d    Device
		rate int64
		err  error
	}{
		{"negative", CPU(), -1, ErrInvalidArgument},
		{"bad kind", Device{kind: numKinds}, 1, ErrInvalidDevice},
		{"bad ordinal", Device{kind: KindCPU, ordinal: 3}, 1, ErrInvalidOrdinal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.d.Sites().SetRate(tc.rate), tc.err)
		})
	}

	require.NoError(t, d.Sites().Enable(4))
	assert.Equal(t, int64(DefaultSiteRate), d.Sites().Stats().Rate, "the default")
	require.NoError(t, d.Sites().SetRate(1))
	assert.Equal(t, int64(1), d.Sites().Stats().Rate, "set while recording")
	d.Sites().Disable()
	require.NoError(t, d.Sites().SetRate(4096))
	require.NoError(t, d.Sites().Enable(4))
	assert.Equal(t, int64(4096), d.Sites().Stats().Rate, "set while not recording, kept for the next recording")
	require.NoError(t, d.Sites().SetRate(0))
	assert.Equal(t, int64(DefaultSiteRate), d.Sites().Stats().Rate, "0 restores the default")
	d.Sites().Disable()
}

// sampleStats returns the expected number of samples of an allocation of n
// bytes at a rate, and the variance of the scaled estimate of its bytes.
func sampleStats(n, rate int64) (p, varBytes float64) {
	p = -math.Expm1(-float64(n) / float64(rate))
	return p, float64(n) * float64(n) * (1 - p) / p
}

// Through Device.Alloc, with the runtime's random numbers (no seed): 16384
// buffers of 64 B at rate 4096 are estimated within 6 standard deviations
// (a false failure has probability 2e-9), and freeing them leaves nothing.
func TestSampledAllocationSites(t *testing.T) {
	const rate, size, n = 4096, 64, 16384
	d := CPU()
	require.NoError(t, d.Sites().SetRate(rate))
	t.Cleanup(func() { require.NoError(t, d.Sites().SetRate(0)) })
	require.NoError(t, d.Sites().Enable(1))
	defer d.Sites().Disable()

	bufs := make([]*Buffer, 0, n)
	sampled := 0
	for range n {
		b := allocOK(t)(allocFromA(d, size))
		if siteOf(&b.allocation) != nil {
			sampled++
		}
		bufs = append(bufs, b)
	}
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	require.Len(t, snap.Sites, 1)
	assert.Equal(t, "github.com/memtrack/memtrack.allocFromA", frameOf(snap.Sites[0].Stack[0]))
	p, v := sampleStats(size, rate)
	assert.InDelta(t, n*size, snap.Sites[0].Bytes, 6*math.Sqrt(n*v))
	assert.InDelta(t, n, snap.Sites[0].Buffers, 6*math.Sqrt(n*(1-p)/p))
	assert.Equal(t, int64(rate), snap.Stats.Rate)
	t.Logf("%d of %d allocations sampled; %d bytes estimated of %d", sampled, n, snap.Sites[0].Bytes, n*size)

	freeAll(t, bufs...)
	d.ResetPeakMemoryStats()
	assert.Equal(t, SiteStats{Enabled: true, Depth: 1, Rate: rate}, d.Sites().Stats())
}
