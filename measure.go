package memtrack

import (
	"errors"
	"fmt"
	"strings"

	"github.com/memtrack/memtrack/tracker"
)

// Measurement is what [Device.Measure] measured on a device while a function ran:
// the tracked figures, the figures the OS or driver reported, and the part of
// the reported growth that the tracker cannot see.
//
// The driver reports no peak, only a figure at an instant, and memory freed
// during the run is free again by its end. So the tracked peak is compared
// with nothing reported; Untracked compares the two at the same instants
// (before and after), as vLLM does when it profiles before sizing its KV
// cache: it is what the device gained that the package did not allocate
// (a CUDA context created on first use, library workspaces, the Go heap on
// the CPU, other processes).
type Measurement struct {
	Device Device

	StartTracked        int64 // tracked bytes when the run began
	PeakTracked         int64 // tracked high-water mark during the run
	EndTracked          int64 // tracked bytes when the run ended
	PeakTrackedIncrease int64 // PeakTracked - StartTracked

	// The device-side figure ([Stats].Held): with buffers freed by
	// [Buffer.FreeAsync] counted until their streams executed the frees.
	StartHeld        int64
	PeakHeld         int64
	EndHeld          int64 // with the frees still in flight when the run ended
	PeakHeldIncrease int64 // PeakHeld - StartHeld

	Total        int64 // the device's memory, as reported
	StartUsed    int64 // memory in use on the device when the run began, as reported
	EndUsed      int64 // memory in use on the device when the run ended, as reported
	UsedIncrease int64 // EndUsed - StartUsed

	// StartNotResident and EndNotResident are [Usage].NotResident when the
	// run began and ended: on the CPU, the tracked bytes not yet written,
	// which Used leaves out.
	StartNotResident, EndNotResident int64

	// Untracked is UsedIncrease + (EndNotResident - StartNotResident) -
	// (EndHeld - StartHeld): the reported growth that tracked buffers do
	// not account for, those whose stream-ordered frees were still in
	// flight at the end included (the driver still counts them, as the
	// device-side figure does), and those not yet written left out (the
	// OS does not count them). It can be negative where others released
	// memory during the run.
	Untracked int64

	// StartGraphReserved and EndGraphReserved are the driver's graph
	// memory reserved ([Usage].GraphReserved) when the run began and
	// ended, on a CUDA GPU whose driver has graph memory nodes (both 0,
	// and EndGraphOutliving too, where either reading had none, or where
	// the device's graph chunk, in which EndGraphOutliving counts, could
	// not be had: the graphs' memory then stays in Untracked): their
	// difference is what the graphs launched during the run reserved,
	// which Untracked includes and [Measurement.Budget] sets aside apart.
	StartGraphReserved, EndGraphReserved int64
	// EndGraphOutliving is, where the run has StartGraphReserved and
	// EndGraphReserved, the [Capture].Outliving of every capture memtrack
	// had counted on the device when the run ended, summed (those it knew
	// invalidated left out): the most that allocations of graphs that
	// outlived a launch and are not freed yet may hold of the graph memory
	// then. The driver reuses none of that memory for other graphs while
	// they stay unfreed (CUDA Programming Guide, Graph Memory Nodes:
	// "physical pages cannot be reused if they are bound to ... a graph
	// allocation which remains unfreed"). memtrack does not see launches,
	// so it cannot tell an allocation freed since its launch from one its
	// graph allocated again, and counts every outliving allocation, each
	// capture's [Capture].Outliving (a capture forgotten past [MaxCaptures],
	// its bytes in whole chunks and two chunks an allocation, at least
	// that): [Measurement.Budget] sets apart no more of it than the run's
	// graphs reserved.
	EndGraphOutliving int64
	// GraphNeed is what graphs captured after the run will reserve when
	// they are launched, which [Measurement.WithGraphs] adds from their
	// captures; Measure leaves it 0.
	GraphNeed int64

	// Categories holds, on a device with categories ([Device.Category]),
	// each category's figures during the run, in the order the categories
	// were made: "the activations peaked at X while the KV cache held Y"
	// is one read. Nil on a device without categories. Each category's
	// peak is taken by a scope of its own, as the device's is, so
	// measurements with categories nest and overlap too. A category made
	// during the run is not in it.
	Categories []CategoryMeasurement

	// The driver's per-process figures (NVML, on CUDA devices) at the
	// start and the end, where PerProcess: both readings had them.
	// PerProcessErr says why they are missing otherwise ([Usage]).
	PerProcess              bool
	PerProcessErr           error
	StartProcessUsed        int64 // this process's device memory when the run began, as the driver accounts it
	EndProcessUsed          int64 // and when it ended
	StartOtherProcessesUsed int64 // the other processes' device memory when the run began
	EndOtherProcessesUsed   int64 // and when it ended
	// ProcessUntracked is (EndProcessUsed - StartProcessUsed) - (EndHeld -
	// StartHeld): this process's own untracked growth during the run,
	// which other processes do not move (Untracked holds theirs too).
	ProcessUntracked int64
	OtherProcesses   []ProcessMemory // the other processes at the end, the largest first
}

