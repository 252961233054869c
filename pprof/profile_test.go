package pprof

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	funcA = "github.com/memtrack/memtrack/pprof.allocFromA"
	funcB = "github.com/memtrack/memtrack/pprof.allocFromB"
)

// The allocation helpers are the known call sites of the tests: each
// allocates from a frame of its own.

//go:noinline
func allocFromA(d memtrack.Device, size int64) (*memtrack.Buffer, error) { return d.Alloc(size) }

//go:noinline
func allocFromB(d memtrack.Device, size int64) (*memtrack.Buffer, error) { return d.Alloc(size) }

// allocOK returns the buffer of an allocation helper, failing the test on
// an error: allocOK(t)(allocFromA(d, n)).
func allocOK(t testing.TB) func(*memtrack.Buffer, error) *memtrack.Buffer {
	return func(b *memtrack.Buffer, err error) *memtrack.Buffer {
		t.Helper()
		require.NoError(t, err)
		return b
	}
}

// recording enables allocation sites on the CPU for the test, every
// allocation recorded (rate 1), and disables them when it ends.
func recording(t *testing.T, depth int) memtrack.Device {
	t.Helper()
	d := memtrack.CPU()
	require.NoError(t, d.Sites().SetRate(1))
	t.Cleanup(func() { require.NoError(t, d.Sites().SetRate(0)) })
	require.NoError(t, d.Sites().Enable(depth))
	t.Cleanup(d.Sites().Disable)
	return d
}

func freeAll(t testing.TB, bufs ...*memtrack.Buffer) {
	for _, b := range bufs {
		require.NoError(t, b.Free())
	}
}

// readProfile writes and parses the device's profile.
func readProfile(t *testing.T, d memtrack.Device, kind Kind) *profile.Profile {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, WriteProfile(&buf, d, kind))
	p, err := profile.Parse(&buf)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	return p
}

// byLeaf sums a profile's samples by their innermost function: objects and
// bytes.
func byLeaf(p *profile.Profile) map[string][2]int64 {
	out := map[string][2]int64{}
	for _, s := range p.Sample {
		l := s.Location[0].Line[0].Function.Name
		f := out[l]
		out[l] = [2]int64{f[0] + s.Value[0], f[1] + s.Value[1]}
	}
	return out
}

func sampleTypes(p *profile.Profile) []string {
	var out []string
	for _, st := range p.SampleType {
		out = append(out, st.Type+"/"+st.Unit)
	}
	return out
}

func TestWriteProfileAttributesBytes(t *testing.T) {
	d := recording(t, 32)
	var bufs []*memtrack.Buffer
	for range 3 {
		bufs = append(bufs, allocOK(t)(allocFromA(d, 1000)))
	}
	for range 2 {
		bufs = append(bufs, allocOK(t)(allocFromB(d, 5000)))
	}
	defer func() { freeAll(t, bufs...) }()

	p := readProfile(t, d, InUse)
	assert.Equal(t, []string{"inuse_objects/count", "inuse_space/bytes"}, sampleTypes(p))
	assert.Equal(t, "inuse_space", p.DefaultSampleType)
	assert.Equal(t, int64(1), p.Period, "the sampling rate")
	assert.Contains(t, p.Comments, "memtrack: every allocation recorded (sampling rate 1)")
	assert.Equal(t, map[string][2]int64{funcA: {3, 3000}, funcB: {2, 10000}}, byLeaf(p))

	// The stacks go on past the known functions, up to the test.
	for _, s := range p.Sample {
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		assert.Contains(t, names, "github.com/memtrack/memtrack/pprof.TestWriteProfileAttributesBytes")
		assert.Equal(t, []string{"cpu"}, s.Label["device"])
	}

	// One buffer of each freed: the profile follows.
	require.NoError(t, bufs[0].Free())
	require.NoError(t, bufs[4].Free())
	bufs = append(bufs[1:4:4], bufs[5:]...)
	assert.Equal(t, map[string][2]int64{funcA: {2, 2000}, funcB: {1, 5000}}, byLeaf(readProfile(t, d, InUse)))
}

