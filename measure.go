package memtrack

import (
	"errors"
	"fmt"
	"runtime/debug"

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
	// ended, on a CUDA GPU whose driver has graph memory nodes (both 0
	// where either reading had none): their difference is what the graphs
	// launched during the run reserved, which Untracked includes and
	// [Measurement.Budget] sets aside apart.
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
	// graph allocated again, and counts every outliving allocation:
	// [Measurement.Budget] sets apart no more of it than the run's graphs
	// reserved.
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
			p.StartGraphReserved, p.EndGraphReserved = g.reserved(), end.reserved()
			p.EndGraphOutliving = s.graphOutliving(d.ordinal)
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

// settle makes the reported figures of the CPU measure what stays: it runs
// the Go garbage collector and returns the freed memory to the OS
// ([debug.FreeOSMemory] does both), as vLLM runs gc.collect() and
// torch.cuda.empty_cache() before it reads the device. Without it, Go-heap
// memory that is garbage (CPU buffers under 1 MiB once freed, anything f
// dropped) counts as in use until a collection and the scavenger get to it,
// and the untracked growth swings by hundreds of MiB from run to run. Other
// devices' memory is not in the Go heap: nothing to do.
func settle(d Device) {
	if d.kind == KindCPU {
		debug.FreeOSMemory()
	}
}

func wrapRun(d Device, err error) error {
	if err == nil {
		return nil
	}
	return wrapf(err, "measurement of %v", d)
}
