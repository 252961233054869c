package memtrack

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitProcesses(t *testing.T) {
	d := Device{kind: KindCUDA}
	f := splitProcesses(d, []ProcessMemory{{PID: 5, Used: 10}, {PID: 7, Name: "me", Used: 300}, {PID: 6, Name: "big", Used: 90}}, 7)
	require.NoError(t, f.err)
	assert.Equal(t, int64(300), f.processUsed)
	assert.Equal(t, int64(100), f.otherProcessesUsed)
	assert.Equal(t, []ProcessMemory{{PID: 6, Name: "big", Used: 90}, {PID: 5, Used: 10}}, f.otherProcesses, "largest first")

	// A PID NVML does not list: a container's PID namespace, or no context.
	f = splitProcesses(d, []ProcessMemory{{PID: 5, Used: 10}}, 7)
	require.ErrorIs(t, f.err, ErrPerProcessUnavailable)
	assert.Contains(t, f.err.Error(), "not this one (PID 7)")
	assert.False(t, f.ok())
	assert.Zero(t, f.otherProcessesUsed, "no figure from a list without this process")

	var u Usage
	f.setUsage(&u)
	assert.False(t, u.PerProcess)
	assert.ErrorIs(t, u.PerProcessErr, ErrPerProcessUnavailable)
}

// perProcessRun is a measurement of a pass with both readings' per-process
// figures: this process had a 500 MiB context at the baseline, loaded 4 GiB
// of weights, peaked 1 GiB above them in the pass, and its libraries took
// 256 MiB more; meanwhile another process loaded 8 GiB.
func perProcessRun() (Usage, Measurement) {
	const mib = 1 << 20
	base := Usage{Device: Device{kind: KindCUDA}, Tracked: 0, Total: 80 << 30, Free: 80<<30 - 500*mib, Used: 500 * mib, Untracked: 500 * mib,
		PerProcess: true, ProcessUsed: 500 * mib, ProcessUntracked: 500 * mib}
	p := Measurement{Device: base.Device, Total: base.Total,
		StartTracked: 4 << 30, PeakTracked: 5 << 30, EndTracked: 4 << 30, PeakTrackedIncrease: 1 << 30,
		StartHeld: 4 << 30, PeakHeld: 5 << 30, EndHeld: 4 << 30,
		StartUsed: 4<<30 + 500*mib + 8<<30, EndUsed: 4<<30 + 756*mib + 8<<30,
		PerProcess: true, StartProcessUsed: 4<<30 + 500*mib, EndProcessUsed: 4<<30 + 756*mib,
		StartOtherProcessesUsed: 8 << 30, EndOtherProcessesUsed: 8 << 30, ProcessUntracked: 256 * mib}
	p.UsedIncrease = p.EndUsed - p.StartUsed
	p.Untracked = p.UsedIncrease - (p.EndHeld - p.StartHeld)
	return base, p
}

func TestBudgetPerProcess(t *testing.T) {
	const mib = 1 << 20
	base, p := perProcessRun()
	b, err := p.Budget(base, 0.4, 16*mib)
	require.NoError(t, err)
	assert.True(t, b.PerProcess)
	assert.NoError(t, b.PerProcessErr)
	assert.Equal(t, int64(4<<30), b.Weights)
	assert.Equal(t, int64(1<<30), b.PeakIncrease)
	assert.Equal(t, int64(256*mib), b.UntrackedIncrease, "this process's own growth, not the other's 8 GiB")
	assert.Equal(t, int64(0.4*float64(80<<30))-(4<<30+1<<30+256*mib), b.Available)

	// The same figures without the per-process ones: the other's weights
	// count against this process.
	base.PerProcess, p.PerProcess = false, false
	whole, err := p.Budget(base, 0.4, 16*mib)
	require.NoError(t, err)
	assert.False(t, whole.PerProcess)
	assert.Equal(t, int64(8<<30+256*mib), whole.UntrackedIncrease)
}

func TestBudgetPerProcessFallback(t *testing.T) {
	const mib = 1 << 20
	why := errors.New("NVML is unavailable: libnvidia-ml.so.1: cannot open shared object file")
	for _, tc := range []struct {
		name string
		edit func(*Usage, *Measurement)
		msg  string
	}{
		{"baseline without", func(u *Usage, _ *Measurement) { u.PerProcess, u.PerProcessErr = false, why }, "the baseline has none: NVML is unavailable"},
		{"measurement without", func(_ *Usage, p *Measurement) { p.PerProcess, p.PerProcessErr = false, why }, "the measurement has none: NVML is unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, p := perProcessRun()
			tc.edit(&base, &p)
			b, err := p.Budget(base, 0.4, 16*mib)
			require.NoError(t, err)
			assert.False(t, b.PerProcess)
			assert.ErrorIs(t, b.PerProcessErr, why)
			assert.ErrorContains(t, b.PerProcessErr, tc.msg)
			assert.Equal(t, int64(8<<30+256*mib), b.UntrackedIncrease, "the device-wide figures")
		})
	}
}

