package bench

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/tracker"
)

// counterDesign is what the agreement tests drive: a design that keeps the
// current figure and the peak of several devices.
type counterDesign interface {
	alloc(dev int, n int64) error
	free(dev int, n int64) error
	load(dev int) (current, peak int64)
}

// The per-device designs, as counterDesigns over a slice of devices.
type (
	trackerCounters []tracker.Counter
	mutexCounters   []mutexCounter
	packedCounters  []packedCounter
)

func (c trackerCounters) alloc(dev int, n int64) error { return c[dev].Alloc(n) }
func (c trackerCounters) free(dev int, n int64) error  { return c[dev].Free(n) }
func (c trackerCounters) load(dev int) (int64, int64)  { return c[dev].Load() }
func (c mutexCounters) alloc(dev int, n int64) error   { return c[dev].alloc(n) }
func (c mutexCounters) free(dev int, n int64) error    { return c[dev].free(n) }
func (c mutexCounters) load(dev int) (int64, int64)    { return c[dev].load() }
func (c packedCounters) alloc(dev int, n int64) error  { return c[dev].alloc(n) }
func (c packedCounters) free(dev int, n int64) error   { return c[dev].free(n) }
func (c packedCounters) load(dev int) (int64, int64)   { return c[dev].load() }
func newCounterDesigns(devices int) map[string]counterDesign {
	return map[string]counterDesign{
		"Counter":  make(trackerCounters, devices),
		"mutexmap": newMapCounters(devices),
		"mutexdev": make(mutexCounters, devices),
		"packed":   make(packedCounters, devices),
	}
}

// op is one step of a sequence: an Alloc (or a Free) of n bytes on dev.
type op struct {
	dev   int
	n     int64
	alloc bool
}

// sequence returns a reproducible sequence of steps over the devices, with
// refusals mixed in: sizes <= 0, frees of more than is held, frees on an
// empty device.
func sequence(seed uint64, steps, devices int) []op {
	rng := rand.New(rand.NewPCG(seed, 0))
	ops := make([]op, steps)
	for i := range ops {
		ops[i] = op{dev: rng.IntN(devices), n: rng.Int64N(1<<20) - 1<<10, alloc: rng.IntN(5) < 3}
	}
	return ops
}

// wideSequence is a sequence whose sizes also take the paths that small
// sizes never reach: sizes at and past tracker's 16 MiB fast-path bound,
// and sizes near tracker.MaxCount that the capacity refuses.
func wideSequence(seed uint64, steps, devices int) []op {
	rng := rand.New(rand.NewPCG(seed, 1))
	ops := sequence(seed, steps, devices)
	for i := range ops {
		switch rng.IntN(10) {
		case 0, 1:
			ops[i].n = packedFastMax - 1 + rng.Int64N(3) // 16 MiB - 1 to + 1
		case 2, 3:
			ops[i].n = packedFastMax + rng.Int64N(1<<30)
		case 4:
			ops[i].n = tracker.MaxCount/2 + rng.Int64N(1<<32) - 1<<31
		}
	}
	return ops
}

// TestCountersAgree drives every design that stands against tracker.Counter
// through the same sequences and checks that each accepts and refuses the
// same steps and reports the same current figure and peak after each.
func TestCountersAgree(t *testing.T) {
	const devices = 3
	for _, seq := range []struct {
		name string
		seed uint64
		make func(seed uint64, steps, devices int) []op
	}{
		{"small", 1, sequence}, {"small", 2, sequence}, {"small", 3, sequence},
		{"wide", 4, wideSequence}, {"wide", 5, wideSequence},
	} {
		seed := seq.seed
		ops := seq.make(seed, 2000, devices)
		designs := newCounterDesigns(devices)
		ref := designs["Counter"]
		delete(designs, "Counter")
		refused, full := 0, 0
		for i, o := range ops {
			refErr := apply(ref, o)
			if refErr != nil {
				refused++
			}
			if errors.Is(refErr, tracker.ErrCapacity) {
				full++
			}
			wantCur, wantPeak := ref.load(o.dev)
			for name, d := range designs {
				err := apply(d, o)
				require.Equal(t, refErr == nil, err == nil, "seed %d step %d %+v: %s refused %v, Counter %v", seed, i, o, name, err, refErr)
				cur, peak := d.load(o.dev)
				require.Equal(t, [2]int64{wantCur, wantPeak}, [2]int64{cur, peak}, "seed %d step %d %+v: %s", seed, i, o, name)
			}
		}
		// The sequence exercised both outcomes.
		assert.Positive(t, refused, "seed %d", seed)
		assert.Less(t, refused, len(ops)/2, "seed %d", seed)
		if seq.name == "wide" {
			assert.Positive(t, full, "seed %d: the capacity refused nothing", seed)
		}
	}
}

