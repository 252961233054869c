package memtrack

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/atomic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rowOf returns the row called name of the device's category figures.
func rowOf(t *testing.T, d Device, name string) CategoryStats {
	t.Helper()
	for _, r := range d.CategoryStats() {
		if r.Category == name {
			return r
		}
	}
	t.Fatalf("no row %q in %v", name, d.CategoryStats())
	return CategoryStats{}
}

func TestCategoryFigures(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	d := ds[0]
	assert.Nil(t, d.CategoryStats(), "a device without categories has no rows")

	w, err := d.Category(CategoryWeights)
	require.NoError(t, err)
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	again, err := d.Category(CategoryWeights)
	require.NoError(t, err)
	assert.Equal(t, w, again, "one name, one category")
	assert.Equal(t, []Category{w, kv}, d.Categories())
	assert.Equal(t, "cuda:0/weights", w.String())
	assert.Equal(t, d, kv.Device())

	wb, err := w.Alloc(1000)
	require.NoError(t, err)
	kb1, err := kv.Alloc(300)
	require.NoError(t, err)
	kb2, err := kv.Alloc(200)
	require.NoError(t, err)
	plain, err := d.Alloc(50)
	require.NoError(t, err)
	require.NoError(t, kb1.Free())
	tr, err := kv.Track(70, 0xabc000)
	require.NoError(t, err)

	s := d.MemoryStats()
	assert.Equal(t, int64(1000+200+50+70), s.Tracked, "the device counts everything")
	assert.Equal(t, CategoryStats{Device: d, Category: CategoryWeights, Tracked: 1000, PeakTracked: 1000, AllocBytes: 1000,
		Buffers: 1, PeakBuffers: 1, Allocs: 1}, w.Stats())
	assert.Equal(t, CategoryStats{Device: d, Category: CategoryKVCache, Tracked: 270, PeakTracked: 500, AllocBytes: 570, FreedBytes: 300,
		Buffers: 2, PeakBuffers: 2, Allocs: 3, Frees: 1}, kv.Stats())
	assert.Equal(t, CategoryStats{Device: d, Category: Uncategorised, Tracked: 50, AllocBytes: 50, Buffers: 1, Allocs: 1},
		rowOf(t, d, Uncategorised), "the uncategorised row is the rest, without peaks")
	rows := d.CategoryStats()
	require.Len(t, rows, 3)
	assert.Equal(t, []string{CategoryWeights, CategoryKVCache, Uncategorised}, []string{rows[0].Category, rows[1].Category, rows[2].Category})

	// The other device: the same name is another category.
	w1, err := ds[1].Category(CategoryWeights)
	require.NoError(t, err)
	assert.NotEqual(t, w, w1)
	b1, err := w1.Alloc(7)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), w.Stats().Tracked, "a category counts only its own device")
	assert.Equal(t, int64(7), w1.Stats().Tracked)
	require.NoError(t, b1.Free())

	// Resets reach the categories.
	d.ResetPeakMemoryStats()
	assert.Equal(t, int64(270), kv.Stats().PeakTracked)
	d.ResetAccumulatedMemoryStats()
	assert.Equal(t, CategoryStats{Device: d, Category: CategoryKVCache, Tracked: 270, PeakTracked: 270, Buffers: 2, PeakBuffers: 2}, kv.Stats())
	assert.Equal(t, CategoryStats{Device: d, Category: Uncategorised, Tracked: 50, Buffers: 1}, rowOf(t, d, Uncategorised))

	for _, f := range []func() error{wb.Free, kb2.Free, plain.Free, tr.Release} {
		require.NoError(t, f())
	}
	for _, r := range d.CategoryStats() {
		assert.Zero(t, r.Tracked, r.Category)
		assert.Zero(t, r.Buffers, r.Category)
	}
	sum := d.MemorySummary()
	for _, want := range []string{"category", "weights", "kv_cache", "uncategorised"} {
		assert.Contains(t, sum, want)
	}
}