func TestSharedBudgetPerProcess(t *testing.T) {
	const mib = 1 << 20
	_, p := perProcessRun()
	p.EndOtherProcessesUsed = 9 << 30 // the other grew during the pass
	p.EndUsed += 1 << 30
	p.UsedIncrease, p.Untracked = p.UsedIncrease+1<<30, p.Untracked+1<<30
	b, err := p.SharedBudget(0.9, 16*mib)
	require.NoError(t, err)
	assert.True(t, b.PerProcess)
	assert.Equal(t, int64(4<<30+500*mib), b.StartUsed, "this process's, when the pass began")
	assert.Equal(t, int64(9<<30), b.OtherProcessesUsed, "the others' larger reading")
	assert.Equal(t, int64(256*mib), b.UntrackedIncrease, "this process's own growth")
	assert.Equal(t, b.StartUsed+b.OtherProcessesUsed+b.PeakIncrease+b.UntrackedIncrease, b.SetAside)

	p.PerProcess = false
	b, err = p.SharedBudget(0.9, 16*mib)
	require.NoError(t, err)
	assert.False(t, b.PerProcess)
	assert.Zero(t, b.OtherProcessesUsed)
	assert.Equal(t, p.StartUsed, b.StartUsed)
	assert.Equal(t, p.Untracked, b.UntrackedIncrease)
}

func TestProcessReportAndSummary(t *testing.T) {
	e := &OutOfMemoryError{Device: Device{kind: KindCUDA}, Requested: 1 << 30, Tracked: 1 << 20, Total: 4 << 30, Free: 1 << 29,
		PerProcess: true, ProcessUsed: 1<<20 + 48<<20, OtherProcessesUsed: 3 << 30,
		OtherProcesses: []ProcessMemory{{PID: 99, Name: "/usr/bin/python3", Used: 2 << 30}, {PID: 100, Used: 1 << 30}}}
	r := e.Report()
	assert.Contains(t, r, "in use (NVML):  this process 49.0 MiB (51380224 B), of which 48.0 MiB (50331648 B) not tracked")
	assert.Contains(t, r, "other processes: 3.00 GiB (3221225472 B) in 2\n")
	assert.Contains(t, r, "process 99 (/usr/bin/python3) has 2.00 GiB (2147483648 B) in use\n")
	assert.Contains(t, r, "process 100 ((name unknown)) has 1.00 GiB")

	e.PerProcess, e.PerProcessErr = false, ErrPerProcessUnavailable
	assert.Contains(t, e.Report(), "in use (NVML):  unavailable: memtrack: no per-process figures")
	e.PerProcessErr = nil
	assert.NotContains(t, e.Report(), "NVML", "a device without such figures says nothing of them")

	u := Usage{Device: Device{kind: KindCUDA}, PerProcess: true, ProcessUsed: 3 << 20, ProcessUntracked: 1 << 20, OtherProcessesUsed: 2 << 20,
		OtherProcesses: []ProcessMemory{{PID: 8, Name: "x", Used: 2 << 20}}}
	s := u.processSummary()
	assert.True(t, strings.HasPrefix(s, "processes (NVML): this process 3.00 MiB (untracked 1.00 MiB); other processes 2.00 MiB in 1\n"), s)
	assert.Contains(t, s, "process 8 x: 2.00 MiB")
	assert.Empty(t, Usage{}.processSummary())

	// An AMD GPU's figures come from rocm_smi, and the runtime's own memory
	// is this process's untracked part.
	e.Device, e.PerProcess = Device{kind: KindROCm}, true
	r = e.Report()
	assert.Contains(t, r, "in use (rocm_smi): this process 49.0 MiB (51380224 B), of which 48.0 MiB (50331648 B) not tracked (the HIP runtime's own memory, libraries, memory allocated without memtrack)\n")
	assert.NotContains(t, r, "NVML")
	e.PerProcess, e.PerProcessErr = false, ErrPerProcessUnavailable
	assert.Contains(t, e.Report(), "in use (rocm_smi): unavailable: memtrack: no per-process figures")
	u.Device = Device{kind: KindROCm}
	assert.True(t, strings.HasPrefix(u.processSummary(), "processes (rocm_smi): this process 3.00 MiB"), u.processSummary())
}

// reportBackend is a fake CUDA backend with per-process figures: procs as
// the driver lists them, or procErr; and the driver's device figures, or
// memInfoErr.
type reportBackend struct {
	*fakeBackend
	memInfoErr error
	procs      []ProcessMemory
	procErr    error
}

