package siterec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// defaultRate is memtrack.DefaultSiteRate, the rate most recorders sample
// at.
const defaultRate = 512 << 10

// sampleStats returns the expected number of samples of an allocation of n
// bytes at a rate, and the variance of the scaled estimate of its bytes.
func sampleStats(n, rate int64) (p, varBytes float64) {
	p = -math.Expm1(-float64(n) / float64(rate))
	return p, float64(n) * float64(n) * (1 - p) / p
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
func figures(r *Recorder, atPeak bool) map[uintptr]int64 {
	got := map[uintptr]int64{}
	sites, _ := r.Snapshot(atPeak)
	for _, s := range sites {
		k := uintptr(0) // the folded allocations
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
		r := New(1, 1, 1<<20)
		m := &siteModel{bytes: map[uintptr]int64{}, peakBytes: map[uintptr]int64{}}
		type live struct {
			k uintptr
			n int64
			s *Site
		}
		var bufs []live
		for range 2000 {
			switch op := rng.IntN(10); {
			case op < 5 || len(bufs) == 0:
				k, n := uintptr(1+rng.IntN(8)), int64(1+rng.IntN(100))
				bufs = append(bufs, live{k, n, r.Record([]uintptr{k}, n, 1, "")})
				m.alloc(k, n)
			case op < 9:
				i := rng.IntN(len(bufs))
				b := bufs[i]
				bufs[i] = bufs[len(bufs)-1]
				bufs = bufs[:len(bufs)-1]
				b.s.Free()
				m.bytes[b.k] -= b.n
				m.total -= b.n
			default:
				r.ResetPeak()
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
			require.Equal(t, m.peak, r.Stats().PeakBytes)
		}
		for _, b := range bufs {
			b.s.Free()
		}
		r.ResetPeak()
		assert.Equal(t, Stats{Depth: 1, Rate: 1}, r.Stats(), "seed %d: every site is gone", seed)
		assert.Empty(t, r.sites)
	}
}

// Past the cap on distinct stacks, allocations fold into the folded allocations and
// are counted; freed sites make room again.
func TestSiteCapFoldsIntoOther(t *testing.T) {
	r := New(1, 1, 2)
	a := r.Record([]uintptr{1}, 10, 1, "")
	b := r.Record([]uintptr{2}, 20, 1, "")
	c := r.Record([]uintptr{3}, 30, 1, "")
	d := r.Record([]uintptr{4}, 40, 1, "")
	e := r.Record([]uintptr{1}, 5, 1, "")
	assert.Same(t, r.other, c.st)
	assert.Same(t, r.other, d.st)
	assert.Same(t, a.st, e.st, "a known stack still has its site")
	assert.Equal(t, map[uintptr]int64{1: 15, 2: 20, 0: 70}, figures(r, false))
	assert.Equal(t, Stats{Depth: 1, Rate: 1, Sites: 2, Folded: 2, Buffers: 5, Bytes: 105, PeakBytes: 105}, r.Stats())

	b.Free()
	r.ResetPeak() // b's site held figures at the old peak; now it can go
	assert.Equal(t, 1, r.Stats().Sites)
	f := r.Record([]uintptr{5}, 50, 1, "")
	assert.NotSame(t, r.other, f.st, "a freed site makes room for a new stack")
	for _, x := range []struct {
		s *Site
		n int64
	}{{a, 10}, {c, 30}, {d, 40}, {e, 5}, {f, 50}} {
		x.s.Free()
	}
	st := r.Stats()
	assert.Equal(t, int64(0), st.Buffers)
	assert.Equal(t, int64(0), st.Bytes)
	assert.Equal(t, int64(2), st.Folded, "the count of folded allocations stays")
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
		{64, 4096, 200_000},              // p = 0.016
		{64, defaultRate, 2_000_000},     // p = 0.00012: the default, small buffers
		{4096, 4096, 50_000},             // p = 0.63
		{100 << 10, defaultRate, 20_000}, // p = 0.18
		{16 << 20, defaultRate, 1000},    // p = 1 - 1.3e-14
		{3, 1, 1000},                     // rate 1: every allocation, weight 1
	} {
		t.Run(fmt.Sprintf("%dB/rate%d", tc.size, tc.rate), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.size), uint64(tc.rate)))
			var samples int
			var objects, bytes float64
			for range tc.allocs {
				if w, ok := Sample(tc.size, tc.rate, rng.Uint64()); ok {
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
	r := New(1, rate, 1<<20)
	allocs := func(k uintptr, n int) []*Site {
		var out []*Site
		for range n {
			if w, ok := Sample(size, rate, rng.Uint64()); ok {
				out = append(out, r.Record([]uintptr{k}, size, w, ""))
			}
		}
		return out
	}
	_, v := sampleStats(size, rate)
	tolerance := func(n int) float64 { return 5 * math.Sqrt(float64(n)*v) }

	a := allocs(1, nA)
	for _, b := range a {
		b.Free()
	}
	b := allocs(2, nB)
	live, peak := figures(r, false), figures(r, true)
	assert.InDelta(t, nB*size, live[2], tolerance(nB), "B's live bytes")
	assert.NotContains(t, live, uintptr(1), "A holds nothing")
	assert.InDelta(t, nA*size, peak[1], tolerance(nA), "A's bytes at the peak")
	assert.NotContains(t, peak, uintptr(2), "B came after the peak")
	st := r.Stats()
	assert.Equal(t, peak[1], st.PeakBytes, "the peak is the figures at the peak")
	assert.Equal(t, live[2], st.Bytes)
	t.Logf("A at the peak %d of %d bytes, B live %d of %d (%d+%d samples)", peak[1], nA*size, live[2], nB*size, len(a), len(b))

	for _, x := range b {
		x.Free()
	}
	r.ResetPeak()
	assert.Equal(t, Stats{Depth: 1, Rate: rate}, r.Stats(), "nothing left behind")
	assert.Empty(t, r.sites)
}
