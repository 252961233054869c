//go:build cuda

package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/childtest"
)

// fitRow is one load of the table: its plan's parts, its transient memory,
// the graphs it captures and launches (each one allocation of the size
// given, freed in the graph, on one stream), and what the device holds
// before it outside the plan (a buffer of the pool kept from an earlier
// load).
type fitRow struct {
	name      string
	ordinal   int
	parts     []PlanPart
	transient int64
	via       Via // the transient memory's
	graphs    []int64
	poolKept  int64
}

// TestCUDAFitTable: each load of the table is predicted, made, and
// checked: the figure the prediction reads (NVML's figure of this process
// on the fake, or the device's used memory without NVML) grows by exactly
// what it predicted, the pool's and the graphs' reservations by exactly
// their predicted increases, and each category's Tracked by its plan. The
// rules come from the driver (its granularity, its pools' chunk learned
// by a probe, its graphs' chunk learned by another): nothing in the test
// knows the fake's constants.
func TestCUDAFitTable(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	g, err := d.MapGranularity()
	require.NoError(t, err)
	const mib = 1 << 20
	rows := []fitRow{
		{name: "weights of 64 MiB", parts: []PlanPart{{Category: CategoryWeights, Size: 64 * mib, Count: 1}}},
		{name: "one byte", parts: []PlanPart{{Size: 1, Count: 1}}},
		{name: "buffers off the granularity", parts: []PlanPart{{Category: CategoryWorkspace, Size: 2*mib + 1, Count: 3}, {Size: mib, Count: 5}, {Size: 4096, Count: 2}}},
		{name: "the pool: one byte", parts: []PlanPart{{Category: CategoryActivations, Via: ViaAllocAsync, Size: 1, Count: 1}}},
		{name: "the pool: 33 MiB", parts: []PlanPart{{Via: ViaAllocAsync, Size: 33 * mib, Count: 1}}},
		{name: "the pool: 65 MiB in 5", parts: []PlanPart{{Via: ViaAllocAsync, Size: 13 * mib, Count: 5}}},
		{name: "the pool: 100 MiB", parts: []PlanPart{{Via: ViaAllocAsync, Size: 100 * mib, Count: 1}}},
		{name: "the pool reuses what it reserves", poolKept: 20 * mib, parts: []PlanPart{{Via: ViaAllocAsync, Size: 5 * mib, Count: 2}}},
		{name: "the pool grows past what it reserves", poolKept: 20 * mib, parts: []PlanPart{{Via: ViaAllocAsync, Size: 40 * mib, Count: 1}}},
		{name: "mapped blocks", parts: []PlanPart{{Category: CategoryKVCache, Via: ViaMap, Size: 8 * g, Count: 8}}},
		{name: "transient activations", parts: []PlanPart{{Category: CategoryWeights, Size: 64 * mib, Count: 1}}, transient: 52*mib + 1},
		{name: "transient in the pool", parts: []PlanPart{{Via: ViaAllocAsync, Size: 10 * mib, Count: 1}}, transient: 30 * mib, via: ViaAllocAsync},
		{name: "CUDA graphs on one stream", graphs: []int64{28 * mib, 56 * mib, 112 * mib}},
		{name: "a whole load", parts: []PlanPart{
			{Category: CategoryWeights, Size: 64 * mib, Count: 1},
			{Category: CategoryWorkspace, Via: ViaAllocAsync, Size: 3 * mib, Count: 4},
			{Category: CategoryKVCache, Via: ViaMap, Size: 16 * mib, Count: 6},
		}, transient: 48 * mib, graphs: []int64{4 * mib, 40 * mib}},
	}
	if _, err := CUDA(1); err == nil {
		rows = append(rows, fitRow{name: "the second device", ordinal: 1, parts: []PlanPart{
			{Category: CategoryWeights, Size: 32*mib + 1, Count: 1},
			{Via: ViaAllocAsync, Size: 7 * mib, Count: 2},
			{Category: CategoryKVCache, Via: ViaMap, Size: 16 * mib, Count: 3},
		}, transient: 20 * mib})
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) { checkFitRow(t, row) })
	}
}

