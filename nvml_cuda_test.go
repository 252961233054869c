//go:build cuda

package memtrack

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The per-process figures on several real OS processes sharing one fake
// GPU: the fake driver's machine in a file (FAKECUDA_MACHINE), which the
// fake NVML of testdata/fakenvml reads. Each process is this test binary,
// run as TestNVMLChildInstance and driven by commands on its stdin.

// instanceView is what a child reports of its Usage, Measurement or Budget.
type instanceView struct {
	PID    int    `json:"pid"`
	Err    string `json:"err,omitempty"`
	Usage  *Usage `json:"usage,omitempty"`
	PerErr string `json:"perErr,omitempty"` // the PerProcessErr of the Usage or Budget
	NVML   Budget `json:"nvml"`             // the budget from the per-process figures, where there are
	Device Budget `json:"device"`           // the budget from the device-wide figures
	Report string `json:"report,omitempty"`
}

// instance is a child process on the shared machine.
type instance struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	pid int
}

// startInstance starts a child on the machine file with env beside it; it
// is stopped at the end of the test.
func startInstance(t *testing.T, machine string, env ...string) *instance {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNVMLChildInstance$", "-test.count=1")
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), "MEMTRACK_NVML_CHILD=1", "GORACE="+gorace, "FAKECUDA_MACHINE="+machine)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	i := &instance{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out), pid: cmd.Process.Pid}
	i.out.Buffer(make([]byte, 1<<20), 1<<20)
	t.Cleanup(func() { i.stop() })
	return i
}

// do sends one command and returns the child's answer.
func (i *instance) do(command string) instanceView {
	i.t.Helper()
	_, err := fmt.Fprintln(i.in, command)
	require.NoError(i.t, err)
	for i.out.Scan() {
		line := i.out.Text()
		if rest, ok := strings.CutPrefix(line, "nvmlchild: "); ok {
			var v instanceView
			require.NoError(i.t, json.Unmarshal([]byte(rest), &v), "%s", rest)
			return v
		}
	}
	i.t.Fatalf("child %d ended before answering %q: %v", i.pid, command, i.out.Err())
	return instanceView{}
}

// stop ends the child (closing its stdin) and waits for it.
func (i *instance) stop() {
	if i.in != nil {
		i.in.Close()
		i.in = nil
		i.cmd.Wait()
	}
}