func TestCategoryBadInput(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	for _, tc := range []struct {
		name, cat string
		err       error
	}{
		{"empty", "", ErrInvalidCategory},
		{"over-long", strings.Repeat("x", MaxCategoryName+1), ErrInvalidCategory},
		{"not UTF-8", "kv\xff", ErrInvalidCategory},
		{"control character", "kv\ncache", ErrInvalidCategory},
		{"reserved", Uncategorised, ErrInvalidCategory},
		{"the page's series of the other categories", "other categories", ErrInvalidCategory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := d.Category(tc.cat)
			assert.ErrorIs(t, err, tc.err)
			assert.Equal(t, Category{}, c)
			assert.Nil(t, d.Categories(), "a refused name makes no category")
		})
	}
	longest, err := d.Category(strings.Repeat("x", MaxCategoryName))
	require.NoError(t, err, "a name of MaxCategoryName bytes is accepted")

	t.Run("too many", func(t *testing.T) {
		for i := 1; i < MaxCategories; i++ {
			_, err := d.Category(fmt.Sprintf("c%d", i))
			require.NoError(t, err)
		}
		_, err := d.Category("one more")
		require.ErrorIs(t, err, ErrTooManyCategories)
		assert.Contains(t, err.Error(), `"one more"`)
		assert.Len(t, d.Categories(), MaxCategories)
		_, err = d.Category("c3")
		assert.NoError(t, err, "a category that exists is still found")
	})

	t.Run("zero Category", func(t *testing.T) {
		var c Category
		before := d.MemoryStats()
		_, err := c.Alloc(10)
		assert.ErrorIs(t, err, ErrInvalidCategory)
		_, err = c.Track(10, 0)
		assert.ErrorIs(t, err, ErrInvalidCategory)
		assert.ErrorIs(t, c.SetMemoryLimit(10), ErrInvalidCategory)
		assert.Zero(t, c.MemoryLimit())
		assert.Equal(t, CategoryStats{}, c.Stats())
		assert.Equal(t, "", c.Name())
		assert.Equal(t, before, d.MemoryStats(), "nothing counted")
	})

	t.Run("bad size", func(t *testing.T) {
		before := longest.Stats()
		_, err := longest.Alloc(0)
		assert.ErrorIs(t, err, ErrInvalidSize)
		_, err = longest.Track(-1, 0)
		assert.ErrorIs(t, err, ErrInvalidSize)
		assert.ErrorIs(t, longest.SetMemoryLimit(-1), ErrInvalidSize)
		assert.Equal(t, before, longest.Stats())
	})
}

// TestCategoryUsedOnAnotherDevice: a Category carries its device, so a
// buffer allocated through it is always on that device and uncounted there
// and in that category when freed, whichever category or device the caller
// believes it belongs to; no call frees through a category.
func TestCategoryUsedOnAnotherDevice(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	a, err := ds[0].Category("a")
	require.NoError(t, err)
	b, err := ds[1].Category("a")
	require.NoError(t, err)
	other, err := ds[0].Category("other")
	require.NoError(t, err)

	buf, err := a.Alloc(64)
	require.NoError(t, err)
	assert.Equal(t, ds[0], buf.Device())
	assert.Zero(t, ds[1].MemoryAllocated())
	assert.Zero(t, b.Stats().Tracked)

	require.NoError(t, buf.Free())
	assert.Equal(t, CategoryStats{Device: ds[0], Category: "a", PeakTracked: 64, AllocBytes: 64, FreedBytes: 64, PeakBuffers: 1, Allocs: 1, Frees: 1}, a.Stats())
	assert.Equal(t, CategoryStats{Device: ds[0], Category: "other"}, other.Stats(), "another category is untouched")
	assert.Equal(t, CategoryStats{Device: ds[1], Category: "a"}, b.Stats())
	assert.ErrorIs(t, buf.Free(), ErrDoubleFree, "a second free changes nothing")
	assert.Equal(t, int64(1), a.Stats().Frees)
}

