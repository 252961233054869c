package memtrack

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// maxReportCategories is how many categories an [OutOfMemoryError]'s
// report lists one by one: those that track the most, and the one the
// request was made in; the others are summed on one line.
const maxReportCategories = 8

// writeReportCategories writes the categories of the report: tracked, peak
// tracked and limit of each, the uncategorised memory last; nothing for a
// device without categories.
func writeReportCategories(b *strings.Builder, e *OutOfMemoryError) {
	if len(e.Categories) == 0 {
		return
	}
	rows := slices.Clone(e.Categories)
	var rest CategoryStats
	if n := len(rows) - 1; rows[n].Category == Uncategorised {
		rest, rows = rows[n], rows[:n]
	}
	var more []CategoryStats
	if len(rows) > maxReportCategories {
		rows, more = largestCategories(rows, e.Category)
	}
	b.WriteString("  by category:\n")
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "    category\ttracked\tpeak tracked\tlimit\n")
	for _, c := range rows {
		limit := "none"
		if c.Limit > 0 {
			limit = exactBytes(c.Limit)
		}
		name := c.Category
		if c.Category == e.Category {
			name += " (the request's)"
		}
		fmt.Fprintf(w, "    %s\t%s\t%s\t%s\n", name, exactBytes(c.Tracked), exactBytes(c.PeakTracked), limit)
	}
	if len(more) > 0 {
		var n int64
		for _, c := range more {
			n += c.Tracked
		}
		fmt.Fprintf(w, "    %d more categories\t%s\t-\t-\n", len(more), exactBytes(n))
	}
	if rest.Category != "" {
		fmt.Fprintf(w, "    %s\t%s\t-\t-\n", rest.Category, exactBytes(rest.Tracked))
	}
	w.Flush()
}

// largestCategories splits rows into the maxReportCategories that track the
// most, the category named first among them, each part in the order of
// rows.
func largestCategories(rows []CategoryStats, first string) (shown, more []CategoryStats) {
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(boolInt(rows[b].Category == first), boolInt(rows[a].Category == first)), cmp.Compare(rows[b].Tracked, rows[a].Tracked))
	})
	keep := make([]bool, len(rows))
	for _, i := range order[:maxReportCategories] {
		keep[i] = true
	}
	for i, c := range rows {
		if keep[i] {
			shown = append(shown, c)
		} else {
			more = append(more, c)
		}
	}
	return shown, more
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
