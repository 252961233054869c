package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMeasureCategories measures a pass on a device with categories: each
// category's own peak during the pass is in the measurement, and Budget
// takes the weights from the weights category, setting the rest of the
// tracked growth before the pass aside as OtherTracked.
func TestMeasureCategories(t *testing.T) {
	const gib = 1 << 30
	_, ds := fakeCUDA(t, 1, 10*gib)
	d := ds[0]
	base, err := d.Baseline()
	require.NoError(t, err)
	cat := func(name string) Category {
		c, err := d.Category(name)
		require.NoError(t, err)
		return c
	}
	w, kv, act := cat(CategoryWeights), cat(CategoryKVCache), cat(CategoryActivations)
	wb, err := w.Alloc(3 * gib)
	require.NoError(t, err)
	ws, err := d.Alloc(gib / 2) // a workspace outside every category
	require.NoError(t, err)
	kb, err := kv.Alloc(gib)
	require.NoError(t, err)

	p, err := d.Measure(func() error {
		a, err := act.Alloc(gib)
		require.NoError(t, err)
		b, err := act.Alloc(gib / 2)
		require.NoError(t, err)
		require.NoError(t, a.Free())
		require.NoError(t, b.Free())
		k2, err := kv.Alloc(gib / 4) // the cache grows after the activations' peak
		require.NoError(t, err)
		return k2.Free()
	})
	require.NoError(t, err)
	assert.Equal(t, []CategoryMeasurement{
		{Category: CategoryWeights, StartTracked: 3 * gib, PeakTracked: 3 * gib, EndTracked: 3 * gib},
		{Category: CategoryKVCache, StartTracked: gib, PeakTracked: gib + gib/4, EndTracked: gib, PeakTrackedIncrease: gib / 4},
		{Category: CategoryActivations, PeakTracked: gib + gib/2, PeakTrackedIncrease: gib + gib/2},
	}, p.Categories)
	a, ok := p.Category(CategoryActivations)
	assert.True(t, ok)
	assert.Equal(t, int64(gib+gib/2), a.PeakTracked)
	_, ok = p.Category("nothing")
	assert.False(t, ok)

	b, err := p.Budget(base, 0.9, gib/4)
	require.NoError(t, err)
	assert.Equal(t, int64(3*gib), b.Weights, "the weights category, not the growth since the baseline")
	assert.Equal(t, int64(gib/2+gib), b.OtherTracked, "the workspace and the cache allocated before the pass")
	assert.Equal(t, p.StartTracked-base.Tracked, b.Weights+b.OtherTracked, "nothing tracked is lost from what is set aside")
	assert.Equal(t, b.Weights+b.OtherTracked+b.PeakIncrease+b.UntrackedIncrease, b.SetAside)

	// Without a weights category, Budget infers the weights as before.
	p.Categories = p.Categories[1:]
	b2, err := p.Budget(base, 0.9, gib/4)
	require.NoError(t, err)
	assert.Equal(t, p.StartTracked-base.Tracked, b2.Weights)
	assert.Zero(t, b2.OtherTracked)
	assert.Equal(t, b.SetAside, b2.SetAside)

	for _, x := range []*Buffer{wb, ws, kb} {
		require.NoError(t, x.Free())
	}
}

// TestMeasureCategoriesNested: measurements of a device with categories
// nest as the device's do. The inner measurement moves none of the outer
// one's category peaks, nor the category's own PeakTracked.
func TestMeasureCategoriesNested(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	act, err := d.Category(CategoryActivations)
	require.NoError(t, err)
	var inner Measurement
	outer, err := d.Measure(func() error {
		a, err := act.Alloc(8 << 10)
		require.NoError(t, err)
		require.NoError(t, a.Free())
		inner, err = d.Measure(func() error {
			b, err := act.Alloc(3 << 10)
			require.NoError(t, err)
			return b.Free()
		})
		return err
	})
	require.NoError(t, err)
	o, ok := outer.Category(CategoryActivations)
	require.True(t, ok)
	i, ok := inner.Category(CategoryActivations)
	require.True(t, ok)
	assert.Equal(t, int64(8<<10), o.PeakTrackedIncrease, "the inner measurement hid the outer one's peak")
	assert.Equal(t, int64(3<<10), i.PeakTrackedIncrease)
	assert.Equal(t, int64(8<<10), act.Stats().PeakTracked, "a measurement reset the category's peak")

	// A panicking pass leaves no category scope open.
	_, _, err = d.lookup(use)
	require.NoError(t, err)
	assert.Panics(t, func() {
		_, _ = d.Measure(func() error { panic("f failed") })
	})
	assert.False(t, act.set.recs[act.idx-1].HasOpenScopes(), "the category's scope of the panicking measurement is still open")
}
