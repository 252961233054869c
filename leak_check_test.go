package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

//go:noinline
func keepFrom(t testing.TB, d Device, size int64) *Buffer {
	b, err := d.Alloc(size)
	require.NoError(t, err)
	return b
}

func TestLeakCheckListsWhatItsRunLeftLive(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	before := keepFrom(t, d, 1) // before the check: not its business
	c, err := d.Leaks().StartCheck()
	require.NoError(t, err)
	assert.Equal(t, d, c.Device())
	assert.True(t, d.Sites().Stats().Enabled, "sites are on during the check")
	assert.Equal(t, int64(1), d.Sites().Stats().Rate, "every site")
	assert.False(t, d.Leaks().Enabled(), "the check watches without enabling the user's watch")

	kept := keepFrom(t, d, 100)
	freed := keepFrom(t, d, 200)
	require.NoError(t, freed.Free())
	tr, err := d.Track(300, 0xbeef0000) // indexed: listed though never collected
	require.NoError(t, err)
	leakFrom(t, d, 400) // collected during the check
	drainCleanups(t)

	ls := c.Leaks()
	require.Len(t, ls, 3)
	assert.Equal(t, []int64{100, 300, 400}, []int64{ls[0].Size, ls[1].Size, ls[2].Size}, "in allocation order")
	fn, _ := ls[0].Site()
	assert.Equal(t, "github.com/memtrack/memtrack.keepFrom", fn)
	assert.False(t, ls[0].Collected)
	assert.True(t, ls[1].Tracked)
	assert.True(t, ls[2].Collected, "found by the collector")
	assert.False(t, ls[2].Freed)
	assert.Empty(t, c.Leaks(), "each leak is listed once")
	c.End()
	c.End() // again: nothing
	assert.False(t, d.Sites().Stats().Enabled, "sites off again")
	assert.Nil(t, leaksOn(KindCUDA, 0), "watching off again")
	assert.Equal(t, LeakStats{Leaks: 1, LeakedBytes: 400}, d.Leaks().Stats(), "the collected one is counted")

	require.NoError(t, kept.Free())
	require.NoError(t, tr.Release())
	require.NoError(t, before.Free())
}

func TestLeakCheckRestoresSitesAndWatch(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	require.NoError(t, d.Sites().Enable(4))
	require.NoError(t, d.Sites().SetRate(1000))
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle, FreeLeaks: true}))

	c, err := d.Leaks().StartCheck()
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Sites().Stats().Rate)
	leakFrom(t, d, 64)
	l := sink.next(t)
	assert.True(t, l.Freed, "the user's watch goes on reporting and freeing")
	ls := c.Leaks()
	require.Len(t, ls, 1, "a leak freed during the check is listed")
	assert.True(t, ls[0].Collected)
	assert.True(t, ls[0].Freed)
	c.End()

	st := d.Sites().Stats()
	assert.True(t, st.Enabled)
	assert.Equal(t, int64(1000), st.Rate, "the rate put back")
	assert.Equal(t, 4, st.Depth)
	assert.True(t, d.Leaks().Enabled())
	d.Leaks().Disable()
	d.Sites().Disable()
}

func TestNestedLeakChecksListALeakOnce(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	outer, err := d.Leaks().StartCheck()
	require.NoError(t, err)
	a := keepFrom(t, d, 1)
	inner, err := d.Leaks().StartCheck()
	require.NoError(t, err)
	b := keepFrom(t, d, 2)
	ls := inner.Leaks()
	require.Len(t, ls, 1)
	assert.Equal(t, int64(2), ls[0].Size)
	inner.End()
	assert.True(t, d.Sites().Stats().Enabled, "the outer check keeps sites on")
	ls = outer.Leaks()
	require.Len(t, ls, 1, "the inner check's leak is not listed again")
	assert.Equal(t, int64(1), ls[0].Size)
	outer.End()
	assert.False(t, d.Sites().Stats().Enabled)
	require.NoError(t, a.Free())
	require.NoError(t, b.Free())
}

// TestUserWatchOffDuringACheck: Leaks().Disable during a check keeps the
// device watched for the check, silently.
func TestUserWatchOffDuringACheck(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: sink.handle}))
	c, err := d.Leaks().StartCheck()
	require.NoError(t, err)
	d.Leaks().Disable()
	leakFrom(t, d, 5)
	sink.none(t)
	ls := c.Leaks()
	require.Len(t, ls, 1)
	assert.True(t, ls[0].Collected)
	c.End()
	assert.Nil(t, leaksOn(KindCUDA, 0))
}

// leaksOn returns the leak watch in the hook set of device ordinal of kind
// k, or nil while it is not watched.
func leaksOn(k Kind, ordinal int) *deviceLeaks {
	dl, _ := tableOf(k).hookOf(ordinal, leaksSlot).(*deviceLeaks)
	return dl
}

// TestLeakNamesItsCategory: a leak says the category its buffer or handle
// was allocated or tracked through, whether a LeakCheck lists it or the
// collector finds it; "" for none.
func TestLeakNamesItsCategory(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	w, err := d.Category(CategoryWeights)
	require.NoError(t, err)
	c, err := d.Leaks().StartCheck()
	require.NoError(t, err)
	defer c.End()

	kept, err := kv.Alloc(100)
	require.NoError(t, err)
	tr, err := w.Track(200, 0xca7000)
	require.NoError(t, err)
	plain := keepFrom(t, d, 300)
	leakThrough(t, kv, 400) // found by the collector
	drainCleanups(t)

	ls := c.Leaks()
	require.Len(t, ls, 4)
	got := map[int64]string{}
	for _, l := range ls {
		got[l.Size] = l.Category
	}
	assert.Equal(t, map[int64]string{100: CategoryKVCache, 200: CategoryWeights, 300: "", 400: CategoryKVCache}, got)
	require.NoError(t, kept.Free())
	require.NoError(t, tr.Release())
	require.NoError(t, plain.Free())
}

// leakThrough allocates size bytes through c and drops the buffer.
//
//go:noinline
func leakThrough(t testing.TB, c Category, size int64) {
	_, err := c.Alloc(size)
	require.NoError(t, err)
	leftOnPurpose(c.Device(), size)
}