// TestNVMLChildInstance is a child of the tests below: it reads commands
// from stdin and answers each with one line.
func TestNVMLChildInstance(t *testing.T) {
	if os.Getenv("MEMTRACK_NVML_CHILD") != "1" {
		t.Skip("run by the NVML tests in a process of its own")
	}
	d := cudaDevices(t, 1)[0]
	var bufs []*Buffer
	var base Usage
	var m Measurement
	answer := func(v instanceView, err error) {
		v.PID = os.Getpid()
		if err != nil {
			v.Err = err.Error()
		}
		b, jerr := json.Marshal(v)
		require.NoError(t, jerr)
		fmt.Printf("nvmlchild: %s\n", b)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch f[0] {
		case "alloc": // alloc N: allocate N bytes and keep them
			n, _ := strconv.ParseInt(f[1], 0, 64)
			b, err := d.Alloc(n)
			if err == nil {
				bufs = append(bufs, b)
			}
			var v instanceView
			if e := (*OutOfMemoryError)(nil); errors.As(err, &e) {
				v.Report = e.Report()
			}
			answer(v, err)
		case "track": // track N: count N bytes at an address of another process's memory (a buffer imported over CUDA IPC)
			n, _ := strconv.ParseInt(f[1], 0, 64)
			_, err := d.Track(n, uintptr(0x7e0000000000+n))
			answer(instanceView{}, err)
		case "summary":
			answer(instanceView{Report: d.MemorySummary()}, nil)
		case "redact": // an observer that rewrites the other processes of the report it is given
			_, err := d.OnOutOfMemory(func(e *OutOfMemoryError) {
				for i := range e.OtherProcesses {
					e.OtherProcesses[i] = ProcessMemory{PID: 999999, Name: "edited by an observer", Used: -1}
				}
			})
			answer(instanceView{}, err)
		case "free": // free all
			for _, b := range bufs {
				require.NoError(t, b.Free())
			}
			bufs = nil
			answer(instanceView{}, nil)
		case "usage", "baseline":
			var u Usage
			var err error
			if f[0] == "usage" {
				u, err = d.Usage()
			} else {
				u, err = d.Baseline()
				base = u
			}
			v := instanceView{Usage: &u}
			if u.PerProcessErr != nil {
				v.PerErr = u.PerProcessErr.Error()
				u.PerProcessErr = nil // sent as PerErr
			}
			answer(v, err)
		case "measure": // measure N: a pass that allocates N bytes and frees them
			n, _ := strconv.ParseInt(f[1], 0, 64)
			var err error
			m, err = d.Measure(func() error {
				b, err := d.Alloc(n)
				if err != nil {
					return err
				}
				return b.Free()
			})
			answer(instanceView{}, err)
		case "budget", "footprint":
			// budget U B: Budget with utilization U and blocks of B bytes,
			// both ways; footprint U B: FootprintBudget.
			u, _ := strconv.ParseFloat(f[1], 64)
			block, _ := strconv.ParseInt(f[2], 0, 64)
			budget := m.Budget
			if f[0] == "footprint" {
				budget = m.FootprintBudget
			}
			var v instanceView
			var err error
			v.NVML, err = budget(base, u, block)
			if v.NVML.PerProcessErr != nil {
				v.PerErr = v.NVML.PerProcessErr.Error()
				v.NVML.PerProcessErr = nil // sent as PerErr
			}
			if f[0] == "budget" {
				wholeBase, whole := base, m
				wholeBase.PerProcess, wholeBase.PerProcessErr = false, nil
				whole.PerProcess, whole.PerProcessErr = false, nil
				v.Device, _ = whole.Budget(wholeBase, u, block)
			}
			answer(v, err)
		}
	}
}

// machineFile returns a fresh machine for the test, or skips it where the
// fake driver does not answer.
func machineFile(t *testing.T) string {
	t.Helper()
	requireFake(t)
	return filepath.Join(t.TempDir(), "machine")
}

func TestNVMLSeveralProcesses(t *testing.T) {
	machine := machineFile(t)
	a := startInstance(t, machine)
	b := startInstance(t, machine)
	require.Empty(t, a.do("alloc 67108864").Err)
	require.Empty(t, b.do("alloc 33554432").Err)

	ua := a.do("usage").Usage
	require.True(t, ua.PerProcess, "%+v", ua)
	assert.Equal(t, int64(64<<20), ua.Tracked)
	assert.Equal(t, int64(64<<20+fakeContextBytes), ua.ProcessUsed, "this process's memory, its context included")
	assert.Equal(t, int64(fakeContextBytes), ua.ProcessUntracked)
	assert.Equal(t, int64(32<<20+fakeContextBytes), ua.OtherProcessesUsed)
	require.Len(t, ua.OtherProcesses, 1)
	assert.Equal(t, b.pid, ua.OtherProcesses[0].PID)
	assert.Equal(t, int64(32<<20+fakeContextBytes), ua.OtherProcesses[0].Used)
	assert.Contains(t, ua.OtherProcesses[0].Name, filepath.Base(os.Args[0]), "the name NVML gives: the executable")
	// cuMemGetInfo sees both: on this machine the driver attributes every
	// byte in use to one of the two processes.
	assert.Equal(t, ua.ProcessUsed+ua.OtherProcessesUsed, ua.Used)
	assert.Equal(t, ua.Untracked, ua.ProcessUntracked+ua.OtherProcessesUsed)

	ub := b.do("usage").Usage
	require.True(t, ub.PerProcess)
	assert.Equal(t, ua.Used, ub.Used, "one GPU, one figure")
	assert.Equal(t, ua.ProcessUsed, ub.OtherProcessesUsed)
	assert.Equal(t, a.pid, ub.OtherProcesses[0].PID)
}

