package memtrack

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/memtrack/memtrack/internal/bytesize"
	"go.uber.org/atomic"
)

// maxReportSites is how many allocation sites an [OutOfMemoryError] lists.
const maxReportSites = 5

// outOfMemory completes the report of e, a request r of the device
// refused by a limit, the tracker's capacity or the backend, counted in
// the ledger l, with what is known at this moment: the device's figures,
// the driver's per-process and graph memory figures, and the parts of the
// device's reporters (the allocation sites, the categories), which then
// act on it (the observers). It runs on the refusal path only.
func (d Device) outOfMemory(s *deviceTable, r *request, l *ledger, e *OutOfMemoryError) *OutOfMemoryError {
	e.Device = d
	if l.crec != nil {
		e.Category = r.cats.name(r.cat)
		if e.Reason != categoryLimitReason {
			e.CategoryTracked = l.crec.Tracked() // the category's limit's refusal has the figure it was held against
		}
	}
	st := l.rec.Snapshot()
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
	s.report(d.ordinal, e)
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
	fmt.Fprintf(&b, "memtrack: out of memory on %v: tried to allocate %s\n", e.Device, bytesize.Exact(e.Requested))
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
		fmt.Fprintf(&b, "  device:         %s total, %s free (as the OS or driver reports them)\n", bytesize.Exact(e.Total), bytesize.Exact(e.Free))
	case e.MemInfoErr != nil:
		fmt.Fprintf(&b, "  device:         figures unavailable: %v\n", e.MemInfoErr)
	}
	fmt.Fprintf(&b, "  this process:   %s tracked in %s, peak %s", bytesize.Exact(e.Tracked), buffers(e.Buffers, "live buffer"), bytesize.Exact(e.PeakTracked))
	if e.Limit > 0 && !e.byCategoryLimit() {
		fmt.Fprintf(&b, ", memory limit %s", bytesize.Exact(e.Limit))
	}
	if e.Capacity > 0 {
		fmt.Fprintf(&b, ", capacity %s", bytesize.Exact(e.Capacity))
	}
	b.WriteString("\n")
	if e.Category != "" {
		fmt.Fprintf(&b, "  category:       %q: %s tracked", e.Category, bytesize.Exact(e.CategoryTracked))
		if e.byCategoryLimit() {
			fmt.Fprintf(&b, ", memory limit %s", bytesize.Exact(e.Limit))
		}
		b.WriteString("\n")
	}
	if e.Total > 0 {
		graphs := ""
		if e.GraphReserved > 0 {
			graphs = fmt.Sprintf("; of it, %s the driver reserves for CUDA graphs", bytesize.Exact(e.GraphReserved))
		}
		fmt.Fprintf(&b, "  not tracked:    %s in use on the device that memtrack did not allocate (the rest of this process, libraries, a CUDA context, other processes)%s\n", bytesize.Exact(max(e.Untracked, 0)), graphs)
	}
	if e.NotResident > 0 {
		fmt.Fprintf(&b, "  not resident:   %s of the tracked bytes not written yet, which the device does not count as used\n", bytesize.Exact(e.NotResident))
	}
	for _, l := range e.processLines() {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if len(e.Sites) > 0 {
		b.WriteString("  largest holders (allocation sites, live buffers; sampled figures are estimates):\n")
		for _, s := range e.Sites {
			fmt.Fprintf(&b, "    %s in %s: %s\n", bytesize.Exact(s.Bytes), buffers(s.Buffers, "buffer"), siteName(s.Stack))
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
		t = append(t, fmt.Sprintf("raise the memory limit of the category %q (Category.SetMemoryLimit, now %s) or free its buffers", e.Category, bytesize.Format(e.Limit)))
	case e.Limit > 0:
		t = append(t, fmt.Sprintf("raise the memory limit (Device.SetMemoryLimit, now %s) or free buffers", bytesize.Format(e.Limit)))
	}
	if e.Limit == 0 && e.Total > 0 && e.Untracked > e.Tracked && e.Untracked > e.Requested {
		t = append(t, fmt.Sprintf("most of the memory in use is not memtrack's (%s): look for other processes or libraries on the device", bytesize.Format(e.Untracked)))
	}
	if e.GraphReserved > e.Requested && e.Free < e.Requested {
		t = append(t, fmt.Sprintf("return the graph memory no graph uses now to the device (Graphs().Trim; the driver reserves %s for CUDA graphs)", bytesize.Format(e.GraphReserved)))
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

// OutOfMemoryObserver is a function registered with [Device.OnOutOfMemory]
// to run on every refused allocation of a device; remove it with
// [OutOfMemoryObserver.Remove].
type OutOfMemoryObserver struct {
	dev     Device
	f       func(*OutOfMemoryError)
	removed atomic.Bool
}

// observersSlot is the out-of-memory observers' slot (hooks.go): last, so
// that they run on the whole report.
const observersSlot = 4

// oomObservers is the observers of one device, in its state, published as
// an immutable slice, and whether they are running. Once a device has had
// an observer, they are one of its reporters.
type oomObservers struct {
	mu      sync.Mutex // serialises changes of list
	list    atomic.Pointer[[]*OutOfMemoryObserver]
	running atomic.Bool
}

// OnOutOfMemory registers f to run on every allocation of the device that
// is refused with an [*OutOfMemoryError] (by the memory limit, the device
// or the tracker's capacity), with that error and its report, before the
// allocation returns it. f runs on the goroutine whose allocation was
// refused, after the refusal is counted and with no lock of this package
// held, so it may read the device's figures, write profiles or allocate;
// package [github.com/memtrack/memtrack/oomdump] is such an observer,
// ready-made. f receives a deep copy of the error, its own down to every
// slice (Sites and their stacks, OtherProcesses, Categories) and every
// error of this package it holds (MemInfoErr, PerProcessErr, and what they
// wrap): changing it changes nothing the caller sees, nor what the next
// observer receives.
//
// The rules, each tested:
//   - Observers run in the order they were registered. Each call is a
//     registration of its own: the same function registered twice runs
//     twice per refusal, and each registration is removed by its own
//     [OutOfMemoryObserver.Remove].
//   - A panic of f is recovered and logged with [slog.Error]; the
//     allocation returns its error as it would have, the figures are
//     unchanged, and the next observers still run.
//   - While observers of a device run, further refusals on that device
//     (theirs, such as an allocation of a dump that fails, or another
//     goroutine's) return their errors without running the observers
//     again: no observer recurses into itself, and a burst of refusals
//     runs them once. Refusals on other devices run their own observers
//     meanwhile: a slow observer holds up only the allocation that is
//     running it.
//
// It fails with [ErrInvalidArgument] for a nil f, and where the device
// does not exist.
func (d Device) OnOutOfMemory(f func(*OutOfMemoryError)) (*OutOfMemoryObserver, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: OnOutOfMemory of %v: nil function", ErrInvalidArgument, d)
	}
	s, _, err := d.lookup(use)
	if err != nil {
		return nil, err
	}
	o := &OutOfMemoryObserver{dev: d, f: f}
	obs := slotOf(s, d.ordinal, observersSlot, func() *oomObservers { return new(oomObservers) })
	s.setReporter(d.ordinal, observersSlot, obs)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var list []*OutOfMemoryObserver
	if p := obs.list.Load(); p != nil {
		list = append(list, *p...)
	}
	list = append(list, o)
	obs.list.Store(&list)
	return o, nil
}

// Remove unregisters the observer: refusals that begin after Remove
// returns do not run it. It does not wait for a run under way, so an
// observer may remove itself. Removing it again changes nothing and
// returns an error matching [ErrInvalidArgument].
func (o *OutOfMemoryObserver) Remove() error {
	if o == nil {
		return fmt.Errorf("%w: Remove of a nil *OutOfMemoryObserver", ErrInvalidArgument)
	}
	if !o.removed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: out-of-memory observer of %v removed twice", ErrInvalidArgument, o.dev)
	}
	obs := o.dev.observers() // OnOutOfMemory made them
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var list []*OutOfMemoryObserver
	if p := obs.list.Load(); p != nil {
		for _, x := range *p {
			if x != o {
				list = append(list, x)
			}
		}
	}
	if len(list) == 0 {
		obs.list.Store(nil)
	} else {
		obs.list.Store(&list)
	}
	return nil
}

// observers returns the device's observers, or nil where it has none.
func (d Device) observers() *oomObservers {
	if s, _, _ := d.lookup(read); s != nil {
		return slotOf[oomObservers](s, d.ordinal, observersSlot, nil)
	}
	return nil
}

// report runs the observers on e, unless they are running already.
func (obs *oomObservers) report(e *OutOfMemoryError) {
	p := obs.list.Load()
	if p == nil || !obs.running.CompareAndSwap(false, true) {
		return
	}
	defer obs.running.Store(false)
	for _, o := range *p {
		if !o.removed.Load() {
			o.run(e)
		}
	}
}

// run calls the observer with a deep copy of the error of its own,
// recovering a panic.
func (o *OutOfMemoryObserver) run(e *OutOfMemoryError) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("memtrack: an out-of-memory observer panicked; the allocation's error is returned as it was",
				"device", o.dev.String(), "panic", fmt.Sprint(p))
		}
	}()
	o.f(e.clone())
}

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
			limit = bytesize.Exact(c.Limit)
		}
		name := c.Category
		if c.Category == e.Category {
			name += " (the request's)"
		}
		fmt.Fprintf(w, "    %s\t%s\t%s\t%s\n", name, bytesize.Exact(c.Tracked), bytesize.Exact(c.PeakTracked), limit)
	}
	if len(more) > 0 {
		var n int64
		for _, c := range more {
			n += c.Tracked
		}
		fmt.Fprintf(w, "    %d more categories\t%s\t-\t-\n", len(more), bytesize.Exact(n))
	}
	if rest.Category != "" {
		fmt.Fprintf(w, "    %s\t%s\t-\t-\n", rest.Category, bytesize.Exact(rest.Tracked))
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

// setOutOfMemory puts the figures into the report of e.
func (f processFigures) setOutOfMemory(e *OutOfMemoryError) {
	e.PerProcess, e.PerProcessErr = f.ok(), f.err
	if f.ok() {
		e.ProcessUsed, e.OtherProcessesUsed, e.OtherProcesses = f.processUsed, f.otherProcessesUsed, f.otherProcesses
	}
}

// processLines writes the report's lines of the driver's per-process
// figures: this process's own, and each other process with its usage, as
// PyTorch's out-of-memory message lists them.
func (e *OutOfMemoryError) processLines() []string {
	source, own := e.Device.kind.processSource()
	if !e.PerProcess {
		if e.PerProcessErr == nil {
			return nil
		}
		return []string{fmt.Sprintf("%-15s unavailable: %v", "in use ("+source+"):", e.PerProcessErr)}
	}
	lines := []string{fmt.Sprintf("%-15s this process %s, of which %s not tracked (%s, libraries, memory allocated without memtrack)",
		"in use ("+source+"):", bytesize.Exact(e.ProcessUsed), bytesize.Exact(processUntracked(e.ProcessUsed, e.Tracked)), own)}
	if len(e.OtherProcesses) == 0 {
		return append(lines, "other processes: none on the device")
	}
	lines = append(lines, fmt.Sprintf("other processes: %s in %d", bytesize.Exact(e.OtherProcessesUsed), len(e.OtherProcesses)))
	for _, p := range e.OtherProcesses {
		name := p.Name
		if name == "" {
			name = "(name unknown)"
		}
		lines = append(lines, fmt.Sprintf("  process %d (%s) has %s in use", p.PID, name, bytesize.Exact(p.Used)))
	}
	return lines
}