func TestCategoryLimit(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	act, err := d.Category(CategoryActivations)
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(1000))
	assert.Equal(t, int64(1000), kv.MemoryLimit())

	b, err := kv.Alloc(800)
	require.NoError(t, err)
	_, _, calls := f.state(0)
	_, err = kv.Alloc(300)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, OutOfMemoryError{Device: d, Requested: 300, Tracked: 800, Limit: 1000, Category: CategoryKVCache, Reason: categoryLimitReason},
		OutOfMemoryError{Device: oom.Device, Requested: oom.Requested, Tracked: oom.Tracked, Limit: oom.Limit, Category: oom.Category, Reason: oom.Reason})
	assert.Equal(t, int64(800), oom.PeakTracked, "the report is the device's")
	assert.Contains(t, err.Error(), `in category "kv_cache"`)
	_, _, after := f.state(0)
	assert.Equal(t, calls, after, "a request over the category's limit costs no device memory")
	_, err = kv.Track(300, 0xdead000)
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, CategoryKVCache, oom.Category)
	assert.Nil(t, KindCUDA.TrackedAt(0xdead000), "a refused Track indexes nothing")

	c, err := act.Alloc(300)
	require.NoError(t, err, "another category is not held by the limit")
	assert.Equal(t, int64(2), kv.Stats().FailedAllocs)
	assert.Equal(t, int64(2), d.MemoryStats().FailedAllocs, "the device counts the refusals too")
	assert.Equal(t, int64(1100), d.MemoryAllocated())
	assert.Equal(t, int64(800), kv.Stats().PeakTracked, "nothing refused reaches a peak")

	// The device's limit holds for a category too, and counts there.
	require.NoError(t, d.SetMemoryLimit(1200))
	_, err = act.Alloc(200)
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, CategoryActivations, oom.Category)
	assert.Equal(t, "memory limit", oom.Reason)
	assert.Equal(t, int64(1), act.Stats().FailedAllocs)
	assert.Equal(t, int64(300), act.Stats().PeakTracked)

	// A backend's refusal counts in the category.
	require.NoError(t, d.SetMemoryLimit(0))
	f.mu.Lock()
	f.allocErrs = []error{&OutOfMemoryError{Reason: "fake"}}
	f.mu.Unlock()
	_, err = act.Alloc(10)
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, CategoryActivations, oom.Category)
	assert.Equal(t, int64(2), act.Stats().FailedAllocs)

	require.NoError(t, kv.SetMemoryLimit(0))
	b2, err := kv.Alloc(300)
	require.NoError(t, err, "0 removes the limit")
	for _, x := range []*Buffer{b, b2, c} {
		require.NoError(t, x.Free())
	}
}

// TestCategoryDeviceRefusesAfterCategory: where the device's record refuses
// what the category counted (another allocation took the device's last
// room under its limit between Alloc's check and its count, here while the
// backend allocates), the category takes it back: its figures and
// cumulative counts never keep it, both count one failure, and the
// backend's memory is released.
func TestCategoryDeviceRefusesAfterCategory(t *testing.T) {
	for _, track := range []bool{false, true} {
		t.Run(fmt.Sprintf("track=%v", track), func(t *testing.T) {
			f, ds := fakeCUDA(t, 1, 1<<30)
			d := ds[0]
			kv, err := d.Category(CategoryKVCache)
			require.NoError(t, err)
			require.NoError(t, d.SetMemoryLimit(100))
			other, err := d.Alloc(10)
			require.NoError(t, err)
			_, rec, err := d.lookup(use)
			require.NoError(t, err)
			taken := false
			take := func() { // the concurrent allocation, once
				if !taken {
					taken = true
					require.NoError(t, rec.Alloc(60))
				}
			}
			if track {
				// Track asks no backend, so nothing runs between its
				// check and its count: here the room is gone before
				// the call, and the device's check refuses the request
				// before the category counts it.
				take()
			} else {
				f.onAlloc = take
			}
			var oom *OutOfMemoryError
			if track {
				_, err = kv.Track(50, 0xfeed00)
				require.ErrorAs(t, err, &oom, "the device's check refuses it first")
			} else {
				_, err = kv.Alloc(50)
				require.ErrorAs(t, err, &oom)
				assert.Equal(t, "memory limit", oom.Reason)
				used, live, _ := f.state(0)
				assert.Equal(t, int64(10), used, "the backend's memory is released")
				assert.Equal(t, 1, live)
				assert.Equal(t, CategoryStats{Device: d, Category: CategoryKVCache, PeakTracked: 50, PeakBuffers: 1, FailedAllocs: 1}, kv.Stats(),
					"taken back: no figure keeps it but the peak, which held it for an instant")
			}
			assert.Equal(t, CategoryKVCache, oom.Category)
			assert.Equal(t, int64(1), d.MemoryStats().FailedAllocs)
			assert.Equal(t, int64(1), kv.Stats().FailedAllocs)
			assert.Zero(t, kv.Stats().Tracked)
			assert.Zero(t, kv.Stats().Allocs)
			require.NoError(t, rec.Free(60))
			require.NoError(t, other.Free())
			require.NoError(t, d.SetMemoryLimit(0))
		})
	}
}