// NVML's process list through each call a library may have: the newest of
// nvmlDeviceGetComputeRunningProcesses_v3 (CUDA 11.6 on), _v2 (a driver of
// the 470 branch, CUDA 11.4, has no _v3) and the unversioned one, each
// filling the layout of its own nvml.h (FAKENVML_HIDE takes the newer
// away). Two processes on the device, so that a layout misread would show
// in the second entry; where the call fails, PerProcessErr names the call
// that failed; a library with none of the three is unavailable, naming
// them.
func TestNVMLProcessCalls(t *testing.T) {
	const v1, v2, v3 = "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3"
	for _, tc := range []struct {
		name string
		hide string
		call string // the call memtrack reads the list with, or "" for none
	}{
		{"_v3", "", v3},
		{"_v2, as the 470 driver", v3, v2},
		{"unversioned", v3 + "," + v2, v1},
		{"none", v3 + "," + v2 + "," + v1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			machine := machineFile(t)
			hide := "FAKENVML_HIDE=" + tc.hide
			a := startInstance(t, machine, hide)
			b := startInstance(t, machine, hide)
			require.Empty(t, a.do("alloc 67108864").Err)
			require.Empty(t, b.do("alloc 33554432").Err)
			v := a.do("usage")
			if tc.call == "" {
				assert.False(t, v.Usage.PerProcess)
				assert.Contains(t, v.PerErr, "NVML is unavailable")
				assert.True(t, strings.HasSuffix(v.PerErr, ": it has none of the calls that list processes: "+v3+", "+v2+", "+v1),
					"names each call it looked for: %s", v.PerErr)
				return
			}
			require.True(t, v.Usage.PerProcess, v.PerErr)
			assert.Equal(t, int64(64<<20+fakeContextBytes), v.Usage.ProcessUsed)
			require.Len(t, v.Usage.OtherProcesses, 1)
			assert.Equal(t, b.pid, v.Usage.OtherProcesses[0].PID, "the second entry, read at its offset")
			assert.Equal(t, int64(32<<20+fakeContextBytes), v.Usage.OtherProcesses[0].Used)
			assert.Equal(t, v.Usage.ProcessUsed+v.Usage.OtherProcessesUsed, v.Usage.Used)

			c := startInstance(t, machine, hide, "FAKENVML_FAIL="+tc.call+":1:4")
			v = c.do("usage")
			assert.False(t, v.Usage.PerProcess)
			assert.Contains(t, v.PerErr, ": "+tc.call+": Insufficient Permissions (nvmlReturn_t 4)", "names the call used")
			v = c.do("usage")
			assert.True(t, v.Usage.PerProcess, "the next reading asks again: %s", v.PerErr)
		})
	}
}

// Processes come and go: one that exits is no longer listed and its memory
// is free again; one that starts is listed from its first context on.
func TestNVMLProcessesComeAndGo(t *testing.T) {
	machine := machineFile(t)
	a := startInstance(t, machine)
	require.Empty(t, a.do("alloc 16777216").Err)
	u := a.do("usage").Usage
	require.True(t, u.PerProcess)
	assert.Empty(t, u.OtherProcesses)
	alone := u.Used

	b := startInstance(t, machine)
	require.Empty(t, b.do("alloc 100000000").Err)
	u = a.do("usage").Usage
	require.Len(t, u.OtherProcesses, 1)
	assert.Equal(t, alone+fakeAllocTakes(100000000)+fakeContextBytes, u.Used)

	b.stop() // exits: the driver frees its memory
	u = a.do("usage").Usage
	assert.Empty(t, u.OtherProcesses, "an exited process is not listed")
	assert.Equal(t, alone, u.Used, "its memory is free again")

	c := startInstance(t, machine)
	c.do("usage") // its first reading creates its context
	u = a.do("usage").Usage
	require.Len(t, u.OtherProcesses, 1)
	assert.Equal(t, c.pid, u.OtherProcesses[0].PID)
	assert.Equal(t, int64(fakeContextBytes), u.OtherProcesses[0].Used, "a context and nothing else")
}