// checkFitRow predicts, makes and checks one load, then frees it and
// trims, so that the next row starts from a device that holds nothing of
// it.
func checkFitRow(t *testing.T, row fitRow) {
	d := cudaDevices(t, row.ordinal+1)[row.ordinal]
	s := newStream(t, d)
	require.NoError(t, d.Pool().Trim(0))
	require.NoError(t, d.Graphs().Trim())
	var bufs []*Buffer
	var async []*Buffer
	defer func() {
		for _, b := range bufs {
			assert.NoError(t, b.Free())
		}
		for _, b := range async {
			assert.NoError(t, b.FreeAsync(s))
		}
		syncStream(t, d, s)
		assert.NoError(t, d.Pool().Trim(0))
	}()
	if row.poolKept > 0 {
		b, err := d.AllocAsync(row.poolKept, s)
		require.NoError(t, err)
		async = append(async, b)
		syncStream(t, d, s)
	}

	// The graphs are captured first: a capture reserves nothing, and says
	// what each graph will need.
	var k *graphKit
	var execs []uintptr
	plan := Plan{Device: d, Parts: row.parts, Transient: row.transient, TransientVia: row.via}
	if len(row.graphs) > 0 {
		k, _ = newGraphKit(t)
		var caps []Capture
		for _, size := range row.graphs {
			graph, c, _ := k.allocGraph(s, size, true)
			caps = append(caps, c)
			execs = append(execs, k.exec(graph))
		}
		m, err := Measurement{Device: d}.WithGraphs(caps...)
		require.NoError(t, err)
		plan.GraphNeed = m.GraphNeed
		defer func() {
			for _, e := range execs {
				k.destroyExec(e)
			}
			assert.NoError(t, d.Graphs().Trim())
		}()
	}

	p, err := plan.Predict()
	require.NoError(t, err)
	require.True(t, p.Fits)

	// The load.
	for _, part := range plan.Parts {
		cat := part.Category
		alloc := d.Alloc
		allocAsync := d.AllocAsync
		if cat != "" {
			c, err := d.Category(cat)
			require.NoError(t, err)
			alloc, allocAsync = c.Alloc, c.AllocAsync
			if part.Via == ViaMap {
				r, err := c.Reserve(part.Size * part.Count)
				require.NoError(t, err)
				for i := range part.Count {
					require.NoError(t, r.Map(i*part.Size, part.Size))
				}
				defer func() {
					for i := range part.Count {
						assert.NoError(t, r.Unmap(i*part.Size, part.Size))
					}
					assert.NoError(t, r.Release())
				}()
				continue
			}
		}
		for range part.Count {
			if part.Via == ViaAllocAsync {
				b, err := allocAsync(part.Size, s)
				require.NoError(t, err)
				async = append(async, b)
			} else {
				b, err := alloc(part.Size)
				require.NoError(t, err)
				bufs = append(bufs, b)
			}
		}
	}
	if row.transient > 0 { // a pass: allocated at its peak, and freed
		if row.via == ViaAllocAsync {
			b, err := d.AllocAsync(row.transient, s)
			require.NoError(t, err)
			require.NoError(t, b.FreeAsync(s))
		} else {
			b, err := d.Alloc(row.transient)
			require.NoError(t, err)
			require.NoError(t, b.Free())
		}
	}
	for _, e := range execs {
		k.launch(e, s)
	}
	syncStream(t, d, s)

	c, err := p.Check()
	require.NoError(t, err)
	t.Logf("%-40s %s: predicted %d, measured %d (pool %d of %d predicted, graphs %d of %d); rules: unit %d, granularity %d, pool chunk %d",
		row.name, p.Source, p.Predicted, c.Measured, c.PoolReservedIncrease, p.PoolReservedIncrease,
		c.GraphReservedIncrease, p.GraphReservedIncrease, p.AllocUnit, p.Granularity, p.PoolChunk)
	assert.Equal(t, p.Predicted, c.Measured, "predicted = measured, as the driver counts it")
	assert.Zero(t, c.Difference)
	assert.Empty(t, c.Why)
	assert.Equal(t, p.PoolReservedIncrease, c.PoolReservedIncrease, "the pool's reservation")
	assert.Equal(t, p.GraphReservedIncrease, c.GraphReservedIncrease, "the graphs' reservation")
	for _, cf := range c.Categories {
		assert.Equal(t, cf.Planned, cf.TrackedIncrease, "category %q", cf.Category)
	}
	if onFake() {
		assert.Equal(t, SourceNVML, p.Source, "the fake NVML gives this process's figure")
	}
}

