package memtrack

import (
	"fmt"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutOfMemoryReportCategories: a refusal on a device with categories
// carries their rows, and the report lists them: tracked, peak tracked
// and limit, the uncategorised memory last.
func TestOutOfMemoryReportCategories(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	weights, err := d.Category(CategoryWeights)
	require.NoError(t, err)
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	require.NoError(t, kv.SetMemoryLimit(3000))
	w := allocOK(t)(weights.Alloc(4000))
	k := allocOK(t)(kv.Alloc(2000))
	u := allocOK(t)(d.Alloc(100))

	_, err = kv.Alloc(2000) // past the category's limit
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, d.CategoryStats(), oom.Categories, "the rows at the refusal")
	report := oom.Report()
	lines := strings.Split(report, "\n")
	i := indexOf(lines, "  by category:")
	require.GreaterOrEqual(t, i, 0, report)
	require.Greater(t, len(lines), i+4, report)
	fields := func(l string) []string { return strings.Fields(l) }
	assert.Equal(t, []string{"category", "tracked", "peak", "tracked", "limit"}, fields(lines[i+1]))
	assert.Equal(t, "weights 3.91 KiB (4000 B) 3.91 KiB (4000 B) none", strings.Join(fields(lines[i+2]), " "))
	assert.Equal(t, "kv_cache (the request's) 1.95 KiB (2000 B) 1.95 KiB (2000 B) 2.93 KiB (3000 B)", strings.Join(fields(lines[i+3]), " "))
	assert.Equal(t, "uncategorised 100 B - -", strings.Join(fields(lines[i+4]), " "))
	for _, b := range []*Buffer{w, k, u} {
		require.NoError(t, b.Free())
	}

	// Without categories (a table of its own, once the first holds
	// nothing): no rows.
	_, plain := fakeCUDA(t, 1, 1<<20)
	_, err = plain[0].Alloc(2 << 20)
	require.ErrorAs(t, err, &oom)
	assert.Nil(t, oom.Categories)
	assert.NotContains(t, oom.Report(), "by category")
}

// TestOutOfMemoryReportManyCategories: past maxReportCategories the report
// lists those that track the most, and the request's, and sums the rest.
func TestOutOfMemoryReportManyCategories(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<30)
	d := ds[0]
	var cats []Category
	for i := range 20 {
		c, err := d.Category(fmt.Sprintf("layer%02d", i))
		require.NoError(t, err)
		cats = append(cats, c)
		b := allocOK(t)(c.Alloc(int64(i+1) * 1000))
		t.Cleanup(func() { b.Free() })
	}
	require.NoError(t, d.SetMemoryLimit(d.MemoryAllocated()))
	t.Cleanup(func() { d.SetMemoryLimit(0) })
	_, err := cats[0].Alloc(1)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Len(t, oom.Categories, 21)
	report := oom.Report()
	var shown []string
	for _, l := range strings.Split(report, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "layer") {
			shown = append(shown, f[0])
		}
	}
	want := []string{"layer00", "layer13", "layer14", "layer15", "layer16", "layer17", "layer18", "layer19"}
	assert.Equal(t, want, shown, "the request's category, then the largest, in the order they were made")
	var rest int64
	for i := 1; i < 13; i++ {
		rest += int64(i+1) * 1000
	}
	assert.Contains(t, strings.Join(strings.Fields(report), " "), fmt.Sprintf("12 more categories %s - -", bytesize.Exact(rest)))
}

func indexOf(lines []string, s string) int {
	for i, l := range lines {
		if l == s {
			return i
		}
	}
	return -1
}