// Where NVML cannot tell, Usage says why and the budget falls back to the
// device-wide figures, saying so.
func TestNVMLFallback(t *testing.T) {
	nvmlDir := os.Getenv("FAKENVML_DIR")
	var withoutNVML []string
	for _, p := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if p != nvmlDir {
			withoutNVML = append(withoutNVML, p)
		}
	}
	for _, tc := range []struct {
		name string
		env  []string
		want []string // in PerProcessErr
	}{
		{"NVML absent", []string{"LD_LIBRARY_PATH=" + strings.Join(withoutNVML, ":")}, []string{"NVML is unavailable", "libnvidia-ml.so.1"}},
		{"driver not loaded", []string{"FAKENVML_ERROR=9"}, []string{"NVML is unavailable", "nvmlInit_v2", "Driver Not Loaded"}},
		{"no permission", []string{"FAKENVML_FAIL=nvmlDeviceGetComputeRunningProcesses_v3:1:4,nvmlDeviceGetComputeRunningProcesses_v3:2:4"}, []string{"nvmlDeviceGetComputeRunningProcesses_v3", "Insufficient Permissions"}},
		{"PID namespace", []string{"FAKENVML_PID_OFFSET=100000"}, []string{"not this one (PID", "PID namespace"}},
		{"WDDM", []string{"FAKENVML_USED=na"}, []string{"NVML_VALUE_NOT_AVAILABLE"}},
		// A transient driver error reading the UUID, which Device.Info
		// would report on cuda:0.
		{"UUID unreadable", []string{"FAKECUDA_FAIL=cuDeviceGetUuid:1:999"}, []string{"cuda:0: info failed: CUDA_ERROR_UNKNOWN (code 999)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "NVML absent" && nvmlDir == "" {
				t.Skip("set FAKENVML_DIR to the folder of the fake NVML (scripts/test-cuda.sh does)")
			}
			i := startInstance(t, machineFile(t), tc.env...)
			v := i.do("baseline")
			require.Empty(t, v.Err)
			assert.False(t, v.Usage.PerProcess)
			assert.Zero(t, v.Usage.ProcessUsed)
			assert.Nil(t, v.Usage.OtherProcesses)
			for _, w := range tc.want {
				assert.Contains(t, v.PerErr, w)
			}
			assert.True(t, strings.HasPrefix(v.PerErr, "memtrack: no per-process figures: cuda:0: "), v.PerErr)
			assert.Equal(t, 1, strings.Count(v.PerErr, "memtrack:"), "one prefix: %s", v.PerErr)
			require.Empty(t, i.do("alloc 1048576").Err)
			require.Empty(t, i.do("measure 4194304").Err)
			bv := i.do("budget 0.5 1048576")
			require.Empty(t, bv.Err)
			assert.False(t, bv.NVML.PerProcess, "the budget says it used the device-wide figures")
			assert.Contains(t, bv.PerErr, tc.want[0])
			assert.True(t, strings.HasPrefix(bv.PerErr, "memtrack: the baseline has none: no per-process figures: cuda:0: "), bv.PerErr)
			assert.Equal(t, 1, strings.Count(bv.PerErr, "memtrack:"), "one prefix: %s", bv.PerErr)
			assert.Equal(t, bv.Device, bv.NVML, "the device-wide budget")
			fv := i.do("footprint 0.5 1048576")
			assert.Contains(t, fv.Err, "memtrack: FootprintBudget needs this process's memory at the baseline", "the context cannot be told from the device-wide figures")
			assert.Contains(t, fv.Err, tc.want[0])
		})
	}
}

