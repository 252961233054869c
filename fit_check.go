package memtrack

import (
	"fmt"
	"runtime/metrics"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/fit"
	"github.com/memtrack/memtrack/internal/hostmem"
)

// FitCheck is a [Prediction] set beside what the load did: the figure the
// prediction read (its Source) read again after the load, and, where the
// driver gives them, the figures of its parts.
type FitCheck struct {
	Prediction Prediction
	// After is the figure after the load, and Measured its growth since
	// the prediction (After - Prediction.Before): what the load added, as
	// the driver counts it. Difference is Measured - Prediction.Predicted.
	After, Measured, Difference int64
	// PoolReservedIncrease and GraphReservedIncrease are what the driver
	// says the memory pool's reservation and the graphs' grew by, where
	// the prediction read them (a plan from the pool, a plan with graphs).
	PoolReservedIncrease, GraphReservedIncrease int64
	// Categories is each category of the plan: what the plan allocates in
	// it, as asked, and the growth of its Tracked.
	Categories []CategoryFit
	// Within is the most the difference may be with nothing to explain:
	// the largest unit the prediction rounded to (the pool's chunk, the
	// granularity, the allocation unit), a chunk of the driver's.
	Within int64
	// Why says, where the difference is more than Within, what the
	// figures show of the reasons; nil otherwise.
	Why []string
}

// CategoryFit is one category of a plan, in a [FitCheck].
type CategoryFit struct {
	Category string
	// Planned is what the plan's parts in the category allocate, as
	// asked: the growth of its Tracked that the plan predicts.
	Planned int64
	// TrackedIncrease is the growth of the category's Tracked from the
	// prediction to the check.
	TrackedIncrease int64
}

// Check reads the figure the prediction read again, after the load, and
// sets it beside the prediction: the growth measured, the difference, the
// driver's figures of the memory pool and of the graphs where the
// prediction read them, and each planned category's tracked growth.
// Where the difference is more than a chunk of the driver's (Within),
// Why says what the figures show of it: categories that grew otherwise
// than planned, a pool or graphs that reserved otherwise, memory this
// process took outside memtrack, other processes (on a device-wide
// figure), pages not written yet and the Go runtime's own memory (the
// CPU).
//
// It fails with [ErrNotSupported] on a device without a figure of this
// process (Metal: the prediction stands unchecked), with
// [ErrPerProcessUnavailable] where the per-process figure the prediction
// read is missing now, and as [Device.Usage] does.
func (p Prediction) Check() (FitCheck, error) {
	d := p.Plan.Device
	c := FitCheck{Prediction: p}
	if p.Source == SourceUnchecked {
		return c, fmt.Errorf("%w: a check of the prediction on %v: the device gives no figure of this process's memory, only the device's, so the prediction stands unchecked", ErrNotSupported, d)
	}
	if p.Source == "" {
		return c, fmt.Errorf("%w: a check of a prediction that Plan.Predict did not return", ErrInvalidArgument)
	}
	settle(d)
	u, err := d.Usage()
	if err != nil {
		return c, err
	}
	if p.PerProcess && !u.PerProcess {
		return c, wrapf(u.PerProcessErr, "a check of the prediction on %v, read from the per-process figure", d)
	}
	if p.PerProcess {
		c.After = u.ProcessUsed
	} else {
		c.After = u.Used
	}
	c.Measured = c.After - p.Before
	c.Difference = c.Measured - p.Predicted
	c.Within = max(p.AllocUnit, p.Granularity, p.PoolChunk)
	if p.start.poolRead {
		ps, err := d.Pool().Stats()
		if err != nil {
			return c, err
		}
		c.PoolReservedIncrease = ps.PoolReserved - p.start.poolReserved
	}
	if p.start.graphRead {
		if u.GraphErr != nil {
			return c, u.GraphErr
		}
		c.GraphReservedIncrease = u.GraphReserved - p.start.graphReserved
	}
	planned := map[string]int64{}
	for _, part := range p.Plan.Parts {
		if _, ok := planned[part.Category]; !ok {
			c.Categories = append(c.Categories, CategoryFit{Category: part.Category})
		}
		planned[part.Category] = fit.Add(planned[part.Category], fit.Mul(part.Size, part.Count))
	}
	for i := range c.Categories {
		cf := &c.Categories[i]
		cf.Planned, cf.TrackedIncrease = planned[cf.Category], categoryTracked(d, cf.Category)-p.start.tracked[cf.Category]
	}
	if abs64(c.Difference) > c.Within {
		c.Why = c.why(u)
	}
	return c, nil
}