// CategoryMeasurement is what [Device.Measure] measured of one category:
// its tracked bytes when the run began and ended, and its own peak during
// the run (which need not fall at the moment of the device's).
type CategoryMeasurement struct {
	Category            string
	StartTracked        int64
	PeakTracked         int64
	EndTracked          int64
	PeakTrackedIncrease int64 // PeakTracked - StartTracked
}

// Category returns the measurement of the category called name, and
// whether the device had it when the run began.
func (p Measurement) Category(name string) (CategoryMeasurement, bool) {
	for _, c := range p.Categories {
		if c.Category == name {
			return c, true
		}
	}
	return CategoryMeasurement{}, false
}

// Measure measures the memory f needs on the device, the way an inference
// server does before it sizes its cache: it reads the tracked and
// reported figures at the start, runs f inside a [PeakScope], and reads them
// again at the end. f's error is returned, wrapped, with the figures
// measured so far.
//
// The peak is the device's, not the caller's: allocations by other
// goroutines during f are in the figures, which is what sizing a cache needs
// (they compete for the same memory) and is safe under concurrency. It is
// the peak of a scope of its own, so measurements of one device may overlap
// and nest, and neither they nor [Device.ResetPeakMemoryStats] move each
// other's peaks; Measure resets nothing. (The allocation sites at the
// peak, [SiteRecorder.PeakSnapshot], are the device's: reset them with
// ResetPeakMemoryStats before f where they should cover f alone.)
//
// On the CPU, Measure runs the Go garbage collector and returns the freed
// memory to the OS before each reading of the reported figures, so that
// Untracked measures what stays rather than garbage not yet collected.
//
// Measure fails before running f, changing nothing, where the device does
// not exist or its memory cannot be queried.
func (d Device) Measure(f func() error) (Measurement, error) {
	if f == nil {
		return Measurement{Device: d}, fmt.Errorf("%w: measurement of %v: nil function", ErrInvalidArgument, d)
	}
	m, err := d.startMeasure()
	if err != nil {
		return Measurement{Device: d}, err
	}
	if err := m.open(); err != nil {
		return Measurement{Device: d}, err
	}
	ferr := runScoped([]*measuring{m}, f)
	p, err := m.end()
	if err != nil {
		return p, errors.Join(wrapRun(d, ferr), err)
	}
	return p, wrapRun(d, ferr)
}

// measuring is a measurement under way on one device, taken in three
// steps so that a measurement of several devices (MeasureDevices) can
// refuse before it changes anything: startMeasure checks the device and
// reads its memory, registering nothing; open registers it, opens the
// scopes and reads the rest of the start; end reads the end, once
// runScoped has run the function and closed the scopes.
type measuring struct {
	p         Measurement
	s         *deviceTable
	r         *tracker.Record
	sc        *PeakScope
	catScopes []*tracker.Scope
	cats      []*tracker.Record
	graphs    graphFigures
}

// startMeasure is the first step of a measurement of d: it checks the
// device and reads its memory, which are what may refuse the measurement,
// and registers nothing.
func (d Device) startMeasure() (*measuring, error) {
	if _, _, err := d.lookup(start); err != nil {
		return nil, err
	}
	settle(d)
	free, total, err := d.MemGetInfo()
	if err != nil {
		return nil, err
	}
	return &measuring{p: Measurement{Device: d, Total: total, StartUsed: max(total-free, 0)}}, nil
}