// A failed NVML call is one reading's: the next reads again.
func TestNVMLTransientError(t *testing.T) {
	i := startInstance(t, machineFile(t), "FAKENVML_FAIL=nvmlDeviceGetComputeRunningProcesses_v3:1:999")
	v := i.do("usage")
	assert.False(t, v.Usage.PerProcess)
	assert.Contains(t, v.PerErr, "Unknown Error")
	v = i.do("usage")
	assert.True(t, v.Usage.PerProcess, v.PerErr)
	assert.Equal(t, int64(fakeContextBytes), v.Usage.ProcessUsed)
}

// A MIG instance: CUDA gives its MIG- UUID, whose NVML handle lists the
// instance's processes, as a full-GPU handle does only with privileges.
func TestNVMLMIG(t *testing.T) {
	i := startInstance(t, machineFile(t), "FAKECUDA_NAME=memtrack fakecuda NVIDIA A100-SXM4-40GB MIG 1g.5gb")
	require.Empty(t, i.do("alloc 1048576").Err)
	v := i.do("usage")
	require.True(t, v.Usage.PerProcess, v.PerErr)
	assert.Equal(t, fakeAllocTakes(1<<20)+fakeContextBytes, v.Usage.ProcessUsed)
}

// Two instances started together on one GPU: each loads its weights while
// the other does, then measures its pass. The budget from the per-process
// figures is what each gets alone; the device-wide one counts the other's
// weights against it.
func TestNVMLTwoInstancesBudget(t *testing.T) {
	const weights, pass, block = 1 << 30, 256 << 20, 16 << 20
	budget := func(insts ...*instance) []instanceView {
		for _, i := range insts {
			require.Empty(t, i.do("baseline").Err)
		}
		for _, i := range insts {
			require.Empty(t, i.do(fmt.Sprintf("alloc %d", weights)).Err)
		}
		for _, i := range insts {
			require.Empty(t, i.do(fmt.Sprintf("measure %d", pass)).Err)
		}
		var out []instanceView
		for _, i := range insts {
			v := i.do(fmt.Sprintf("budget 0.4 %d", block))
			require.Empty(t, v.Err)
			out = append(out, v)
		}
		return out
	}
	alone := budget(startInstance(t, machineFile(t)))[0]
	machine := machineFile(t)
	together := budget(startInstance(t, machine), startInstance(t, machine))
	require.True(t, alone.NVML.PerProcess)
	assert.Equal(t, alone.Device.Blocks, alone.NVML.Blocks, "alone, the two agree")
	for n, v := range together {
		require.True(t, v.NVML.PerProcess, v.PerErr)
		assert.Equal(t, alone.NVML.Blocks, v.NVML.Blocks, "instance %d with the other running: the budget it gets alone", n)
		assert.Equal(t, alone.NVML.Available, v.NVML.Available)
	}
	// The first took its baseline before the second had a context: the
	// device-wide figures count the second's context and weights against it.
	assert.Less(t, together[0].Device.Blocks, alone.Device.Blocks)
	assert.Equal(t, int64(weights+fakeContextBytes), together[0].Device.UntrackedIncrease-alone.Device.UntrackedIncrease)
}