// apply performs o on d.
func apply(d counterDesign, o op) error {
	if o.alloc {
		return d.alloc(o.dev, o.n)
	}
	return d.free(o.dev, o.n)
}

// TestRecordsAgree drives tracker.Record and mutexRecord through the same
// sequence, with and without a limit, and checks that every statistic
// agrees after each step.
func TestRecordsAgree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64
	}{{"no limit", 0}, {"limit", 3 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			var ref tracker.Record
			var rec mutexRecord
			require.NoError(t, ref.SetLimit(tc.limit))
			rec.setLimit(tc.limit)
			for i, o := range sequence(7, 3000, 1) {
				var refErr, err error
				if o.alloc {
					refErr, err = ref.Alloc(o.n), rec.alloc(o.n)
				} else {
					refErr, err = ref.Free(o.n), rec.free(o.n)
				}
				require.Equal(t, refErr == nil, err == nil, "step %d %+v: mutexRecord %v, Record %v", i, o, err, refErr)
				require.Equal(t, ref.Snapshot(), rec.snapshot(), "step %d %+v", i, o)
			}
			s := ref.Snapshot()
			assert.Positive(t, s.Frees)
			if tc.limit > 0 {
				assert.Positive(t, s.FailedAllocs, "the limit refused nothing")
			}
		})
	}
}

// TestDesignsAgreeConcurrently runs goroutines that each allocate a set of
// buffers on one device, meet at a barrier, check the figures, and free
// them: every design must report the exact total as both current figure and
// peak, and zero current afterwards. Under -race it proves the designs are
// safe for concurrent use.
func TestDesignsAgreeConcurrently(t *testing.T) {
	goroutines, perG := 8, 500
	if testing.Short() {
		perG = 50
	}
	var total int64
	for g := range goroutines {
		for i := range perG {
			total += int64(g*perG + i + 1)
		}
	}
	counters := newCounterDesigns(1)
	var rec mutexRecord
	var ref tracker.Record
	records := map[string]struct {
		alloc, free func(int64) error
		snapshot    func() tracker.Stats
	}{
		"Record":      {ref.Alloc, ref.Free, ref.Snapshot},
		"mutexRecord": {rec.alloc, rec.free, rec.snapshot},
	}

	var allocated, freed sync.WaitGroup
	allocated.Add(goroutines)
	freed.Add(goroutines)
	release := make(chan struct{})
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			defer freed.Done()
			each := func(f func(n int64) error) {
				for i := range perG {
					if err := f(int64(g*perG + i + 1)); err != nil {
						errs <- err
					}
				}
			}
			for _, d := range counters {
				each(func(n int64) error { return d.alloc(0, n) })
			}
			for _, r := range records {
				each(r.alloc)
			}
			allocated.Done()
			<-release
			for _, d := range counters {
				each(func(n int64) error { return d.free(0, n) })
			}
			for _, r := range records {
				each(r.free)
			}
		}()
	}
	allocated.Wait()
	for name, d := range counters {
		cur, peak := d.load(0)
		assert.Equal(t, [2]int64{total, total}, [2]int64{cur, peak}, "%s after the allocations", name)
	}
	n := int64(goroutines * perG)
	for name, r := range records {
		s := r.snapshot()
		assert.Equal(t, [4]int64{total, total, n, n}, [4]int64{s.Tracked, s.PeakTracked, s.Buffers, s.Allocs}, "%s after the allocations", name)
	}
	close(release)
	freed.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	for name, d := range counters {
		cur, peak := d.load(0)
		assert.Equal(t, [2]int64{0, total}, [2]int64{cur, peak}, "%s after the frees", name)
	}
	for name, r := range records {
		assert.Equal(t, tracker.Stats{PeakTracked: total, PeakBuffers: n, AllocBytes: total, FreedBytes: total, Allocs: n, Frees: n},
			r.snapshot(), "%s after the frees", name)
	}
}
