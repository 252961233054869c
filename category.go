package memtrack

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/tracker"
)

const (
	// MaxCategories is the most categories one device has: 255, what the
	// one byte that names a buffer's category holds (in the Buffer and in
	// each event of the history). A device's categories take about 96 KiB,
	// allocated when its first category is made.
	MaxCategories = 255

	// MaxCategoryName is the longest name of a category, in bytes.
	MaxCategoryName = 64
)

var (
	// ErrInvalidCategory: a category name that is empty, longer than
	// [MaxCategoryName] bytes, not UTF-8, holds a control character or is
	// [Uncategorised] or [OtherCategories]; or a zero [Category].
	ErrInvalidCategory = errors.New("memtrack: invalid category")

	// ErrTooManyCategories: a device has [MaxCategories] categories
	// already, and [Device.Category] was asked for another.
	ErrTooManyCategories = errors.New("memtrack: too many categories")
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

// Category returns the device's category called name, making it on first
// use: every call with one name on one device returns the same Category.
// A name is 1 to [MaxCategoryName] bytes of UTF-8 without control
// characters, and neither [Uncategorised] nor [OtherCategories], which
// name the renderings' rows and series of what is outside the categories
// shown; anything else fails with [ErrInvalidCategory]. A device has at most [MaxCategories] categories:
// past them it fails with [ErrTooManyCategories], naming those it has.
// Nothing changes where it fails.
func (d Device) Category(name string) (Category, error) {
	if err := checkCategoryName(name); err != nil {
		return Category{}, fmt.Errorf("%w on %v: %v", ErrInvalidCategory, d, err)
	}
	s, _, err := d.lookup(use)
	if err != nil {
		return Category{}, err
	}
	return s.categories(d.ordinal).category(d, name)
}

// checkCategoryName says what is wrong with a category's name, if anything.
func checkCategoryName(name string) error {
	switch name {
	case Uncategorised:
		return fmt.Errorf("%q names the memory outside every category", name)
	case OtherCategories:
		return fmt.Errorf("%q names the series of the categories a rendering folds together past the largest", name)
	}
	return checkName("category", name, MaxCategoryName)
}

// Categories returns the device's categories, in the order they were made.
func (d Device) Categories() []Category {
	cs := d.peekCategories()
	if cs == nil {
		return nil
	}
	out := make([]Category, cs.n.Load())
	for i := range out {
		out[i] = Category{set: cs, idx: uint8(i + 1), dev: d}
	}
	return out
}

// Device returns the device the category belongs to.
func (c Category) Device() Device { return c.dev }

// String returns the device and the name: "cuda:0/kv_cache".
func (c Category) String() string {
	if c.set == nil {
		return "no category"
	}
	return c.dev.String() + "/" + c.Name()
}

// zeroCategory is the error of a method called on the zero Category.
func zeroCategory(op string, size int64) error {
	return fmt.Errorf("%w: %s of %d bytes through the zero Category; obtain one with Device.Category", ErrInvalidCategory, op, size)
}

// Alloc allocates size bytes on the category's device and counts them
// there and in the category. It fails as [Device.Alloc] does, and with an
// [*OutOfMemoryError] naming the category where the category's limit
// ([Category.SetMemoryLimit]) refuses it, counting one failure in the
// category and one on the device. Free the buffer with [Buffer.Free], which
// uncounts it in both.
func (c Category) Alloc(size int64) (*Buffer, error) {
	if c.set == nil {
		return nil, zeroCategory("Alloc", size)
	}
	b, _, err := c.dev.take(&request{size: size, cats: c.set, cat: c.idx})
	return b, err
}

// AllocAsync allocates size bytes in stream order on the category's device,
// as [Device.AllocAsync] does, and counts them in the category besides, as
// [Category.Alloc] does. [Buffer.FreeAsync] and [Buffer.Free] uncount them
// in both.
func (c Category) AllocAsync(size int64, stream Stream) (*Buffer, error) {
	if c.set == nil {
		return nil, zeroCategory("AllocAsync", size)
	}
	b, _, err := c.dev.take(&request{size: size, cats: c.set, cat: c.idx, from: fromPool, stream: stream})
	return b, err
}

// Track counts size bytes that other code allocated at ptr on the
// category's device, as [Device.Track] does, and in the category besides.
// It fails as Track does, and as [Category.Alloc] does where the category's
// limit refuses it. [Tracked.Release] and [Tracked.FreeWith] uncount it in
// both.
func (c Category) Track(size int64, ptr uintptr) (*Tracked, error) {
	if c.set == nil {
		return nil, zeroCategory("Track", size)
	}
	_, t, err := c.dev.take(&request{size: size, cats: c.set, cat: c.idx, from: fromAddress, handle: true, ptr: ptr})
	return t, err
}

// SetMemoryLimit caps the bytes the category's live buffers may hold, as
// [Device.SetMemoryLimit] caps the device's: an allocation through the
// category that would pass it fails with an [*OutOfMemoryError]. Zero
// removes the limit; a negative limit is an [ErrInvalidSize] error. The
// device's limit holds as well: an allocation must fit both.
func (c Category) SetMemoryLimit(limit int64) error {
	if c.set == nil {
		return fmt.Errorf("%w: SetMemoryLimit of the zero Category; obtain one with Device.Category", ErrInvalidCategory)
	}
	if limit < 0 {
		return fmt.Errorf("%w: memory limit %d on %v is negative (0 removes the limit)", ErrInvalidSize, limit, c)
	}
	return c.record().SetLimit(limit)
}

// MemoryLimit returns the category's memory limit, or 0 if none is set.
func (c Category) MemoryLimit() int64 {
	if c.set == nil {
		return 0
	}
	return c.record().Limit()
}

// Stats returns a snapshot of the category's figures.
func (c Category) Stats() CategoryStats {
	if c.set == nil {
		return CategoryStats{}
	}
	return categoryStatsOf(c.dev, c.Name(), c.record().Snapshot())
}

// CategoryStats returns the figures of each of the device's categories, in
// the order they were made, and last the row of the memory outside them
// ([Uncategorised]); nil for a device without categories.
func (d Device) CategoryStats() []CategoryStats {
	r := d.peek()
	if r == nil {
		return nil
	}
	return d.peekCategories().rows(d, r)
}

// writeCategories writes the rows of [Device.CategoryStats] as a table of
// [Device.MemorySummary], or nothing for a device without categories.
func writeCategories(buf *bytes.Buffer, rows []CategoryStats) {
	if len(rows) == 0 {
		return
	}
	w := tabwriter.NewWriter(buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "category\ttracked\tpeak tracked\tbuffers\tallocs\tfrees\tfailed allocs\tlimit\t\n")
	for _, c := range rows {
		peak, limit := bytesize.Format(c.PeakTracked), "none"
		if c.Category == Uncategorised {
			peak = "-"
		}
		if c.Limit > 0 {
			limit = bytesize.Format(c.Limit)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t\n", c.Category, bytesize.Format(c.Tracked), peak, c.Buffers, c.Allocs, c.Frees, c.FailedAllocs, limit)
	}
	w.Flush()
}

// categories returns the categories of device ordinal of s, which is in
// use, making them on first use.
func (s *deviceTable) categories(ordinal int) *categorySet {
	if cs := s.categoriesOf(ordinal); cs != nil {
		return cs
	}
	cs := slotOf(s, ordinal, categoriesSlot, func() *categorySet {
		return &categorySet{names: make([]string, MaxCategories), recs: make([]tracker.Record, MaxCategories)}
	})
	s.setReporter(ordinal, categoriesSlot, cs)
	return cs
}

// report puts the rows of the categories (Device.CategoryStats) into the
// out-of-memory report e.
func (cs *categorySet) report(e *OutOfMemoryError) {
	d := e.Device
	e.Categories = cs.rows(d, tableOf(d.kind).records.Lookup(d.ordinal))
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
	if s, _, _ := d.lookup(read); s != nil {
		return s.categoriesOf(d.ordinal)
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

// checkName says what is wrong with the name of a category or a mark (what),
// if anything: it must be 1 to maxLen bytes of UTF-8 without control
// characters.
func checkName(what, name string, maxLen int) error {
	switch {
	case name == "":
		return fmt.Errorf("empty %s name", what)
	case len(name) > maxLen:
		return fmt.Errorf("%s name of %d bytes, longer than %d", what, len(name), maxLen)
	case printableASCII(name):
		return nil
	case !utf8.ValidString(name):
		return fmt.Errorf("%s name %q is not UTF-8", what, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%s name %q holds a control character", what, name)
	}
	return nil
}

// printableASCII reports whether s is ASCII without control characters:
// the usual name, checked without decoding it.
func printableASCII(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
