package memtrack

import (
	"fmt"
	"strings"
	"sync"

	"github.com/memtrack/memtrack/tracker"
	"go.uber.org/atomic"
)

// Category is a named share of one device's memory: the model's weights,
// the KV cache, the activations, a library's workspace. Memory allocated or
// tracked through a Category counts on its device as [Device.Alloc] and
// [Device.Track] count it, and in the category's own figures besides:
// Tracked, PeakTracked, Buffers, PeakBuffers and the cumulative figures,
// exact and lock-free as the device's are, and an optional limit of its own.
//
// Obtain one once, with [Device.Category], and allocate through it:
//
//	kv, err := dev.Category(memtrack.CategoryKVCache)
//	...
//	b, err := kv.Alloc(n)
//
// A Category is a small comparable value bound to its device: it allocates
// only there, and the same name on another device is another category with
// figures of its own. A buffer stays in the category it was allocated
// through until its Free, which uncounts it there: a buffer is never freed
// through another category. The zero Category is no category; its methods
// fail with [ErrInvalidCategory].
type Category struct {
	set *categorySet
	idx uint8 // 1 to MaxCategories; 0 in the zero Category
	dev Device
}

// categorySet holds one device's categories: their names, in the order
// they were made, and their records. Names are written under mu before n
// publishes them, and never change.
type categorySet struct {
	mu    sync.Mutex
	n     atomic.Int32
	names [MaxCategories]string
	recs  [MaxCategories]tracker.Record
	gate  resetGate // orders the category operations with the resets (resetAccumulated)
}

// categories returns the device's categories, making them on first use.
func (f *features) categories() *categorySet {
	if cs := f.cats.Load(); cs != nil {
		return cs
	}
	f.cats.CompareAndSwap(nil, &categorySet{}) // a loser's set is dropped unused
	return f.cats.Load()
}

// categoriesOf returns the categories of device ordinal, nil where it has
// none.
func (s *deviceTable) categoriesOf(ordinal int) *categorySet {
	if f := s.featuresOf(ordinal); f != nil {
		return f.cats.Load()
	}
	return nil
}

// category returns the category called name, making it if there is room.
func (cs *categorySet) category(d Device, name string) (Category, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := int(cs.n.Load())
	for i, have := range cs.names[:n] {
		if have == name {
			return Category{set: cs, idx: uint8(i + 1), dev: d}, nil
		}
	}
	if n == MaxCategories {
		return Category{}, fmt.Errorf("%w: %v has %d categories (%s); %q would be one more",
			ErrTooManyCategories, d, n, strings.Join(cs.names[:n], ", "), name)
	}
	cs.names[n] = name
	cs.n.Store(int32(n + 1))
	return Category{set: cs, idx: uint8(n + 1), dev: d}, nil
}

// list returns the categories' names and records, in the order they were
// made.
func (cs *categorySet) list() ([]string, []*tracker.Record) {
	n := int(cs.n.Load())
	recs := make([]*tracker.Record, n)
	for i := range recs {
		recs[i] = &cs.recs[i]
	}
	return cs.names[:n:n], recs
}

// name returns the name of category idx (1-based), or "" for 0.
func (cs *categorySet) name(idx uint8) string {
	if cs == nil || idx == 0 {
		return ""
	}
	return cs.names[idx-1]
}

// categoryNamer returns the function that names the device's categories
// by their 1-based index ("" for 0), for the readers of what keeps only
// the index (the memory history); a category made later is named too,
// since a name never changes once its index is published.
func (d Device) categoryNamer() func(idx uint8) string {
	return d.peekCategories().name // nil names every index ""
}

// categoryName returns the name of the device's category idx (1-based),
// or "" for 0.
func (d Device) categoryName(idx uint8) string { return d.peekCategories().name(idx) }

// Name returns the category's name ("" for the zero Category).
func (c Category) Name() string { return c.set.name(c.idx) }

// record returns the category's record, or nil for the zero Category.
func (c Category) record() *tracker.Record {
	if c.set == nil {
		return nil
	}
	return &c.set.recs[c.idx-1]
}

func categoryStatsOf(d Device, name string, s tracker.Stats) CategoryStats {
	return CategoryStats{
		Device: d, Category: name,
		Tracked: s.Tracked, PeakTracked: s.PeakTracked,
		AllocBytes: s.AllocBytes, FreedBytes: s.FreedBytes,
		Buffers: s.Buffers, PeakBuffers: s.PeakBuffers,
		Allocs: s.Allocs, Frees: s.Frees,
		FailedAllocs: s.FailedAllocs, Limit: s.Limit,
	}
}

// peekCategories returns the device's categories where it has any, as peek
// reads: registering nothing and starting no backend.
func (d Device) peekCategories() *categorySet {
	if _, f, _ := d.features(read); f != nil {
		return f.cats.Load()
	}
	return nil
}

// rows reads the categories of cs (nil for none), then the record r of
// their device d, and puts the row of the uncategorised memory after them.
func (cs *categorySet) rows(d Device, r *tracker.Record) []CategoryStats {
	if cs == nil || cs.n.Load() == 0 {
		return nil
	}
	names, recs := cs.list()
	out := make([]CategoryStats, 0, len(names)+1)
	rest := CategoryStats{Device: d, Category: Uncategorised}
	for i, rec := range recs {
		c := categoryStatsOf(d, names[i], rec.Snapshot())
		out = append(out, c)
		rest.Tracked -= c.Tracked
		rest.AllocBytes -= c.AllocBytes
		rest.FreedBytes -= c.FreedBytes
		rest.Buffers -= c.Buffers
		rest.Allocs -= c.Allocs
		rest.Frees -= c.Frees
		rest.FailedAllocs -= c.FailedAllocs
	}
	all := r.Snapshot()
	rest.Tracked = max(rest.Tracked+all.Tracked, 0)
	rest.AllocBytes = max(rest.AllocBytes+all.AllocBytes, 0)
	rest.FreedBytes = max(rest.FreedBytes+all.FreedBytes, 0)
	rest.Buffers = max(rest.Buffers+all.Buffers, 0)
	rest.Allocs = max(rest.Allocs+all.Allocs, 0)
	rest.Frees = max(rest.Frees+all.Frees, 0)
	rest.FailedAllocs = max(rest.FailedAllocs+all.FailedAllocs, 0)
	return append(out, rest)
}

// resetPeaks resets the peaks of every category of cs (nil for none).
func (cs *categorySet) resetPeaks() {
	if cs == nil {
		return
	}
	_, recs := cs.list()
	for _, r := range recs {
		r.ResetPeak()
	}
}

// resetAccumulated resets the cumulative figures of the categories of cs
// (nil for none) and of their device's record r, as one step for the
// category operations (resetGate).
func (cs *categorySet) resetAccumulated(r *tracker.Record) {
	if cs == nil {
		r.ResetAccumulated()
		return
	}
	cs.gate.reset(func() {
		_, recs := cs.list()
		for _, cr := range recs {
			cr.ResetAccumulated()
		}
		r.ResetAccumulated()
	})
}

// categoryLimitReason is the Reason of an [*OutOfMemoryError] for a request
// that its category's limit refused; its Tracked and Limit are then the
// category's.
const categoryLimitReason = "the category's memory limit"
