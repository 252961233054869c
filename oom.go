package memtrack

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/memtrack/memtrack/tracker"
)

// maxReportSites is how many allocation sites an [OutOfMemoryError] lists.
const maxReportSites = 5

// outOfMemory completes the report of e, an allocation of the device in
// category c (the zero Category for none) refused by a limit, the tracker's
// capacity or the backend, with what is known at this moment, and runs the
// device's observers. Each feature writes its own part: the categories,
// the per-process figures, the allocation sites. It runs on the refusal
// path only.
func (d Device) outOfMemory(s *deviceTable, rec *tracker.Record, e *OutOfMemoryError, c Category) *OutOfMemoryError {
	e.Device = d
	if crec := c.record(); crec != nil {
		e.Category = c.Name()
		if e.Reason != categoryLimitReason {
			e.CategoryTracked = crec.Tracked() // the category's limit's refusal has the figure it was held against
		}
	}
	st := rec.Snapshot()
	e.Buffers, e.PeakTracked = st.Buffers, st.PeakTracked
	if free, total, err := s.b.memInfo(d.ordinal); err == nil {
		e.Total, e.Free = total, free
		e.NotResident = s.notResident(d.ordinal)
		e.Untracked = untracked(max(total-free, 0), e.NotResident, e.Tracked)
	} else {
		e.MemInfoErr = fillError(err, d, 0, nil)
	}
	readProcesses(s, d).setOutOfMemory(e)
	e.GraphReserved = readGraphs(s, d).reserved()
	d.Sites().report(e)
	e.Categories = d.peekCategories().rows(d, rec)
	d.observers().notify(e)
	return e
}

// Format writes the error: its one line (Error) for %v and %s, and the
// full report for %+v, in the manner of PyTorch's out-of-memory message:
// what was asked, what the device has, what this process holds, what else
// is on the device, who holds the most, and what to try.
func (e *OutOfMemoryError) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('+'):
		io.WriteString(f, e.Report())
	case verb == 'q':
		fmt.Fprintf(f, "%q", e.Error())
	default:
		io.WriteString(f, e.Error())
	}
}