// Device.Baseline retains the device's primary context: this process's
// context is inside the baseline. Budget leaves it outside the request, as
// vLLM does (the instance holds Requested besides it); FootprintBudget sets
// it aside (the instance's whole footprint within Requested).
func TestNVMLContextInTheBaseline(t *testing.T) {
	const weights, pass, block = 1 << 30, 256 << 20, 16 << 20
	i := startInstance(t, machineFile(t))
	base := i.do("baseline").Usage // the child's first reading: it creates the context
	require.True(t, base.PerProcess)
	assert.Equal(t, int64(fakeContextBytes), base.ProcessUsed, "the context, in the baseline")
	assert.Equal(t, int64(fakeContextBytes), base.Used)
	require.Empty(t, i.do(fmt.Sprintf("alloc %d", weights)).Err)
	require.Empty(t, i.do(fmt.Sprintf("measure %d", pass)).Err)
	end := i.do("usage").Usage

	v := i.do(fmt.Sprintf("budget 0.5 %d", block))
	require.Empty(t, v.Err)
	b := v.NVML
	require.True(t, b.PerProcess, v.PerErr)
	assert.Zero(t, b.UntrackedIncrease, "the context is no growth since the baseline")
	assert.Zero(t, b.ProcessUsed)
	assert.Equal(t, int64(weights+pass), b.SetAside)
	assert.Equal(t, b.Requested+fakeContextBytes, end.ProcessUsed+b.PeakIncrease+b.Available,
		"Budget: the instance may hold Requested besides its context")

	v = i.do(fmt.Sprintf("footprint 0.5 %d", block))
	require.Empty(t, v.Err)
	fp := v.NVML
	require.True(t, fp.PerProcess, v.PerErr)
	assert.Equal(t, int64(fakeContextBytes), fp.ProcessUsed)
	assert.Equal(t, b.SetAside+fakeContextBytes, fp.SetAside)
	assert.Equal(t, fp.Requested, end.ProcessUsed+fp.PeakIncrease+fp.Available,
		"FootprintBudget: the whole footprint, the context included, within Requested")
}

// The out-of-memory report lists this process's figure and the others'.
func TestNVMLOutOfMemoryReport(t *testing.T) {
	machine := machineFile(t)
	a := startInstance(t, machine)
	b := startInstance(t, machine)
	require.Empty(t, b.do("alloc 3221225472").Err) // 3 GiB of the first device's 4
	require.Empty(t, a.do("redact").Err)           // changes nothing of the error a's allocation returns
	v := a.do("alloc 2147483648")
	require.NotEmpty(t, v.Err)
	assert.NotContains(t, v.Report, "edited by an observer")
	assert.Contains(t, v.Report, fmt.Sprintf("in use (NVML):  this process %s", bytesize.Exact(fakeContextBytes)))
	assert.Contains(t, v.Report, "other processes: "+bytesize.Exact(3<<30+fakeContextBytes)+" in 1\n")
	assert.Contains(t, v.Report, fmt.Sprintf("process %d (", b.pid))
	assert.Contains(t, v.Report, fmt.Sprintf("has %s in use", bytesize.Exact(3<<30+fakeContextBytes)))
}

// Memory tracked here that the driver charges to another process (a
// buffer imported over CUDA IPC, counted with Track): this process's
// figure is its context alone, below Tracked, and ProcessUntracked is 0
// in the Usage, the summary and the out-of-memory report alike.
func TestNVMLTrackedChargedElsewhere(t *testing.T) {
	i := startInstance(t, machineFile(t))
	require.Empty(t, i.do("track 1073741824").Err)
	u := i.do("usage").Usage
	require.True(t, u.PerProcess)
	assert.Equal(t, int64(1<<30), u.Tracked)
	assert.Equal(t, int64(fakeContextBytes), u.ProcessUsed, "the imported buffer is the exporter's")
	assert.Zero(t, u.ProcessUntracked)
	assert.Contains(t, i.do("summary").Report, fmt.Sprintf("this process %s (untracked 0 B)", bytesize.Format(fakeContextBytes)))
	v := i.do("alloc 8589934592") // more than the device has
	require.NotEmpty(t, v.Err)
	assert.Contains(t, v.Report, fmt.Sprintf("in use (NVML):  this process %s, of which 0 B not tracked", bytesize.Exact(fakeContextBytes)))
}