// open is the second step: it registers the device, opens the peak scopes
// (the scope opens before the start is read, so that its peaks are never
// below it) and reads the rest of the start.
func (m *measuring) open() error {
	d, p := m.p.Device, &m.p
	s, r, err := d.lookup(use)
	if err != nil {
		return err
	}
	sc, err := d.OpenPeakScope()
	if err != nil {
		return err
	}
	m.s, m.r, m.sc = s, r, sc
	p.StartTracked, p.StartNotResident = r.Tracked(), s.notResident(d.ordinal)
	p.StartHeld, _ = deviceHeld(d, p.StartTracked, p.StartTracked)
	readProcesses(s, d).setStart(p)
	m.graphs = readGraphs(s, d)
	// Each category gets a scope of its own too.
	m.catScopes, m.cats = d.peekCategories().startMeasure(p)
	return nil
}

// close closes the scopes that open opened: once, by runScoped.
func (m *measuring) close() {
	m.sc.Close()
	for _, c := range m.catScopes {
		c.Close() // end reads the peak again
	}
}

// end is the last step: it reads the end of the measurement, whose
// scopes are closed. Its error is that of the reading of the device's
// memory, with the figures read so far.
func (m *measuring) end() (Measurement, error) {
	d, p, s := m.p.Device, m.p, m.s
	p.PeakTracked, p.EndTracked = m.sc.PeakTracked(), m.r.Tracked()
	endMeasure(m.catScopes, m.cats, &p)
	p.PeakTrackedIncrease = p.PeakTracked - p.StartTracked
	settle(d)
	p.EndHeld, _ = deviceHeld(d, p.EndTracked, p.EndTracked)
	p.PeakHeld = m.sc.PeakHeld()
	p.PeakHeldIncrease = p.PeakHeld - p.StartHeld
	free, total, err := d.MemGetInfo()
	if err != nil {
		return p, err
	}
	p.Total, p.EndUsed, p.EndNotResident = total, max(total-free, 0), s.notResident(d.ordinal)
	p.UsedIncrease = p.EndUsed - p.StartUsed
	p.Untracked = p.UsedIncrease + (p.EndNotResident - p.StartNotResident) - (p.EndHeld - p.StartHeld)
	readProcesses(s, d).setEnd(&p)
	if g := m.graphs; !g.absent && g.err == nil {
		if end := readGraphs(s, d); end.err == nil {
			if outliving, err := s.graphOutliving(d); err == nil {
				p.StartGraphReserved, p.EndGraphReserved = g.reserved(), end.reserved()
				p.EndGraphOutliving = outliving
			}
		}
	}
	return p, nil
}

// runScoped runs f and closes the scopes of the measurements ms, also
// where f panics, so that no scope is left open to cost every later
// allocation a load per scope.
func runScoped(ms []*measuring, f func() error) error {
	defer func() {
		for _, m := range ms {
			m.close()
		}
	}()
	return f()
}

func wrapRun(d Device, err error) error {
	if err == nil {
		return nil
	}
	return wrapf(err, "measurement of %v", d)
}

// startMeasure opens a peak scope on each category of cs (nil for none)
// as a measurement begins, before it reads their starting figures, and
// records those in p; it returns the scopes and the categories' records,
// in the order of p.Categories, or nils for a device without categories.
// Nothing is reset: measurements nest.
func (cs *categorySet) startMeasure(p *Measurement) ([]*tracker.Scope, []*tracker.Record) {
	if cs == nil {
		return nil, nil
	}
	names, recs := cs.list()
	if len(recs) == 0 {
		return nil, nil
	}
	scopes := make([]*tracker.Scope, len(recs))
	p.Categories = make([]CategoryMeasurement, len(recs))
	for i, r := range recs {
		scopes[i] = r.OpenScope()
		p.Categories[i] = CategoryMeasurement{Category: names[i], StartTracked: r.Tracked()}
	}
	return scopes, recs
}

// endMeasure completes the categories of p as a measurement ends, from
// the scopes startMeasure opened, which it closes.
func endMeasure(scopes []*tracker.Scope, recs []*tracker.Record, p *Measurement) {
	for i, sc := range scopes {
		c := &p.Categories[i]
		c.PeakTracked, _ = sc.Close() // runScoped closed it already: Close returns its peak again
		c.EndTracked = recs[i].Tracked()
		c.PeakTrackedIncrease = c.PeakTracked - c.StartTracked
	}
}