// why says what the figures show of a difference of more than Within.
func (c FitCheck) why(u Usage) []string {
	p := c.Prediction
	var why []string
	explained := int64(0)
	for _, cf := range c.Categories {
		if cf.TrackedIncrease != cf.Planned {
			name := cf.Category
			if name == "" {
				name = "the memory outside the categories"
			}
			why = append(why, fmt.Sprintf("%s: the plan allocates %s, and its Tracked grew %s: the load is not the plan's",
				name, bytesize.Format(cf.Planned), bytesize.Format(cf.TrackedIncrease)))
			explained += cf.TrackedIncrease - cf.Planned
		}
	}
	if p.start.poolRead && c.PoolReservedIncrease != p.PoolReservedIncrease {
		why = append(why, fmt.Sprintf("the memory pool's reservation grew %s, %s predicted: it keeps freed memory (a release threshold above 0), or frees not yet synchronized",
			bytesize.Format(c.PoolReservedIncrease), bytesize.Format(p.PoolReservedIncrease)))
		explained += c.PoolReservedIncrease - p.PoolReservedIncrease
	}
	if p.start.graphRead && c.GraphReservedIncrease != p.GraphReservedIncrease {
		why = append(why, fmt.Sprintf("the graphs' reservation grew %s, %s predicted: graphs launched otherwise than their captures said, or not yet launched",
			bytesize.Format(c.GraphReservedIncrease), bytesize.Format(p.GraphReservedIncrease)))
		explained += c.GraphReservedIncrease - p.GraphReservedIncrease
	}
	if p.Plan.Device.kind == KindCPU {
		if nr := u.NotResident - p.start.notResident; nr != 0 {
			why = append(why, fmt.Sprintf("%s of the buffers are not resident (NotResident grew so): the OS counts a page once it is written", bytesize.Format(nr)))
			explained -= nr
		}
		if rt := runtimeMemory() - p.start.runtime; rt != 0 {
			why = append(why, fmt.Sprintf("the Go runtime's memory from the OS grew %s (its heap, which holds the buffers under 1 MiB, its stacks, its metadata), which it does not round as the plan does",
				bytesize.Format(rt)))
			explained += rt
		}
		if files := residentFiles(); files >= 0 && p.start.files >= 0 && files != p.start.files {
			why = append(why, fmt.Sprintf("the process's resident pages of files (its code and libraries, read in as they run: RssFile) grew %s",
				bytesize.Format(files-p.start.files)))
			explained += files - p.start.files
		}
	}
	if rest := c.Difference - explained; abs64(rest) > c.Within {
		what, who := "more", "this process allocated memory outside memtrack (a library's workspace, a context of its own)"
		if rest < 0 {
			what, who = "less", "the driver took less than its rules say (small allocations sharing a granule), or this process freed memory outside memtrack"
		}
		if !p.PerProcess {
			who += "; or other processes moved it: the figure is the device's, which every process moves"
		}
		if p.Plan.Device.kind == KindCPU {
			who = "the rest of the process moved: the OS's figure holds all of its memory, its anonymous memory outside the Go runtime's figures and memtrack's buffers (threads' stacks, memory of C code), and, where a cgroup limit applies, its cgroup's other processes and page cache"
		}
		why = append(why, fmt.Sprintf("%s %s than the plan and memtrack's own counts explain: %s", bytesize.Format(abs64(rest)), what, who))
	}
	return why
}

// runtimeMemory is the memory the Go runtime holds from the OS: all it
// mapped less what it released (runtime/metrics), read on the CPU, where
// the OS's figure of the process holds it.
func runtimeMemory() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

// residentFiles is the process's resident pages of files, on the CPU
// (hostmem.ResidentFiles), or -1 where the OS does not say.
func residentFiles() int64 {
	n, err := hostmem.ResidentFiles()
	if err != nil {
		return -1
	}
	return n
}

// abs64 returns |n|, math.MaxInt64 for math.MinInt64.
func abs64(n int64) int64 {
	if n < 0 {
		return max(-n, -(n + 1))
	}
	return n
}