// The pools' chunk is learned once per device, by one probe of a pool of
// memtrack's own, which leaves the device's current pool as it was.
func TestCUDAFitPoolProbeOnce(t *testing.T) {
	if !childtest.InChild(t, fitChild) {
		return
	}
	d := cudaDevices(t, 1)[0]
	calls, counted := countCalls(t, "cuMemPoolCreate", "cuMemAllocFromPoolAsync", "cuMemPoolDestroy")
	before, err := d.Pool().Stats()
	require.NoError(t, err)
	plan := Plan{Device: d, Parts: []PlanPart{{Via: ViaAllocAsync, Size: 1, Count: 1}}}
	first, err := plan.Predict()
	require.NoError(t, err)
	require.Positive(t, first.PoolChunk)
	for range 3 {
		p, err := plan.Predict()
		require.NoError(t, err)
		assert.Equal(t, first.PoolChunk, p.PoolChunk)
	}
	after, err := d.Pool().Stats()
	require.NoError(t, err)
	assert.Equal(t, before, after, "the device's pool as it was")
	if counted {
		assert.Equal(t, map[string]uint64{"cuMemPoolCreate": 1, "cuMemAllocFromPoolAsync": 1, "cuMemPoolDestroy": 1}, calls(), "one probe")
	}
	// A plan without the pool probes nothing.
	_, err = Plan{Device: d, Parts: []PlanPart{{Size: 1, Count: 1}}}.Predict()
	require.NoError(t, err)
}

// Plans a CUDA device cannot make are refused: mappings off the
// granularity, graphs on a driver without graph memory nodes, the pool on
// a device without pools.
func TestCUDAFitRefused(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	g, err := d.MapGranularity()
	require.NoError(t, err)
	_, err = Plan{Device: d, Parts: []PlanPart{{Via: ViaMap, Size: g + 1, Count: 1}}}.Predict()
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "not a multiple of the granularity")

	t.Run("no pools", func(t *testing.T) {
		if !childtest.InChild(t, fitChild, "FAKECUDA_NO_POOLS=1") {
			return
		}
		d := cudaDevices(t, 1)[0]
		_, err := Plan{Device: d, Parts: []PlanPart{{Via: ViaAllocAsync, Size: 1, Count: 1}}}.Predict()
		require.ErrorIs(t, err, ErrNotSupported)
		p, err := Plan{Device: d, Parts: []PlanPart{{Size: 1, Count: 1}}}.Predict()
		require.NoError(t, err, "the rest of a plan needs no pool")
		assert.Zero(t, p.PoolChunk)
	})
	t.Run("no graph memory", func(t *testing.T) {
		if !childtest.InChild(t, fitChild, "FAKECUDA_VERSION=11030") {
			return
		}
		d := cudaDevices(t, 1)[0]
		_, err := Plan{Device: d, GraphNeed: 1 << 20}.Predict()
		require.ErrorIs(t, err, ErrNotSupported)
	})
	t.Run("no probe", func(t *testing.T) {
		if !childtest.InChild(t, fitChild, "FAKECUDA_HIDE=cuMemAllocFromPoolAsync") {
			return
		}
		d := cudaDevices(t, 1)[0]
		_, err := Plan{Device: d, Parts: []PlanPart{{Via: ViaAllocAsync, Size: 1, Count: 1}}}.Predict()
		require.ErrorIs(t, err, ErrNotSupported)
		assert.Contains(t, err.Error(), "cuMemAllocFromPoolAsync")
	})
}