// TestCategoryConcurrent allocates and frees through categories and
// without one from many goroutines at once, under a category's limit and,
// in the second case, the device's too (which then refuses what a
// category counted, and the category takes it back): at the end every
// refusal is counted once on the device and once in its row, and the rows
// add up.
func TestCategoryConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name        string
		deviceLimit int64
	}{{"category limit", 0}, {"category and device limits", 64}} {
		t.Run(tc.name, func(t *testing.T) {
			_, ds := fakeCUDA(t, 1, 1<<40)
			d := ds[0]
			cats := make([]Category, 3)
			for i := range cats {
				var err error
				cats[i], err = d.Category(fmt.Sprintf("c%d", i))
				require.NoError(t, err)
			}
			const limit = 10 * 64
			require.NoError(t, cats[2].SetMemoryLimit(limit))
			require.NoError(t, d.SetMemoryLimit(tc.deviceLimit))
			rounds := 2000
			if testing.Short() {
				rounds = 200
			}
			const workers = 8
			var wg sync.WaitGroup
			start := make(chan struct{})
			var refused [workers][4]int64 // by goroutine, by row (3: uncategorised)
			var firstErr error
			var errOnce sync.Once
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range rounds {
						var b *Buffer
						var err error
						k := (g + i) % 4
						if k == 3 {
							b, err = d.Alloc(64)
						} else {
							b, err = cats[k].Alloc(64)
						}
						if errors.Is(err, ErrOutOfMemory) {
							refused[g][k]++
							continue
						}
						if err == nil {
							runtime.Gosched() // hold the buffer while others allocate
							if c2 := cats[2].Stats().Tracked; c2 > limit {
								err = fmt.Errorf("category over its limit: %d", c2)
							} else {
								err = b.Free()
							}
						}
						if err != nil {
							errOnce.Do(func() { firstErr = err })
							return
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			require.NoError(t, firstErr)
			var byRow [4]int64
			var total int64
			for _, r := range refused {
				for k, n := range r {
					byRow[k] += n
					total += n
				}
			}
			if tc.deviceLimit > 0 {
				assert.Positive(t, byRow[0]+byRow[1], "the device's limit refused requests in categories without limits")
			}
			assert.Equal(t, total, d.MemoryStats().FailedAllocs)
			rows := d.CategoryStats()
			require.Len(t, rows, 4)
			var allocs int64
			for k, r := range rows {
				assert.Equal(t, byRow[k], r.FailedAllocs, r.Category)
				assert.Zero(t, r.Tracked, r.Category)
				assert.Zero(t, r.Buffers, r.Category)
				assert.Equal(t, r.Allocs, r.Frees, r.Category)
				assert.Equal(t, r.AllocBytes, 64*r.Allocs, r.Category)
				allocs += r.Allocs
			}
			assert.Equal(t, int64(workers*rounds)-total, allocs, "every allocation is in exactly one row")
			assert.LessOrEqual(t, cats[2].Stats().PeakTracked, int64(limit))
			if tc.deviceLimit > 0 {
				assert.LessOrEqual(t, d.MaxMemoryAllocated(), tc.deviceLimit)
			}
		})
	}
}

func TestCategoryHistoryAndSites(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	require.NoError(t, d.History().Enable(16))
	t.Cleanup(d.History().Disable) // the history outlives the fake device table
	require.NoError(t, d.Sites().Enable(8))
	require.NoError(t, d.Sites().SetRate(1))
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(100))
	b, err := kv.Alloc(64)
	require.NoError(t, err)
	p, err := d.Alloc(32)
	require.NoError(t, err)
	_, err = kv.Alloc(64)
	require.Error(t, err)

	sites, err := d.Sites().Snapshot()
	require.NoError(t, err)
	cats := map[string]int64{}
	for _, s := range sites.Sites {
		cats[s.Category] += s.Bytes
		require.NotEmpty(t, s.Stack)
		assert.Contains(t, frameOf(s.Stack[0]), "TestCategoryHistoryAndSites", "the first frame is the caller of Alloc")
	}
	assert.Equal(t, map[string]int64{CategoryKVCache: 64, "": 32}, cats)

	require.NoError(t, b.Free())
	require.NoError(t, p.Free())
	h, err := d.History().Snapshot()
	require.NoError(t, err)
	var got []string
	for _, e := range h.Events {
		got = append(got, fmt.Sprintf("%v:%s:%d", e.Action, e.Category, e.CategoryTracked))
	}
	assert.Equal(t, []string{"alloc:kv_cache:64", "alloc::0", "limit:kv_cache:64", "free:kv_cache:0", "free::0"}, got)
}