func (b reportBackend) memInfo(ordinal int) (free, total int64, err error) {
	if b.memInfoErr != nil {
		return 0, 0, b.memInfoErr
	}
	return b.fakeBackend.memInfo(ordinal)
}

func (b reportBackend) processes(int) ([]ProcessMemory, error) {
	return slices.Clone(b.procs), b.procErr
}

// Every PerProcessErr, and a budget's that says why it fell back, starts
// with memtrack: once and names the device as Device.Info would: a driver
// error of the backend's (reading the UUID) comes without its device,
// which the reading fills in.
func TestPerProcessErrOnePrefix(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    reportBackend
		want string
	}{
		{"the UUID unreadable", reportBackend{procErr: &BackendError{Op: "info", Code: 999, Name: "CUDA_ERROR_UNKNOWN", Err: errors.New("unknown error")}},
			"memtrack: no per-process figures: cuda:0: info failed: CUDA_ERROR_UNKNOWN (code 999): unknown error"},
		{"NVML missing", reportBackend{procErr: fmt.Errorf("%w: libnvidia-ml.so.1: cannot open shared object file", errors.New("NVML is unavailable"))},
			"memtrack: no per-process figures: cuda:0: NVML is unavailable: libnvidia-ml.so.1: cannot open shared object file"},
		{"this process not listed", reportBackend{procs: []ProcessMemory{{PID: os.Getpid() + 1, Used: 1 << 20}}},
			fmt.Sprintf("memtrack: no per-process figures: cuda:0: NVML lists 1 process(es) on the device, but not this one (PID %d)", os.Getpid())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.b.fakeBackend = newFakeBackend(1, 1<<30)
			useBackend(t, KindCUDA, tc.b)
			d, err := CUDA(0)
			require.NoError(t, err)
			base, err := d.Baseline()
			require.NoError(t, err)
			require.False(t, base.PerProcess)
			require.ErrorIs(t, base.PerProcessErr, ErrPerProcessUnavailable)
			assert.True(t, strings.HasPrefix(base.PerProcessErr.Error(), tc.want), "%v", base.PerProcessErr)
			if be := (*BackendError)(nil); errors.As(base.PerProcessErr, &be) {
				assert.Equal(t, d, be.Device, "the device, as Device.Info names it")
			}
			m, err := d.Measure(func() error { return nil })
			require.NoError(t, err)
			goodBase := Usage{Device: d, Total: m.Total, Free: m.Total, PerProcess: true}
			for what, b := range map[string]func() (Budget, error){
				"the baseline has none":    func() (Budget, error) { return m.Budget(base, 0.5, 1<<20) },
				"the measurement has none": func() (Budget, error) { return m.Budget(goodBase, 0.5, 1<<20) },
			} {
				got, err := b()
				require.NoError(t, err)
				assert.False(t, got.PerProcess)
				assert.ErrorIs(t, got.PerProcessErr, ErrPerProcessUnavailable)
				assert.Equal(t, "memtrack: "+what+": "+strings.TrimPrefix(base.PerProcessErr.Error(), "memtrack: "), got.PerProcessErr.Error())
			}
			for _, err := range []error{base.PerProcessErr, m.PerProcessErr} {
				assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), "one prefix: %v", err)
			}
		})
	}
}

// ProcessUntracked is ProcessUsed - Tracked, or 0 where that is negative
// (tracked memory the driver charges to another process, such as a buffer
// imported over CUDA IPC and counted with Track), and every place that
// shows it shows that one figure: Usage, MemorySummary's line and the
// out-of-memory report.
func TestProcessUntrackedOneFigure(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name                 string
		processUsed, tracked int64
		want                 int64
	}{
		{"a context and a buffer", 49 * mib, 1 * mib, 48 * mib},
		{"all of it tracked", 48 * mib, 48 * mib, 0},
		{"tracked memory charged to another process", 48 * mib, 1024 * mib, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := Usage{Tracked: tc.tracked}
			processFigures{processUsed: tc.processUsed}.setUsage(&u)
			assert.Equal(t, tc.want, u.ProcessUntracked, "Usage")
			assert.Contains(t, u.processSummary(), fmt.Sprintf("this process %s (untracked %s)", bytesize.Format(tc.processUsed), bytesize.Format(tc.want)), "MemorySummary")
			e := &OutOfMemoryError{Device: Device{kind: KindCUDA}, Requested: 1 << 30, Tracked: tc.tracked, Total: 4 << 30, Free: 1 << 29}
			processFigures{processUsed: tc.processUsed}.setOutOfMemory(e)
			assert.Contains(t, e.Report(), fmt.Sprintf("this process %s, of which %s not tracked", bytesize.Exact(tc.processUsed), bytesize.Exact(tc.want)), "the out-of-memory report")
		})
	}
}
