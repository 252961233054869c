package memtrack

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/claims"
)

// A plan that is not one is refused with what is wrong, before anything is
// read, probed or claimed: the device's figures stay as they were and the
// board has no claim.
// TestViaInTheArithmetic: each Via is the arithmetic's of the same name,
// and one past the last is none in either.
func TestViaInTheArithmetic(t *testing.T) {
	for v := ViaAlloc; v <= numVias; v++ {
		assert.Equal(t, v.String(), v.fit().String(), "Via %d", uint8(v))
	}
	assert.Equal(t, "Via(3)", numVias.String())
}

func TestPlanRefused(t *testing.T) {
	board, err := OpenClaims(t.TempDir())
	require.NoError(t, err)
	cpu := CPU()
	part := PlanPart{Category: CategoryWeights, Size: 1 << 20, Count: 1}
	for _, tc := range []struct {
		name string
		plan Plan
		want error
		says string
	}{
		{"no device", Plan{Parts: []PlanPart{part}}, ErrInvalidDevice, ""},
		{"a CPU that is not", Plan{Device: Device{kind: KindCPU, ordinal: 2}, Parts: []PlanPart{part}}, ErrInvalidOrdinal, ""},
		{"a kind of no device", Plan{Device: Device{kind: numKinds + 3}, Parts: []PlanPart{part}}, ErrInvalidDevice, ""},
		{"a device not built", Plan{Device: Device{kind: KindMetal}, Parts: []PlanPart{part}}, ErrBackendNotBuilt, ""},
		{"a negative size", Plan{Device: cpu, Parts: []PlanPart{part, {Size: -1, Count: 1}}}, ErrInvalidSize, "part 1 of the plan of cpu: 1 buffers of -1 bytes"},
		{"a size of 0", Plan{Device: cpu, Parts: []PlanPart{{Size: 0, Count: 3}}}, ErrInvalidSize, "3 buffers of 0 bytes"},
		{"no buffer", Plan{Device: cpu, Parts: []PlanPart{{Size: 5, Count: 0}}}, ErrInvalidSize, "0 buffers of 5 bytes"},
		{"a negative count", Plan{Device: cpu, Parts: []PlanPart{{Size: 5, Count: -2}}}, ErrInvalidSize, "-2 buffers"},
		{"no way", Plan{Device: cpu, Parts: []PlanPart{{Via: Via(7), Size: 5, Count: 1}}}, ErrInvalidArgument, "Via(7) is no way of allocating"},
		{"negative transient memory", Plan{Device: cpu, Transient: -1}, ErrInvalidSize, "a transient memory of -1 bytes"},
		{"transient memory of no way", Plan{Device: cpu, Transient: 1, TransientVia: Via(9)}, ErrInvalidArgument, "Via(9)"},
		{"a negative graph need", Plan{Device: cpu, GraphNeed: -1}, ErrInvalidSize, "a graph need of -1 bytes"},
		{"a negative headroom", Plan{Device: cpu, Headroom: -1}, ErrInvalidSize, "a headroom of -1 bytes"},
		{"a negative block size", Plan{Device: cpu, BlockSize: -16}, ErrInvalidSize, "a block size of -16 bytes"},
		{"the CPU's memory pool", Plan{Device: cpu, Parts: []PlanPart{{Via: ViaAllocAsync, Size: 5, Count: 1}}}, ErrNotSupported, "memory pools"},
		{"the CPU's transient pool", Plan{Device: cpu, Transient: 5, TransientVia: ViaAllocAsync}, ErrNotSupported, "memory pools"},
		{"the CPU's CUDA graphs", Plan{Device: cpu, GraphNeed: 1 << 20}, ErrNotSupported, "CUDA graphs"},
		{"a mapping off the granularity", Plan{Device: cpu, Parts: []PlanPart{{Via: ViaMap, Size: int64(os.Getpagesize()) + 1, Count: 1}}}, ErrInvalidArgument, "not a multiple of the granularity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.plan.Claims = board
			before := cpu.MemoryStats()
			p, err := tc.plan.Predict()
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.says)
			assert.Equal(t, 1, countPrefix(err.Error()), "one prefix: %v", err)
			assert.Equal(t, Prediction{Plan: tc.plan}, p, "nothing predicted")
			assert.Equal(t, before, cpu.MemoryStats(), "nothing counted")
			entries, err := os.ReadDir(board.Dir())
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing claimed")
		})
	}
}

