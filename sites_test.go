package memtrack

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

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

// needSites skips a test that needs allocation sites in a build that
// compiles them out (-tags memtrack_nosites); TestSitesCompiledOut checks
// that build's answer instead.
func needSites(t testing.TB) {
	t.Helper()
	if !sitesBuilt {
		t.Skip("allocation sites are compiled out (-tags memtrack_nosites)")
	}
}

// TestSitesCompiledOut checks what a build without allocation sites
// answers: every call that would record or set them fails with
// ErrSitesNotRecorded and says how to rebuild, and nothing is recorded.
func TestSitesCompiledOut(t *testing.T) {
	if sitesBuilt {
		t.Skip("allocation sites are compiled in; run with -tags memtrack_nosites")
	}
	d := CPU()
	err := d.Sites().Enable(8)
	require.ErrorIs(t, err, ErrSitesNotRecorded)
	assert.Contains(t, err.Error(), "rebuild without it")
	assert.ErrorIs(t, d.Sites().SetRate(1), ErrSitesNotRecorded)
	b, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	_, err = d.Sites().Snapshot()
	assert.ErrorIs(t, err, ErrSitesNotRecorded)
}

// recording enables allocation sites on the CPU for the test, every
// allocation recorded (rate 1), and disables them when it ends.
func recording(t *testing.T, depth int) Device {
	t.Helper()
	needSites(t)
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
			assert.Nil(t, stateOf(KindCPU).hooks.recs.Load(), "the CPU table stays off")
		})
	}
}

func TestEnableDisable(t *testing.T) {
	needSites(t)
	d := CPU()
	s := stateOf(KindCPU)
	require.Nil(t, s.hooks.recs.Load(), "off before any test enables it")

	require.NoError(t, d.Sites().Enable(4))
	r := s.siteRecorderOf(0)
	require.NotNil(t, r)
	require.NoError(t, d.Sites().Enable(16))
	assert.Same(t, r, s.siteRecorderOf(0), "enabling again keeps the recorder")
	assert.Equal(t, 16, d.Sites().Stats().Depth)

	d.Sites().Disable()
	assert.Nil(t, s.hooks.recs.Load(), "the table is nil again: the off path is one nil load")
	d.Sites().Disable() // off stays off
	assert.Equal(t, SiteStats{}, d.Sites().Stats())

	b := allocOK(t)(allocFromA(d, 100))
	assert.Nil(t, b.site, "nothing recorded while off")
	require.NoError(t, b.Free())
}

// A buffer allocated before recording began, or freed after it ended, must
// leave the recorder's figures exact.
func TestSitesAcrossEnableAndDisable(t *testing.T) {
	needSites(t)
	d := exactSites(t)
	before := allocOK(t)(allocFromA(d, 1000))

	require.NoError(t, d.Sites().Enable(8))
	first := stateOf(KindCPU).siteRecorderOf(0)
	during := allocOK(t)(allocFromB(d, 300))
	require.NoError(t, before.Free())
	assert.Equal(t, SiteStats{Enabled: true, Depth: 8, Rate: 1, Sites: 1, Buffers: 1, Bytes: 300, PeakBytes: 300}, d.Sites().Stats(),
		"the free of a buffer allocated before enabling changes nothing")

	d.Sites().Disable()
	require.NoError(t, d.Sites().Enable(8))
	assert.NotSame(t, first, stateOf(KindCPU).siteRecorderOf(0), "re-enabling starts afresh")
	require.NoError(t, during.Free())
	assert.Equal(t, SiteStats{Enabled: true, Depth: 8, Rate: 1}, d.Sites().Stats(),
		"the free of a buffer recorded by the old recorder leaves the new one alone")
	assert.Equal(t, SiteStats{Enabled: true, Depth: 8, Rate: 1, Sites: 1, PeakBytes: 300}, first.stats(),
		"the old recorder forgot the buffer, keeping its site for the peak")
	first.resetPeak()
	assert.Equal(t, 0, first.stats().Sites, "no site left behind")
	d.Sites().Disable()
}

func TestFirstFrameIsTheCaller(t *testing.T) {
	needSites(t)
	d := recording(t, 1)
	b := allocOK(t)(allocFromA(d, 10))
	defer freeAll(t, b)
	require.Len(t, b.site.st.pcs, 1)
	assert.Equal(t, "github.com/memtrack/memtrack.allocFromA", frameOf(b.site.st.pcs[0]))
}

// siteModel is the recorder's specification: the figures at the peak are a
// full copy of the per-site figures, taken whenever the total rises past the
// peak.
type siteModel struct {
	bytes, peakBytes map[uintptr]int64
	total, peak      int64
}

func (m *siteModel) alloc(k uintptr, n int64) {
	m.bytes[k] += n
	m.total += n
	if m.total > m.peak {
		m.snap()
	}
}

func (m *siteModel) snap() {
	m.peak = m.total
	m.peakBytes = map[uintptr]int64{}
	for k, v := range m.bytes {
		if v != 0 {
			m.peakBytes[k] = v
		}
	}
}

