package memtrack

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/memtrack/memtrack/internal/bytesize"
)

// ErrPerProcessUnavailable is matched by the PerProcessErr of a [Usage], a
// [Measurement], a [Budget] or an [*OutOfMemoryError] where the driver's
// per-process figures are missing, and says why: the device is not a CUDA
// GPU, NVML is unavailable (no libnvidia-ml.so.1, no permission), NVML
// does not list this process (a container whose PID namespace hides it),
// or gives no figure for it. The device-wide figures are then all there is.
var ErrPerProcessUnavailable = errors.New("memtrack: no per-process figures")

// processBackend is a backend that can say which processes hold memory on
// a device, as the driver accounts it (CUDA, through NVML).
type processBackend interface {
	// processes returns the processes that hold a context on device
	// ordinal, which the device table has checked already, with the
	// memory the driver attributes to each; or why it cannot.
	processes(ordinal int) ([]ProcessMemory, error)
}

// processFigures is what the driver reported of one device's processes at
// one moment, as the fields of [Usage] name it.
type processFigures struct {
	absent             bool  // the device has no such figures (the CPU, Metal): nothing is missing
	err                error // nil where the figures below are the driver's
	processUsed        int64
	otherProcessesUsed int64
	otherProcesses     []ProcessMemory
}

// readProcesses reads the driver's per-process figures of device d. It
// never runs on the allocation path: Usage, Baseline, Measure and the
// out-of-memory report read it.
func readProcesses(s *deviceTable, d Device) processFigures {
	b, ok := s.b.(processBackend)
	if !ok {
		return processFigures{absent: true}
	}
	list, err := b.processes(d.ordinal)
	if err != nil {
		// A driver error of the backend's comes without its device.
		return processFigures{err: &perProcessError{dev: d, err: fillError(err, d, 0, nil)}}
	}
	return splitProcesses(d, list, os.Getpid())
}

// perProcessError is the PerProcessErr of a reading of device dev whose
// per-process figures the backend could not give, err saying why: it
// matches [ErrPerProcessUnavailable] and err, and is written with one
// prefix and the device named once.
type perProcessError struct {
	dev Device
	err error
}

func (e *perProcessError) Error() string {
	why := strings.TrimPrefix(reason(e.err), e.dev.String()+": ") // a BackendError names its device
	return fmt.Sprintf("%v: %v: %s", ErrPerProcessUnavailable, e.dev, why)
}

func (e *perProcessError) Unwrap() []error { return []error{ErrPerProcessUnavailable, e.err} }

// splitProcesses finds process self in what NVML listed of d, and sums the
// others, largest first.
func splitProcesses(d Device, list []ProcessMemory, self int) processFigures {
	var f processFigures
	found := false
	for _, p := range list {
		if p.PID == self {
			f.processUsed += p.Used
			found = true
			continue
		}
		f.otherProcessesUsed += p.Used
		f.otherProcesses = append(f.otherProcesses, p)
	}
	if !found {
		return processFigures{err: fmt.Errorf("%w: %v: NVML lists %d process(es) on the device, but not this one (PID %d): its PIDs are the host's, which a container with a PID namespace of its own does not see",
			ErrPerProcessUnavailable, d, len(list), self)}
	}
	slices.SortStableFunc(f.otherProcesses, func(a, b ProcessMemory) int { return cmp.Compare(b.Used, a.Used) })
	return f
}

// ok reports whether the figures are the driver's.
func (f processFigures) ok() bool { return !f.absent && f.err == nil }

// setUsage puts the figures into u, whose Tracked is read.
func (f processFigures) setUsage(u *Usage) {
	u.PerProcess, u.PerProcessErr = f.ok(), f.err
	if !f.ok() {
		return
	}
	u.ProcessUsed, u.ProcessUntracked = f.processUsed, processUntracked(f.processUsed, u.Tracked)
	u.OtherProcessesUsed, u.OtherProcesses = f.otherProcessesUsed, f.otherProcesses
}

// processUntracked computes [Usage].ProcessUntracked, which the report of
// an [*OutOfMemoryError] writes too: this process's memory as the driver
// accounts it less the tracked bytes, or 0
// where the driver charges tracked memory to another process (a buffer
// imported over CUDA IPC and counted with Track) and that is negative.
func processUntracked(processUsed, tracked int64) int64 { return max(processUsed-tracked, 0) }

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

// setOutOfMemory puts the figures into the report of e.
func (f processFigures) setOutOfMemory(e *OutOfMemoryError) {
	e.PerProcess, e.PerProcessErr = f.ok(), f.err
	if f.ok() {
		e.ProcessUsed, e.OtherProcessesUsed, e.OtherProcesses = f.processUsed, f.otherProcessesUsed, f.otherProcesses
	}
}

// perProcessBasis says whether a [Measurement.Budget] of p from base may use
// the per-process figures, and if not, why, where the readings said (a
// Usage or Measurement written by hand says nothing).
func perProcessBasis(base Usage, p Measurement) (bool, error) {
	switch {
	case !base.PerProcess && base.PerProcessErr != nil:
		return false, wrapf(base.PerProcessErr, "the baseline has none")
	case !p.PerProcess && p.PerProcessErr != nil:
		return false, wrapf(p.PerProcessErr, "the measurement has none")
	}
	return base.PerProcess && p.PerProcess, nil
}

// processLines writes the report's lines of the driver's per-process
// figures: this process's own, and each other process with its usage, as
// PyTorch's out-of-memory message lists them.
func (e *OutOfMemoryError) processLines() []string {
	if !e.PerProcess {
		if e.PerProcessErr == nil {
			return nil
		}
		return []string{fmt.Sprintf("in use (NVML):  unavailable: %v", e.PerProcessErr)}
	}
	lines := []string{fmt.Sprintf("in use (NVML):  this process %s, of which %s not tracked (its CUDA context, libraries, memory allocated without memtrack)",
		bytesize.Exact(e.ProcessUsed), bytesize.Exact(processUntracked(e.ProcessUsed, e.Tracked)))}
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

// processSummary writes MemorySummary's lines of the driver's per-process
// figures: this process's, each other process's, or why there are none on
// a device that should have them; nothing on a device without them.
func (u Usage) processSummary() string {
	if !u.PerProcess {
		if u.PerProcessErr == nil {
			return ""
		}
		return fmt.Sprintf("processes (NVML): unavailable: %v\n", u.PerProcessErr)
	}
	s := fmt.Sprintf("processes (NVML): this process %s (untracked %s); other processes %s in %d\n",
		bytesize.Format(u.ProcessUsed), bytesize.Format(u.ProcessUntracked), bytesize.Format(u.OtherProcessesUsed), len(u.OtherProcesses))
	for _, p := range u.OtherProcesses {
		name := p.Name
		if name == "" {
			name = "(name unknown)"
		}
		s += fmt.Sprintf("  process %d %s: %s\n", p.PID, name, bytesize.Format(p.Used))
	}
	return s
}