func countPrefix(s string) int {
	n := 0
	for i := 0; i+len(prefix) <= len(s); i++ {
		if s[i:i+len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// fitChild marks the tests' children: a process of their own, for the
// categories they make on the CPU and for a probe's answer and the
// driver's configuration on a GPU.
const fitChild = "MEMTRACK_FIT_CHILD"

// On the CPU, a buffer from 1 MiB is mapped from the OS in whole pages, a
// smaller one comes from the Go heap as asked, a mapping takes its pages:
// the prediction says so, part by part, and the check finds each
// category's Tracked grown as planned. It runs in a process of its own:
// its categories, the KV cache's among them, stay there.
func TestPredictCPU(t *testing.T) {
	if !childtest.InChild(t, fitChild) {
		return
	}
	d := CPU()
	page := int64(os.Getpagesize())
	g, err := d.MapGranularity()
	require.NoError(t, err)
	plan := Plan{Device: d, Parts: []PlanPart{
		{Category: "fit heap", Size: 1000, Count: 3},
		{Category: "fit mapped", Size: 1<<20 + 1, Count: 2},
		{Category: "fit reserved", Via: ViaMap, Size: 4 * g, Count: 2},
		{Category: CategoryKVCache, Size: 8 << 20, Count: 2},
	}, Transient: 5<<20 + 1, BlockSize: 8<<20 + 1, Headroom: 1 << 20}
	p, err := plan.Predict()
	require.NoError(t, err)
	rounded := (1<<20 + 1 + page - 1) / page * page
	want := []PartPrediction{
		{PlanPart: plan.Parts[0], Rounded: 1000, Predicted: 3000},
		{PlanPart: plan.Parts[1], Rounded: rounded, Predicted: 2 * rounded},
		{PlanPart: plan.Parts[2], Rounded: 4 * g, Predicted: 8 * g},
		{PlanPart: plan.Parts[3], Rounded: 8 << 20, Predicted: 16 << 20},
	}
	assert.Equal(t, want, p.Parts)
	assert.Equal(t, page, p.AllocUnit)
	assert.Equal(t, g, p.Granularity)
	assert.Zero(t, p.PoolChunk)
	assert.Equal(t, 3000+2*rounded+8*g+16<<20, p.Predicted)
	transient := (5<<20 + 1 + page - 1) / page * page
	assert.Equal(t, transient, p.Transient)
	assert.Equal(t, p.Predicted+transient, p.Need)
	assert.Equal(t, SourceOS, p.Source)
	assert.False(t, p.PerProcess)
	assert.NoError(t, p.PerProcessErr)
	assert.Positive(t, p.Free)
	assert.Equal(t, p.Free-1<<20-p.Need, p.Room)
	assert.True(t, p.Fits)
	block := (8<<20 + 1 + page - 1) / page * page
	assert.Equal(t, (p.Free-1<<20-(p.Need-16<<20))/block, p.Blocks, "the blocks beside the load but its cache")

	// The load, written (the OS counts a page once it is written).
	var bufs []*Buffer
	defer func() {
		for _, b := range bufs {
			assert.NoError(t, b.Free())
		}
	}()
	var res []*Reservation
	defer func() {
		for _, r := range res {
			for off, n := int64(0), r.Mapped(); off < n; off += 4 * g {
				assert.NoError(t, r.Unmap(off, 4*g))
			}
			assert.NoError(t, r.Release())
		}
	}()
	for _, part := range plan.Parts {
		c, err := d.Category(part.Category)
		require.NoError(t, err)
		if part.Via == ViaMap {
			r, err := c.Reserve(part.Size * part.Count)
			require.NoError(t, err)
			res = append(res, r)
			for i := range part.Count {
				require.NoError(t, r.Map(i*part.Size, part.Size))
				writePages(r.Bytes(i*part.Size, part.Size))
			}
			continue
		}
		for range part.Count {
			b, err := c.Alloc(part.Size)
			require.NoError(t, err)
			writePages(b.Bytes())
			bufs = append(bufs, b)
		}
	}
	c, err := p.Check()
	require.NoError(t, err)
	for i, cf := range c.Categories {
		assert.Equal(t, plan.Parts[i].Category, cf.Category)
		assert.Equal(t, plan.Parts[i].Size*plan.Parts[i].Count, cf.Planned)
		assert.Equal(t, cf.Planned, cf.TrackedIncrease, "the load is the plan's")
	}
	assert.Equal(t, c.After-p.Before, c.Measured)
	assert.Equal(t, c.Measured-p.Predicted, c.Difference)
	assert.Equal(t, page, c.Within)
	t.Logf("the CPU: predicted %d, measured %d (difference %d); why: %q", p.Predicted, c.Measured, c.Difference, c.Why)
	assert.Equal(t, abs64(c.Difference) > c.Within, len(c.Why) > 0, "a reason where the difference passes a page")
}

func writePages(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
}

// WithMeasurement takes the transient memory and the graphs of a
// measurement of the same kind of device, here or from a file; another
// kind's, or no measurement, is refused and the plan stays.
func TestPlanWithMeasurement(t *testing.T) {
	plan := Plan{Device: CPU(), Parts: []PlanPart{{Size: 1, Count: 1}}, Headroom: 7}
	got, err := plan.WithMeasurement(Measurement{Device: CPU(), Total: 1 << 30, PeakTrackedIncrease: 52 << 20, PeakHeldIncrease: 40 << 20, GraphNeed: 3})
	require.NoError(t, err)
	want := plan
	want.Transient, want.GraphNeed = 52<<20, 3
	assert.Equal(t, want, got)
	got, err = plan.WithMeasurement(Measurement{Device: CPU(), Total: 1 << 30, PeakTrackedIncrease: 52 << 20, PeakHeldIncrease: 60 << 20})
	require.NoError(t, err)
	assert.Equal(t, int64(60<<20), got.Transient, "the device-side peak, where frees in stream order raised it")

	for name, m := range map[string]Measurement{
		"another kind":      {Device: Device{kind: KindCUDA}, Total: 1 << 30},
		"no measurement":    {Device: CPU()},
		"a negative peak":   {Device: CPU(), Total: 1, PeakTrackedIncrease: -5, PeakHeldIncrease: 3},
		"a negative graphs": {Device: CPU(), Total: 1, GraphNeed: -5},
	} {
		got, err := plan.WithMeasurement(m)
		require.ErrorIs(t, err, ErrInvalidArgument, name)
		assert.Equal(t, plan, got, name)
	}
}

// postOther posts a claim of bytes on d as another process would, on
// another host (whose liveness no reader knows), made at made.
func postOther(t *testing.T, c *Claims, d Device, bytes int64, made time.Time) *claims.Posted {
	t.Helper()
	key, err := claimKey(d)
	require.NoError(t, err)
	p, err := c.board.Post(claims.Claim{Device: key, Bytes: bytes, Base: -1,
		Owner: claims.Owner{Host: "another-host", PIDNS: "pid:[1]", PID: 4242, Start: 7}, Made: made, Expires: made.Add(time.Hour)})
	require.NoError(t, err)
	return p
}

// Other processes' claims count as memory in use: the prediction's room
// shrinks by them, and a load that no longer fits says so with the blocks
// that would; this process's own claim is not counted against it, and its
// Wait counts only the claims posted before it.
func TestPredictCountsClaims(t *testing.T) {
	d := CPU()
	board, err := OpenClaims(t.TempDir())
	require.NoError(t, err)
	plan := Plan{Device: d, Parts: []PlanPart{{Size: 64 << 20, Count: 1}, {Category: CategoryKVCache, Size: 16 << 20, Count: 4}},
		BlockSize: 16 << 20, Claims: board}
	alone, err := plan.Predict()
	require.NoError(t, err)
	require.True(t, alone.Fits)

	other := postOther(t, board, d, alone.Free-alone.Need/2, time.Now().Add(-time.Minute))
	p, err := plan.Predict()
	require.NoError(t, err)
	assert.Equal(t, other.Claim().Bytes, p.Claimed)
	assert.False(t, p.Fits, "the other's claim leaves less than the load needs")
	assert.Equal(t, p.Free-p.Claimed-p.Need, p.Room)
	assert.Equal(t, max(p.Free-p.Claimed-(64<<20), 0)/(16<<20), p.Blocks, "the blocks that would fit beside the weights")
	n, err := board.Claimed(d)
	require.NoError(t, err)
	assert.Equal(t, p.Claimed, n)

	_, err = alone.Claim(0)
	require.ErrorIs(t, err, ErrInvalidSize)
	noBoard := alone
	noBoard.Plan.Claims = nil
	_, err = noBoard.Claim(time.Minute)
	require.ErrorIs(t, err, ErrInvalidArgument)

	mine, err := p.Claim(time.Minute)
	require.NoError(t, err)
	assert.Equal(t, p.Need, mine.Bytes())
	assert.Equal(t, d, mine.Device())
	again, err := plan.Predict()
	require.NoError(t, err)
	assert.Equal(t, p.Claimed, again.Claimed, "this process's own claim is not counted against it")

	// The earlier claim keeps the room away: Wait gives up at ctx's end.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	w, err := mine.Wait(ctx, time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "waiting for room for")
	assert.False(t, w.Fits)

	// A claim posted after this one waits for it: Wait does not count it.
	later := postOther(t, board, d, alone.Free, time.Now().Add(time.Minute))
	require.NoError(t, other.Withdraw())
	w, err = mine.Wait(context.Background(), time.Millisecond)
	require.NoError(t, err)
	assert.True(t, w.Fits)
	assert.Zero(t, w.Claimed, "the later claim waits for this one")
	p, err = plan.Predict()
	require.NoError(t, err)
	assert.Equal(t, min(later.Claim().Bytes, p.Total), p.Claimed, "a prediction without a claim of its own counts every other")

	require.NoError(t, mine.Renew())
	require.NoError(t, mine.Withdraw())
	require.ErrorIs(t, mine.Withdraw(), ErrInvalidArgument, "withdrawn already")
	require.ErrorIs(t, mine.Renew(), ErrInvalidArgument)
	_, err = mine.Wait(context.Background(), time.Millisecond)
	require.Error(t, err, "a withdrawn claim waits for nothing")
	require.NoError(t, later.Withdraw())
	entries, err := os.ReadDir(board.Dir())
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// Wait returns once the room comes: here when the earlier claim that
// kept it away is withdrawn, on another goroutine.
func TestClaimWaitsForRoom(t *testing.T) {
	d := CPU()
	board, err := OpenClaims(t.TempDir())
	require.NoError(t, err)
	plan := Plan{Device: d, Parts: []PlanPart{{Size: 64 << 20, Count: 1}}, Claims: board}
	p, err := plan.Predict()
	require.NoError(t, err)
	other := postOther(t, board, d, p.Total, time.Now().Add(-time.Second))
	mine, err := p.Claim(time.Minute)
	require.NoError(t, err)
	defer mine.Withdraw()

	waiting := make(chan struct{})
	done := make(chan error, 1)
	var got Prediction
	go func() {
		close(waiting)
		var err error
		got, err = mine.Wait(context.Background(), time.Millisecond)
		done <- err
	}()
	<-waiting
	select {
	case err := <-done:
		t.Fatalf("Wait returned while the earlier claim keeps the room away: %v", err)
	default:
	}
	require.NoError(t, other.Withdraw())
	require.NoError(t, <-done)
	assert.True(t, got.Fits)
	assert.Zero(t, got.Claimed)
}

// A follower that counts claims sets the others' claims aside as in use:
// its cache shrinks for them at the next reading, and grows back once they
// are withdrawn; CountClaims(nil) stops counting.
func TestFollowerCountsClaims(t *testing.T) {
	d := CPU()
	board, err := OpenClaims(t.TempDir())
	require.NoError(t, err)
	base, err := d.Baseline()
	require.NoError(t, err)
	m, err := d.Measure(func() error { return nil })
	require.NoError(t, err)
	const block = 64 << 20
	f, err := m.Follow(base, 0.01, block)
	require.NoError(t, err)
	require.NoError(t, f.CountClaims(board))
	alone, err := f.Read()
	require.NoError(t, err)
	require.Positive(t, alone.Blocks)
	assert.Zero(t, alone.Common.Budgets[0].Claimed)

	// A claim of the whole device: past the share the utilization leaves
	// outside the budget by all the budget requests.
	claimed := alone.Common.Budgets[0].Requested + (m.Total - alone.Common.Budgets[0].Requested)
	other := postOther(t, board, d, claimed, time.Now())
	tg, err := f.Read()
	require.NoError(t, err)
	assert.Equal(t, claimed, tg.Common.Budgets[0].Claimed)
	assert.Zero(t, tg.Blocks, "no block left")
	assert.True(t, tg.Changed)

	require.NoError(t, other.Withdraw())
	tg, err = f.Read()
	require.NoError(t, err)
	assert.Zero(t, tg.Common.Budgets[0].Claimed)
	assert.Equal(t, alone.Blocks, tg.Blocks, "back once the claim is withdrawn")

	postOther(t, board, d, claimed, time.Now())
	require.NoError(t, f.CountClaims(nil))
	tg, err = f.Read()
	require.NoError(t, err)
	assert.Zero(t, tg.Common.Budgets[0].Claimed, "claims no longer counted")
	assert.Equal(t, alone.Blocks, tg.Blocks)

	var none *Follower
	require.ErrorIs(t, none.CountClaims(board), ErrInvalidArgument)
}

// In the reading's arithmetic, a claim is memory in use outside the
// budget: it moves OverShare as another process's memory does, no more.
func TestFollowerClaimArithmetic(t *testing.T) {
	m := Measurement{Device: CPU(), Total: 10 << 30, StartTracked: 1 << 30, PeakTracked: 1 << 30, EndTracked: 1 << 30, StartUsed: 1 << 30, EndUsed: 1 << 30}
	base := Usage{Device: CPU(), Total: 10 << 30, Free: 10 << 30}
	b, err := m.budget(base, 0.8, 1<<30, false, true)
	require.NoError(t, err)
	reading := Usage{Device: CPU(), Total: 10 << 30, Tracked: 1 << 30, Used: 1 << 30}
	for _, tc := range []struct {
		claimed, over int64
	}{{0, 0}, {1 << 30, 0}, {2 << 30, 0}, {3 << 30, 1 << 30}, {10 << 30, 8 << 30}} {
		f := &Follower{parts: []followed{{budget: b, baseTracked: 0, total: m.Total}}}
		tg, err := f.next([]Usage{reading}, []int64{tc.claimed})
		require.NoError(t, err)
		got := tg.Common.Budgets[0]
		assert.Equal(t, tc.claimed, got.Claimed)
		assert.Equal(t, tc.over, got.OverShare, "claimed %d: past the 2 GiB outside the share", tc.claimed)
		assert.Equal(t, b.SetAside+tc.over, got.SetAside)
	}
}

func TestOpenClaimsRefused(t *testing.T) {
	_, err := OpenClaims("")
	require.ErrorIs(t, err, ErrInvalidArgument)
	file := t.TempDir() + "/file"
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = OpenClaims(file)
	require.ErrorIs(t, err, ErrInvalidArgument)
	var c *Claims
	_, err = c.Claimed(CPU())
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.True(t, errors.Is(err, ErrInvalidArgument))
	assert.NotEmpty(t, DefaultClaimsDir())
}