// Report returns the full report that %+v writes, over several lines. An
// error that carries no report (one made by [Measurement.Budget], or by
// hand) reports its one line.
func (e *OutOfMemoryError) Report() string {
	if e.Total == 0 && e.MemInfoErr == nil {
		return e.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "memtrack: out of memory on %v: tried to allocate %s\n", e.Device, exactBytes(e.Requested))
	refused := e.Reason
	if refused == "" {
		refused = "the device"
	}
	if e.Code != 0 {
		refused += fmt.Sprintf(" (code %d)", e.Code)
	}
	fmt.Fprintf(&b, "  refused by:     %s\n", refused)
	switch {
	case e.Total > 0:
		fmt.Fprintf(&b, "  device:         %s total, %s free (as the OS or driver reports them)\n", exactBytes(e.Total), exactBytes(e.Free))
	case e.MemInfoErr != nil:
		fmt.Fprintf(&b, "  device:         figures unavailable: %v\n", e.MemInfoErr)
	}
	fmt.Fprintf(&b, "  this process:   %s tracked in %s, peak %s", exactBytes(e.Tracked), buffers(e.Buffers, "live buffer"), exactBytes(e.PeakTracked))
	if e.Limit > 0 && !e.byCategoryLimit() {
		fmt.Fprintf(&b, ", memory limit %s", exactBytes(e.Limit))
	}
	if e.Capacity > 0 {
		fmt.Fprintf(&b, ", capacity %s", exactBytes(e.Capacity))
	}
	b.WriteString("\n")
	if e.Category != "" {
		fmt.Fprintf(&b, "  category:       %q: %s tracked", e.Category, exactBytes(e.CategoryTracked))
		if e.byCategoryLimit() {
			fmt.Fprintf(&b, ", memory limit %s", exactBytes(e.Limit))
		}
		b.WriteString("\n")
	}
	if e.Total > 0 {
		graphs := ""
		if e.GraphReserved > 0 {
			graphs = fmt.Sprintf("; of it, %s the driver reserves for CUDA graphs", exactBytes(e.GraphReserved))
		}
		fmt.Fprintf(&b, "  not tracked:    %s in use on the device that memtrack did not allocate (the rest of this process, libraries, a CUDA context, other processes)%s\n", exactBytes(max(e.Untracked, 0)), graphs)
	}
	if e.NotResident > 0 {
		fmt.Fprintf(&b, "  not resident:   %s of the tracked bytes not written yet, which the device does not count as used\n", exactBytes(e.NotResident))
	}
	for _, l := range e.processLines() {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if len(e.Sites) > 0 {
		b.WriteString("  largest holders (allocation sites, live buffers; sampled figures are estimates):\n")
		for _, s := range e.Sites {
			fmt.Fprintf(&b, "    %s in %s: %s\n", exactBytes(s.Bytes), buffers(s.Buffers, "buffer"), siteName(s.Stack))
		}
	}
	writeReportCategories(&b, e)
	for _, t := range e.tryThis() {
		fmt.Fprintf(&b, "  try: %s\n", t)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// tryThis returns what to try, most likely first.
func (e *OutOfMemoryError) tryThis() []string {
	var t []string
	switch {
	case e.byCategoryLimit():
		t = append(t, fmt.Sprintf("raise the memory limit of the category %q (Category.SetMemoryLimit, now %s) or free its buffers", e.Category, formatBytes(e.Limit)))
	case e.Limit > 0:
		t = append(t, fmt.Sprintf("raise the memory limit (Device.SetMemoryLimit, now %s) or free buffers", formatBytes(e.Limit)))
	}
	if e.Limit == 0 && e.Total > 0 && e.Untracked > e.Tracked && e.Untracked > e.Requested {
		t = append(t, fmt.Sprintf("most of the memory in use is not memtrack's (%s): look for other processes or libraries on the device", formatBytes(e.Untracked)))
	}
	if e.GraphReserved > e.Requested && e.Free < e.Requested {
		t = append(t, fmt.Sprintf("return the graph memory no graph uses now to the device (Graphs().Trim; the driver reserves %s for CUDA graphs)", formatBytes(e.GraphReserved)))
	}
	if e.Total > 0 && e.Limit == 0 && e.Free >= e.Requested {
		t = append(t, "the device reports enough free memory in all but one piece: allocate in smaller buffers, or free and allocate again, to work around fragmentation")
	}
	if e.Tracked > 0 {
		t = append(t, "free buffers that are no longer needed, or allocate less (smaller batches, shorter sequences)")
	}
	if !e.SitesRecorded {
		t = append(t, "record allocation sites (Device.Sites().Enable) to see who holds the memory")
	}
	return t
}

// siteName names a site by its innermost frame and the frame that called
// it.
func siteName(stack []uintptr) string {
	if len(stack) == 0 {
		return OtherSite
	}
	frames := runtime.CallersFrames(stack)
	var names []string
	for len(names) < 2 {
		f, more := frames.Next()
		if f.Function != "" {
			n := f.Function
			if len(names) == 0 {
				n += fmt.Sprintf(" (%s:%d)", shortFile(f.File), f.Line)
			}
			names = append(names, n)
		}
		if !more {
			break
		}
	}
	return strings.Join(names, " < ")
}

// buffers writes n buffers with the noun in the singular or plural.
func buffers(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func shortFile(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// clone returns a deep copy of e: every slice it holds (Sites and their
// stacks, OtherProcesses, Categories) and the errors it holds, down the
// chains of this package's errors (cloneError), are the copy's own, so
// that changing the copy changes nothing of e.
func (e *OutOfMemoryError) clone() *OutOfMemoryError {
	c := *e
	c.Sites = slices.Clone(e.Sites)
	for i := range c.Sites {
		c.Sites[i].Stack = slices.Clone(c.Sites[i].Stack)
	}
	c.OtherProcesses = slices.Clone(e.OtherProcesses)
	c.Categories = slices.Clone(e.Categories)
	c.MemInfoErr = cloneError(e.MemInfoErr)
	c.PerProcessErr = cloneError(e.PerProcessErr)
	return &c
}

// cloneError returns a copy of err where it is one of this package's
// errors, its wrapped errors copied alike, and err otherwise: an error of
// another package, or one whose fields nothing outside this package can
// change (a sentinel, fmt's wrappers around them).
func cloneError(err error) error {
	switch e := err.(type) {
	case *OutOfMemoryError:
		return e.clone()
	case *BackendError:
		c := *e
		c.Err = cloneError(e.Err)
		return &c
	case *contextError:
		return &contextError{context: e.context, err: cloneError(e.err)}
	case *perProcessError:
		return &perProcessError{dev: e.dev, err: cloneError(e.err)}
	}
	return err
}