// TestCategoryAllocAsyncOnCPU: stream-ordered allocation through a
// category of the CPU fails (ErrNotSupported with -tags cuda,
// ErrBackendNotBuilt without), counting nothing.
func TestCategoryAllocAsyncOnCPU(t *testing.T) {
	c, err := CPU().Category("async")
	require.NoError(t, err)
	before := c.Stats()
	_, err = c.AllocAsync(64, DefaultStream)
	assert.Error(t, err)
	assert.Equal(t, before, c.Stats(), "nothing counted")
}

// TestExpvarCategories reads Expvar's JSON as a reader of /debug/vars
// would: a device with categories has their rows beside its Stats' fields,
// the uncategorised one last; a device without has no Categories field, and
// every device's object still decodes into a Stats as before.
func TestExpvarCategories(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<30)
	kv, err := ds[0].Category("kv_cache")
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(1<<20))
	a, err := kv.Alloc(4096)
	require.NoError(t, err)
	defer a.Free()
	_, err = kv.Alloc(1 << 20)
	require.ErrorIs(t, err, ErrOutOfMemory)
	u, err := ds[0].Alloc(100)
	require.NoError(t, err)
	defer u.Free()
	w, err := ds[1].Alloc(512)
	require.NoError(t, err)
	defer w.Free()

	v := Expvar().String()
	var withCats map[string]struct {
		Stats
		Categories []CategoryStats
	}
	require.NoError(t, json.Unmarshal([]byte(v), &withCats), "not JSON: %s", v)
	require.Contains(t, withCats, "cuda:0")
	require.Contains(t, withCats, "cuda:1")
	assert.Equal(t, ds[0].MemoryStats(), withCats["cuda:0"].Stats)
	assert.Equal(t, []CategoryStats{
		{Device: ds[0], Category: "kv_cache", Tracked: 4096, PeakTracked: 4096, Buffers: 1, PeakBuffers: 1,
			AllocBytes: 4096, Allocs: 1, FailedAllocs: 1, Limit: 1 << 20},
		{Device: ds[0], Category: Uncategorised, Tracked: 100, Buffers: 1, AllocBytes: 100, Allocs: 1},
	}, withCats["cuda:0"].Categories)
	assert.Equal(t, ds[0].CategoryStats(), withCats["cuda:0"].Categories)
	assert.Equal(t, ds[1].MemoryStats(), withCats["cuda:1"].Stats)
	assert.Nil(t, withCats["cuda:1"].Categories)

	var raw map[string]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(v), &raw))
	assert.Contains(t, raw["cuda:0"], "Categories")
	assert.NotContains(t, raw["cuda:1"], "Categories", "a device without categories is written as before")

	var stats map[string]Stats // as readers decoded it before categories
	require.NoError(t, json.Unmarshal([]byte(v), &stats))
	assert.Equal(t, ds[0].MemoryStats(), stats["cuda:0"])
	assert.Equal(t, ds[1].MemoryStats(), stats["cuda:1"])
}