// setStart and setEnd put the figures of the start and the end of a run
// into p; a run has per-process figures where both readings have them.
func (f processFigures) setStart(p *Measurement) {
	p.PerProcess, p.PerProcessErr = f.ok(), f.err
	p.StartProcessUsed, p.StartOtherProcessesUsed = f.processUsed, f.otherProcessesUsed
}

func (f processFigures) setEnd(p *Measurement) {
	if p.PerProcess && !f.ok() {
		p.PerProcess, p.PerProcessErr = false, f.err
	}
	if !p.PerProcess {
		p.StartProcessUsed, p.StartOtherProcessesUsed = 0, 0
		return
	}
	p.EndProcessUsed, p.EndOtherProcessesUsed = f.processUsed, f.otherProcessesUsed
	p.OtherProcesses = f.otherProcesses
	p.ProcessUntracked = (p.EndProcessUsed - p.StartProcessUsed) - (p.EndHeld - p.StartHeld)
}

// MeasureDevices measures the memory f needs on each of devices, for a
// pass that uses them all at once, as a tensor-parallel forward pass does
// (each layer split across the devices): f runs once, inside the
// measurement of every device, and the measurements come back in the
// order of devices, one per device, each what [Device.Measure] of that
// device alone around f would return. Running f once per device would
// measure each device during a pass of its own, with the other devices'
// shares of the work missing.
//
// Each device's measurement is Device.Measure's, and keeps its semantics:
// the peak is the device's, taken by a scope of its own (so measurements
// nest and overlap), with each category's; the per-process figures are
// read where the driver has them; on the CPU the Go heap is collected
// before each reading. The devices' first readings are taken in the order
// of devices before f runs, and their last ones in the reverse order after
// it, so that every device's measurement covers all of f.
//
// f's error is returned, wrapped once, with the figures measured so far;
// an error of a device's last readings is joined to it. MeasureDevices
// fails before running f, changing nothing, where devices is empty or
// names a device twice, f is nil (each [ErrInvalidArgument]), or a device
// does not exist or its memory cannot be queried.
func MeasureDevices(devices []Device, f func() error) ([]Measurement, error) {
	ms := make([]Measurement, len(devices))
	for i, d := range devices {
		ms[i].Device = d
	}
	if err := checkDevices(devices, "measurement"); err != nil {
		return ms, err
	}
	if f == nil {
		return ms, fmt.Errorf("%w: measurement of %s: nil function", ErrInvalidArgument, deviceList(devices))
	}
	// Every device is checked and its memory read before any is
	// registered, so that a refusal changes nothing; then each opens its
	// scopes, in order, and every scope is open while f runs.
	runs := make([]*measuring, len(devices))
	for i, d := range devices {
		m, err := d.startMeasure()
		if err != nil {
			return ms, err
		}
		runs[i] = m
	}
	for i, m := range runs {
		if err := m.open(); err != nil {
			for _, o := range runs[:i] {
				o.close()
			}
			return ms, err
		}
	}
	ferr := runScoped(runs, f)
	errs := make([]error, len(devices))
	for i := len(runs) - 1; i >= 0; i-- {
		ms[i], errs[i] = runs[i].end()
	}
	if ferr != nil {
		ferr = wrapf(ferr, "measurement of %s", deviceList(devices))
	}
	return ms, errors.Join(append([]error{ferr}, errs...)...)
}

// checkDevices refuses an empty list of devices, or one that names a
// device twice, for the operation op.
func checkDevices(devices []Device, op string) error {
	if len(devices) == 0 {
		return fmt.Errorf("%w: %s of no device: give at least one", ErrInvalidArgument, op)
	}
	for i, d := range devices {
		for _, e := range devices[:i] {
			if d == e {
				return fmt.Errorf("%w: %s of %s: %v is given twice", ErrInvalidArgument, op, deviceList(devices), d)
			}
		}
	}
	return nil
}

// deviceList writes devices as "cuda:0, cuda:1".
func deviceList(devices []Device) string {
	names := make([]string, len(devices))
	for i, d := range devices {
		names[i] = d.String()
	}
	return strings.Join(names, ", ")
}