// TestNVMLReconcile prints, on the device this process runs on, NVML's
// figure of this process beside the tracked bytes, cuMemGetInfo's used
// memory and the pool's reserved bytes, for buffers of 1 KiB to 1 GiB
// allocated with cuMemAlloc and from the pool: what each figure includes,
// measured. scripts/gpu-check.sh runs it on a GPU.
func TestNVMLReconcile(t *testing.T) {
	if os.Getenv("MEMTRACK_RECONCILE") != "1" {
		t.Skip("set MEMTRACK_RECONCILE=1 (scripts/gpu-check.sh does)")
	}
	d := cudaDevices(t, 1)[0]
	s := newStream(t, d)
	u, err := d.Usage()
	require.NoError(t, err)
	if !u.PerProcess {
		t.Skipf("no per-process figures here: %v", u.PerProcessErr)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "device %v: tracked %s, cuMemGetInfo used %s, NVML: this process %s (untracked %s), other processes %s in %d\n",
		d, bytesize.Format(u.Tracked), bytesize.Format(u.Used), bytesize.Format(u.ProcessUsed), bytesize.Format(u.ProcessUntracked),
		bytesize.Format(u.OtherProcessesUsed), len(u.OtherProcesses))
	fmt.Fprintf(&out, "%10s %-10s %12s %14s %16s %15s %14s\n", "size", "how", "tracked Δ", "meminfo used Δ", "NVML process Δ", "pool reserved Δ", "NVML after free Δ")
	reserved := func() int64 {
		p, err := d.Pool().Stats()
		require.NoError(t, err)
		return p.PoolReserved
	}
	for _, size := range []int64{1 << 10, 1 << 20, 64 << 20, 1 << 30} {
		for _, how := range []string{"cuMemAlloc", "pool"} {
			syncStream(t, d, s)
			require.NoError(t, d.Pool().Trim(0))
			before, err := d.Usage()
			require.NoError(t, err)
			r0 := reserved()
			var b *Buffer
			if how == "pool" {
				b, err = d.AllocAsync(size, s)
				syncStream(t, d, s)
			} else {
				b, err = d.Alloc(size)
			}
			require.NoError(t, err, "allocating %s", bytesize.Format(size))
			during, err := d.Usage()
			require.NoError(t, err)
			r1 := reserved()
			if how == "pool" {
				require.NoError(t, b.FreeAsync(s))
				syncStream(t, d, s)
				require.NoError(t, d.Pool().Trim(0))
			} else {
				require.NoError(t, b.Free())
			}
			after, err := d.Usage()
			require.NoError(t, err)
			require.True(t, before.PerProcess && during.PerProcess && after.PerProcess)
			used, proc := during.Used-before.Used, during.ProcessUsed-before.ProcessUsed
			if onFake() {
				assert.Equal(t, used, proc, "alone on the device, NVML's figure of this process moves as cuMemGetInfo's")
			}
			fmt.Fprintf(&out, "%10s %-10s %12d %14d %16d %15d %14d\n", bytesize.Format(size), how,
				during.Tracked-before.Tracked, used, proc, r1-r0, after.ProcessUsed-before.ProcessUsed)
		}
	}
	t.Log("\n" + out.String())
}

// Nothing of NVML is on the allocation path: a thousand allocations and
// frees make no NVML call (the fake NVML writes each call to a trace), and
// a reading of Usage makes the calls it needs.
func TestNVMLNotOnAllocationPath(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace")
	i := startInstance(t, machineFile(t), "FAKENVML_TRACE="+trace)
	require.True(t, i.do("usage").Usage.PerProcess)
	calls := func() int {
		b, err := os.ReadFile(trace)
		require.NoError(t, err)
		return strings.Count(string(b), "\n")
	}
	before := calls()
	require.NotZero(t, before, "the reading called NVML")
	for range 1000 {
		require.Empty(t, i.do("alloc 4096").Err)
	}
	require.Empty(t, i.do("free").Err)
	assert.Equal(t, before, calls(), "no NVML call while allocating and freeing")
	i.do("usage")
	assert.Greater(t, calls(), before, "the next reading calls NVML again")
}