// TestCategoryLimitReport: where a category's limit refuses a request on a
// device that holds more outside the category, the report is the
// device's: Tracked, Untracked and "this process" are the device's
// figures, the category's own are named apart, and the advice names the
// limit that refused it, the category's.
func TestCategoryLimitReport(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(1<<20))
	outside := mustAlloc(t, d, 64<<20)
	defer outside.Free()
	inside, err := kv.Alloc(512 << 10)
	require.NoError(t, err)
	defer inside.Free()

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Alloc", func() error { _, err := kv.Alloc(1 << 20); return err }},
		{"Track", func() error { _, err := kv.Track(1<<20, 0x5ca1e000); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var oom *OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, CategoryKVCache, oom.Category)
			assert.Equal(t, categoryLimitReason, oom.Reason)
			assert.Equal(t, int64(64<<20+512<<10), oom.Tracked, "the device's tracked bytes")
			assert.Equal(t, int64(512<<10), oom.CategoryTracked, "the category's")
			assert.Equal(t, int64(1<<20), oom.Limit, "the limit that refused it")
			assert.ErrorIs(t, err, ErrLimitExceeded)
			assert.Equal(t, int64(1000), oom.Untracked, "the fake's context: nothing else is untracked")
			report := oom.Report()
			for _, want := range []string{
				"this process:   64.5 MiB (67633152 B) tracked in 2 live buffers, peak 64.5 MiB (67633152 B)\n",
				`category:       "kv_cache": 512 KiB (524288 B) tracked, memory limit 1.00 MiB (1048576 B)`,
				"not tracked:    1000 B in use on the device",
				`try: raise the memory limit of the category "kv_cache" (Category.SetMemoryLimit, now 1.00 MiB) or free its buffers`,
			} {
				assert.Contains(t, report, want)
			}
			assert.NotContains(t, report, "Device.SetMemoryLimit", "the device has no limit")
		})
	}

	// The device's limit refusing a request in the category: the advice is
	// the device's.
	require.NoError(t, d.SetMemoryLimit(65<<20))
	defer d.SetMemoryLimit(0)
	require.NoError(t, kv.SetMemoryLimit(0))
	_, err = kv.Alloc(1 << 20)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, "memory limit", oom.Reason)
	assert.Equal(t, int64(65<<20), oom.Limit)
	assert.Equal(t, int64(64<<20+512<<10), oom.Tracked)
	assert.Equal(t, int64(512<<10), oom.CategoryTracked)
	assert.Contains(t, oom.Report(), "try: raise the memory limit (Device.SetMemoryLimit, now 65.0 MiB) or free buffers")
	assert.NotContains(t, oom.Report(), "Category.SetMemoryLimit")
}