func TestPeakProfileKeepsTheBreakdown(t *testing.T) {
	d := recording(t, 32)
	a1 := allocOK(t)(allocFromA(d, 1000))
	b1 := allocOK(t)(allocFromB(d, 4000))
	a2 := allocOK(t)(allocFromA(d, 2000)) // the peak: A 3000, B 4000
	freeAll(t, a1, b1, a2)
	a3 := allocOK(t)(allocFromA(d, 500))

	peak := readProfile(t, d, Peak)
	assert.Equal(t, []string{"peak_inuse_objects/count", "peak_inuse_space/bytes"}, sampleTypes(peak))
	assert.Equal(t, "peak_inuse_space", peak.DefaultSampleType)
	assert.Equal(t, map[string][2]int64{funcA: {2, 3000}, funcB: {1, 4000}}, byLeaf(peak),
		"the breakdown at the peak outlives the buffers")
	assert.Equal(t, map[string][2]int64{funcA: {1, 500}}, byLeaf(readProfile(t, d, InUse)))
	assert.Equal(t, int64(7000), d.Sites().Stats().PeakBytes)

	d.ResetPeakMemoryStats()
	assert.Equal(t, map[string][2]int64{funcA: {1, 500}}, byLeaf(readProfile(t, d, Peak)),
		"a reset makes the live set the peak")

	b2 := allocOK(t)(allocFromB(d, 800))
	freeAll(t, b2, a3)
	assert.Equal(t, map[string][2]int64{funcA: {1, 500}, funcB: {1, 800}}, byLeaf(readProfile(t, d, Peak)),
		"a new peak replaces the breakdown")
	assert.Empty(t, readProfile(t, d, InUse).Sample)
}

// The site without a stack, where memtrack folds the allocations past
// MaxAllocationSites stacks, is one location named memtrack.other.
func TestWriteProfileNamesTheFoldedSite(t *testing.T) {
	d := recording(t, 32)
	a := allocOK(t)(allocFromA(d, 100))
	defer freeAll(t, a)
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	snap.Sites = append(snap.Sites, memtrack.Site{Buffers: 2, Bytes: 200})
	var buf bytes.Buffer
	require.NoError(t, build(snap).Write(&buf))
	p, err := profile.Parse(&buf)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	assert.Equal(t, map[string][2]int64{funcA: {1, 100}, memtrack.OtherSite: {2, 200}}, byLeaf(p))
}

func TestWriteProfileErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
		err  error
	}{
		{"not recording", InUse, memtrack.ErrSitesNotRecorded},
		{"bad kind", Peak + 1, ErrInvalidKind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			assert.ErrorIs(t, WriteProfile(&buf, memtrack.CPU(), tc.kind), tc.err)
			assert.Zero(t, buf.Len(), "nothing written")
		})
	}
}

// As Go's heap profiles do, a sampled profile says its rate: the Period is
// the rate and a comment says what it means; the values are scaled.
func TestWriteProfileSaysItsRate(t *testing.T) {
	d := recording(t, 32)
	require.NoError(t, d.Sites().SetRate(4096))
	bufs := []*memtrack.Buffer{allocOK(t)(allocFromA(d, 64<<20))} // sampled: p = 1 - exp(-16384)
	defer func() { freeAll(t, bufs...) }()
	for _, kind := range []Kind{InUse, Peak} {
		p := readProfile(t, d, kind)
		assert.Equal(t, &profile.ValueType{Type: "space", Unit: "bytes"}, p.PeriodType)
		assert.Equal(t, int64(4096), p.Period)
		assert.Contains(t, p.Comments, "memtrack: sampled, on average one sample per 4096 bytes allocated (Device.Sites().SetRate); values scaled to estimate all allocations")
		assert.Equal(t, map[string][2]int64{funcA: {1, 64 << 20}}, byLeaf(p), "a weight of 1 + 1e-7000 rounds to the exact figures")
	}
}