// figures returns a recorder's sites by their one-frame stacks.
func figures(r *siteRecorder, atPeak bool) map[uintptr]int64 {
	got := map[uintptr]int64{}
	sites, _ := r.snapshot(atPeak)
	for _, s := range sites {
		k := uintptr(0) // memtrack.other
		if s.Stack != nil {
			k = s.Stack[0]
		}
		got[k] = s.Bytes
	}
	return got
}

// The lazy figures at the peak match a full copy at every peak, through
// random allocations, frees and resets; and sites do not outlive their use.
func TestSitesMatchModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := newSiteRecorder(1, 1, 1<<20)
		m := &siteModel{bytes: map[uintptr]int64{}, peakBytes: map[uintptr]int64{}}
		type live struct {
			k uintptr
			n int64
			s *site
		}
		var bufs []live
		for range 2000 {
			switch op := rng.IntN(10); {
			case op < 5 || len(bufs) == 0:
				k, n := uintptr(1+rng.IntN(8)), int64(1+rng.IntN(100))
				bufs = append(bufs, live{k, n, r.recordIn([]uintptr{k}, n, 1, "")})
				m.alloc(k, n)
			case op < 9:
				i := rng.IntN(len(bufs))
				b := bufs[i]
				bufs[i] = bufs[len(bufs)-1]
				bufs = bufs[:len(bufs)-1]
				b.s.free(b.n)
				m.bytes[b.k] -= b.n
				m.total -= b.n
			default:
				r.resetPeak()
				m.snap()
			}
			cur := map[uintptr]int64{}
			for k, v := range m.bytes {
				if v != 0 {
					cur[k] = v
				}
			}
			require.Equal(t, cur, figures(r, false), "seed %d: live figures", seed)
			require.Equal(t, m.peakBytes, figures(r, true), "seed %d: figures at the peak", seed)
			require.Equal(t, m.peak, r.stats().PeakBytes)
		}
		for _, b := range bufs {
			b.s.free(b.n)
		}
		r.resetPeak()
		assert.Equal(t, SiteStats{Enabled: true, Depth: 1, Rate: 1}, r.stats(), "seed %d: every site is gone", seed)
		assert.Empty(t, r.sites)
	}
}

// Past the cap on distinct stacks, allocations fold into memtrack.other and
// are counted; freed sites make room again.
func TestSiteCapFoldsIntoOther(t *testing.T) {
	r := newSiteRecorder(1, 1, 2)
	a := r.recordIn([]uintptr{1}, 10, 1, "")
	b := r.recordIn([]uintptr{2}, 20, 1, "")
	c := r.recordIn([]uintptr{3}, 30, 1, "")
	d := r.recordIn([]uintptr{4}, 40, 1, "")
	e := r.recordIn([]uintptr{1}, 5, 1, "")
	assert.Same(t, r.other, c.st)
	assert.Same(t, r.other, d.st)
	assert.Same(t, a.st, e.st, "a known stack still has its site")
	assert.Equal(t, map[uintptr]int64{1: 15, 2: 20, 0: 70}, figures(r, false))
	assert.Equal(t, SiteStats{Enabled: true, Depth: 1, Rate: 1, Sites: 2, Folded: 2, Buffers: 5, Bytes: 105, PeakBytes: 105}, r.stats())

	b.free(20)
	r.resetPeak() // b's site held figures at the old peak; now it can go
	assert.Equal(t, 1, r.stats().Sites)
	f := r.recordIn([]uintptr{5}, 50, 1, "")
	assert.NotSame(t, r.other, f.st, "a freed site makes room for a new stack")
	for _, x := range []struct {
		s *site
		n int64
	}{{a, 10}, {c, 30}, {d, 40}, {e, 5}, {f, 50}} {
		x.s.free(x.n)
	}
	st := r.stats()
	assert.Equal(t, int64(0), st.Buffers)
	assert.Equal(t, int64(0), st.Bytes)
	assert.Equal(t, int64(2), st.Folded, "the count of folded allocations stays")
}