// TestCategoryTrackBadInputFirst: Category.Track of an address tracked
// already fails with ErrAlreadyTracked, as Device.Track does, whatever the
// limits: over the category's or the device's, it changes no figure,
// records no refusal and runs no observer.
func TestCategoryTrackBadInputFirst(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	held, err := d.Track(100, 0xa11000)
	require.NoError(t, err)
	defer held.Release()
	runs := 0
	obs, err := d.OnOutOfMemory(func(*OutOfMemoryError) { runs++ })
	require.NoError(t, err)
	defer obs.Remove()
	require.NoError(t, d.History().Enable(64))
	defer d.History().Disable()
	historyOf := func(t *testing.T, d Device) []HistoryEvent {
		h, err := d.History().Snapshot()
		require.NoError(t, err)
		return h.Events
	}

	for _, tc := range []struct {
		name       string
		catLimit   int64
		devLimit   int64
		wantLimits bool
	}{{"no limit", 0, 0, false}, {"over the category's limit", 10, 0, true}, {"over the device's limit", 0, 110, true}} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, kv.SetMemoryLimit(tc.catLimit))
			require.NoError(t, d.SetMemoryLimit(tc.devLimit))
			defer func() {
				require.NoError(t, kv.SetMemoryLimit(0))
				require.NoError(t, d.SetMemoryLimit(0))
			}()
			before, cbefore := d.MemoryStats(), kv.Stats()
			events := len(historyOf(t, d))
			for _, track := range []func() error{
				func() error { _, err := kv.Track(50, 0xa11000); return err },
				func() error { _, err := d.Track(50, 0xa11000); return err },
			} {
				err := track()
				assert.ErrorIs(t, err, ErrAlreadyTracked)
				assert.NotErrorIs(t, err, ErrOutOfMemory)
			}
			assert.Equal(t, before, d.MemoryStats(), "no figure moves")
			assert.Equal(t, cbefore, kv.Stats())
			assert.Zero(t, runs, "no observer runs")
			assert.Len(t, historyOf(t, d), events, "no refusal recorded")
			if tc.wantLimits {
				// A new address over the limit is refused by it.
				_, err := kv.Track(50, 0xb22000)
				assert.ErrorIs(t, err, ErrLimitExceeded)
				assert.Equal(t, 1, runs)
				runs = 0
			}
		})
	}
}

// TestCategoryResetUnderTraffic: ResetAccumulatedMemoryStats while a
// goroutine allocates, frees, tracks, releases and is refused through a
// category: every operation counts wholly before or after each reset, in
// the category and on the device alike. The traffic is the category's
// only, so that at rest the category's cumulative figures are the device's
// and the uncategorised row is zero. Traffic and resets meet at a barrier
// after each round of resets, and the figures are checked there. The
// category is the first of MaxCategories, so that a reset's window between
// it and the device is as long as it can be.
func TestCategoryResetUnderTraffic(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<40)
	d := ds[0]
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	for i := 1; i < MaxCategories; i++ {
		_, err := d.Category(fmt.Sprintf("idle %d", i))
		require.NoError(t, err)
	}
	require.NoError(t, kv.SetMemoryLimit(1000))
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	var pause atomic.Bool
	run, paused := make(chan struct{}), make(chan struct{})
	go func() {
		for range run {
			for !pause.Load() { // assert, not require: this is not the test's goroutine
				b, err := kv.Alloc(100)
				assert.NoError(t, err)
				_, err = kv.Alloc(2000) // over the category's limit
				assert.ErrorIs(t, err, ErrLimitExceeded)
				h, err := kv.Track(50, 0x7e57000)
				assert.NoError(t, err)
				assert.NoError(t, b.Free())
				assert.NoError(t, h.Release())
			}
			paused <- struct{}{}
		}
	}()
	defer close(run)
	for r := range rounds {
		pause.Store(false)
		run <- struct{}{}
		for range 4 {
			d.ResetAccumulatedMemoryStats()
			runtime.Gosched()
		}
		pause.Store(true)
		<-paused

		dev, cat, rest := d.MemoryStats(), kv.Stats(), rowOf(t, d, Uncategorised)
		for _, f := range []struct {
			name     string
			dev, cat int64
		}{
			{"Allocs", dev.Allocs, cat.Allocs},
			{"Frees", dev.Frees, cat.Frees},
			{"AllocBytes", dev.AllocBytes, cat.AllocBytes},
			{"FreedBytes", dev.FreedBytes, cat.FreedBytes},
			{"FailedAllocs", dev.FailedAllocs, cat.FailedAllocs},
		} {
			require.Equal(t, f.dev, f.cat, "round %d: %s of the category and of the device", r, f.name)
		}
		require.Equal(t, CategoryStats{Device: d, Category: Uncategorised}, rest, "round %d: nothing uncategorised", r)
	}
}