// Recording toggled, and the peak reset, while goroutines allocate and free:
// race-free, and every recorder's figures are exact.
func TestSitesToggledUnderLoad(t *testing.T) {
	needSites(t)
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

	final := stateOf(KindCPU).siteRecorderOf(0)
	require.NotNil(t, final)
	// Every kept buffer is either unrecorded or counted by exactly the
	// recorder it points to; sum them per recorder.
	want := map[*siteRecorder][2]int64{}
	var all []*Buffer
	for _, bs := range kept {
		for _, b := range bs {
			all = append(all, b)
			if b.site != nil {
				f := want[b.site.st.rec]
				want[b.site.st.rec] = [2]int64{f[0] + 1, f[1] + b.size}
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
		if b.site != nil {
			recorded++
		}
	}
	t.Logf("%d recorders counted %d of %d kept buffers", len(want), recorded, len(all))
	for r, f := range want {
		st := r.stats()
		assert.Equal(t, f, [2]int64{st.Buffers, st.Bytes}, "a recorder's live figures equal its buffers'")
	}
	st := final.stats()
	assert.Equal(t, want[final][1], st.Bytes)

	freeAll(t, all...)
	for r := range want {
		r.resetPeak()
		assert.Equal(t, SiteStats{Enabled: true, Depth: int(r.depth.Load()), Rate: 1, Folded: r.stats().Folded}, r.stats(),
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
	needSites(t)
	d := recording(t, 32)
	stateOf(KindCPU).siteRecorderOf(0).maxSites = 1 // no allocation yet: nothing reads it
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
	needSites(t)
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

// sample keeps Go's heap profiler's promise: each allocation is sampled
// with probability 1 - exp(-n/rate), and the scaled figures are unbiased.
// A fixed seed makes the test deterministic; the tolerances are 5 standard
// deviations, so that a correct sampler fails with probability < 1e-6 for
// any seed.
func TestSampleIsUnbiased(t *testing.T) {
	for _, tc := range []struct {
		size, rate int64
		allocs     int
	}{
		{64, 4096, 200_000},                  // p = 0.016
		{64, DefaultSiteRate, 2_000_000},     // p = 0.00012: the default, small buffers
		{4096, 4096, 50_000},                 // p = 0.63
		{100 << 10, DefaultSiteRate, 20_000}, // p = 0.18
		{16 << 20, DefaultSiteRate, 1000},    // p = 1 - 1.3e-14
		{3, 1, 1000},                         // rate 1: every allocation, weight 1
	} {
		t.Run(fmt.Sprintf("%dB/rate%d", tc.size, tc.rate), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.size), uint64(tc.rate)))
			var samples int
			var objects, bytes float64
			for range tc.allocs {
				if w, ok := sample(tc.size, tc.rate, rng.Uint64()); ok {
					samples++
					objects += w
					bytes += w * float64(tc.size)
				}
			}
			k := float64(tc.allocs)
			if tc.rate == 1 {
				assert.Equal(t, tc.allocs, samples)
				assert.Equal(t, k, objects)
				assert.Equal(t, k*float64(tc.size), bytes)
				return
			}
			p, v := sampleStats(tc.size, tc.rate)
			assert.InDelta(t, k*p, float64(samples), 5*math.Sqrt(k*p*(1-p))+1, "samples")
			assert.InDelta(t, k*float64(tc.size), bytes, 5*math.Sqrt(k*v)+1, "scaled bytes")
			assert.InDelta(t, k, objects, 5*math.Sqrt(k*(1-p)/p)+1, "scaled buffers")
			t.Logf("%d samples of %d allocations; scaled bytes %.4g of %.4g", samples, tc.allocs, bytes, k*float64(tc.size))
		})
	}
}

// Sampled, the recorder's figures are scaled estimates; the figures at the
// peak come from the peak of the scaled bytes, and nothing is left behind
// once every buffer is freed (the float sums are zeroed, not rounded).
func TestSampledSitesAtThePeak(t *testing.T) {
	const (
		rate = 4096
		size = 64
		nA   = 16384 // 1 MiB from stack A, freed
		nB   = 4096  // then 256 KiB from stack B, live
	)
	rng := rand.New(rand.NewPCG(1, 2))
	r := newSiteRecorder(1, rate, 1<<20)
	allocs := func(k uintptr, n int) []*site {
		var out []*site
		for range n {
			if w, ok := sample(size, rate, rng.Uint64()); ok {
				out = append(out, r.recordIn([]uintptr{k}, size, w, ""))
			}
		}
		return out
	}
	_, v := sampleStats(size, rate)
	tolerance := func(n int) float64 { return 5 * math.Sqrt(float64(n)*v) }

	a := allocs(1, nA)
	for _, b := range a {
		b.free(size)
	}
	b := allocs(2, nB)
	live, peak := figures(r, false), figures(r, true)
	assert.InDelta(t, nB*size, live[2], tolerance(nB), "B's live bytes")
	assert.NotContains(t, live, uintptr(1), "A holds nothing")
	assert.InDelta(t, nA*size, peak[1], tolerance(nA), "A's bytes at the peak")
	assert.NotContains(t, peak, uintptr(2), "B came after the peak")
	st := r.stats()
	assert.Equal(t, peak[1], st.PeakBytes, "the peak is the figures at the peak")
	assert.Equal(t, live[2], st.Bytes)
	t.Logf("A at the peak %d of %d bytes, B live %d of %d (%d+%d samples)", peak[1], nA*size, live[2], nB*size, len(a), len(b))

	for _, x := range b {
		x.free(size)
	}
	r.resetPeak()
	assert.Equal(t, SiteStats{Enabled: true, Depth: 1, Rate: rate}, r.stats(), "nothing left behind")
	assert.Empty(t, r.sites)
}

// Through Device.Alloc, with the runtime's random numbers (no seed): 16384
// buffers of 64 B at rate 4096 are estimated within 6 standard deviations
// (a false failure has probability 2e-9), and freeing them leaves nothing.
func TestSampledAllocationSites(t *testing.T) {
	needSites(t)
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
		if b.site != nil {
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
