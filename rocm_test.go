//go:build rocm

package memtrack

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run against whatever libamdhip64 the process loads: the fake
// runtime of testdata/fakehip and the fake rocm_smi of testdata/fakesmi in
// CI (scripts/test-rocm.sh), or AMD's on a machine with an AMD GPU
// (scripts/gpu-check-rocm.sh). Checks that only the fakes can make exact
// (what the runtime reports, the calls it counts, injected faults) skip on
// a real GPU.

// The fake runtime's configuration for this process, unless the
// environment sets another (rocm_main_test.go). A real runtime ignores
// these variables.
var hipFakeDefaults = map[string]string{
	"FAKEHIP_DEVICES":       "2",
	"FAKEHIP_CAPACITY":      strconv.Itoa(4<<30) + "," + strconv.Itoa(2<<30),
	"FAKEHIP_CONTEXT_BYTES": strconv.Itoa(hipContextBytes),
}

// hipContextBytes is what the fake runtime takes on each device when it
// initialises (FAKEHIP_CONTEXT_BYTES): this process's only device memory
// that memtrack does not count.
const hipContextBytes = 32 << 20

// onFakeHIP reports whether the process runs on the fake runtime.
func onFakeHIP() bool {
	d, err := ROCm(0)
	if err != nil {
		return false
	}
	info, err := d.Info()
	return err == nil && strings.HasPrefix(info.Name, "memtrack fakehip")
}

// rocmDevices returns the first n AMD devices, or skips the test. The
// runtime calls of the tests (internal/hiptest) are loaded with them.
func rocmDevices(t *testing.T, n int) []Device {
	t.Helper()
	var ds []Device
	for i := range n {
		d, err := ROCm(i)
		if err != nil {
			t.Skipf("needs %d AMD GPUs: %v", n, err)
		}
		ds = append(ds, d)
	}
	require.NoError(t, hiptest.Load())
	return ds
}

func requireFakeHIP(t *testing.T) {
	t.Helper()
	if !onFakeHIP() {
		t.Skip("needs the fake HIP runtime of testdata/fakehip (scripts/test-rocm.sh)")
	}
}

// hipStream makes a stream of d's, destroyed when the test ends.
func hipStream(t *testing.T, d Device) Stream {
	t.Helper()
	s, r := hiptest.StreamCreate(d.Ordinal())
	require.Equal(t, hipdrv.Success, r, "hipStreamCreate")
	t.Cleanup(func() { hiptest.StreamDestroy(s) })
	return Stream(s)
}

// syncHIP waits for stream s of d.
func syncHIP(t *testing.T, d Device, s Stream) {
	t.Helper()
	require.Equal(t, hipdrv.Success, hiptest.StreamSynchronize(d.Ordinal(), uintptr(s)), "hipStreamSynchronize")
}

func TestROCmDevices(t *testing.T) {
	ds := rocmDevices(t, 2)
	requireFakeHIP(t)
	all, err := Devices()
	require.NoError(t, err)
	uuids := map[string]bool{}
	for i, d := range ds {
		assert.Equal(t, KindROCm, d.Kind())
		assert.Equal(t, fmt.Sprintf("rocm:%d", i), d.String())
		p, err := ParseDevice(d.String())
		require.NoError(t, err)
		assert.Equal(t, d, p)
		assert.Contains(t, all, d)
		info, err := d.Info()
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("memtrack fakehip %d", i), info.Name)
		assert.Regexp(t, `^GPU-[0-9a-f]{16}$`, info.UUID, "as rocm-smi writes it")
		uuids[info.UUID] = true
	}
	assert.Len(t, uuids, 2, "each device has a UUID of its own")
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"ROCm(2)", func() error { _, err := ROCm(2); return err }, ErrInvalidOrdinal},
		{"ParseDevice rocm:2", func() error { _, err := ParseDevice("rocm:2"); return err }, ErrInvalidOrdinal},
		{"ROCm(-1)", func() error { _, err := ROCm(-1); return err }, ErrInvalidOrdinal},
		{"ParseDevice rocm:01", func() error { _, err := ParseDevice("rocm:01"); return err }, ErrInvalidDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			assert.ErrorIs(t, err, tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), err.Error())
		})
	}
}

// TestROCmAllocFree: each buffer is counted, on its own device, and
// hipMemGetInfo's free memory moves by exactly its size on the fake.
func TestROCmAllocFree(t *testing.T) {
	ds := rocmDevices(t, 2)
	requireFakeHIP(t) // on a real GPU, other processes move these figures
	for _, tc := range []struct {
		name string
		dev  int
		size int64
	}{
		{"1 B on rocm:0", 0, 1},
		{"4 KiB on rocm:0", 0, 4 << 10},
		{"96 MiB on rocm:1", 1, 96 << 20},
		{"1 GiB on rocm:1", 1, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, other := ds[tc.dev], ds[1-tc.dev]
			before := d.MemoryStats()
			free0, total, err := d.MemGetInfo()
			require.NoError(t, err)
			otherFree, _, err := other.MemGetInfo()
			require.NoError(t, err)
			u0, err := d.Usage()
			require.NoError(t, err)

			b, err := d.Alloc(tc.size)
			require.NoError(t, err)
			assert.NotZero(t, b.DevicePtr())
			assert.Nil(t, b.Bytes(), "the host cannot address AMD GPU memory")
			assert.Equal(t, before.Tracked+tc.size, d.MemoryAllocated())
			free1, total1, err := d.MemGetInfo()
			require.NoError(t, err)
			assert.Equal(t, total, total1)
			assert.Equal(t, free0-tc.size, free1, "the device lost exactly the buffer")
			of, _, err := other.MemGetInfo()
			require.NoError(t, err)
			assert.Equal(t, otherFree, of, "the other device is untouched")
			u1, err := d.Usage()
			require.NoError(t, err)
			assert.Equal(t, u0.Used+tc.size, u1.Used)
			assert.Equal(t, u1.Total-u1.Free, u1.Used)
			assert.Equal(t, u0.Untracked, u1.Untracked, "the buffer is tracked")

			require.NoError(t, b.Free())
			assert.ErrorIs(t, b.Free(), ErrDoubleFree)
			want := before
			want.Allocs++
			want.Frees++
			want.AllocBytes += tc.size
			want.FreedBytes += tc.size
			want.PeakTracked = max(before.PeakTracked, before.Tracked+tc.size)
			want.PeakBuffers = max(before.PeakBuffers, before.Buffers+1)
			want.PeakHeld = max(before.PeakHeld, before.Held+tc.size)
			assert.Equal(t, want, d.MemoryStats())
			free2, _, err := d.MemGetInfo()
			require.NoError(t, err)
			assert.Equal(t, free0, free2)
		})
	}
}

// TestROCmUsageUntracked: on the fake, the memory in use that memtrack
// did not allocate is the runtime's own on the device.
func TestROCmUsageUntracked(t *testing.T) {
	d := rocmDevices(t, 1)[0]
	requireFakeHIP(t)
	require.NoError(t, d.Pool().Trim(0)) // what stream-ordered tests left reserved
	u, err := d.Usage()
	require.NoError(t, err)
	assert.Equal(t, int64(4<<30), u.Total, "FAKEHIP_CAPACITY of device 0")
	assert.Equal(t, int64(hipContextBytes), u.Untracked)
	require.NoError(t, u.GraphErr)
	assert.Zero(t, u.GraphReserved, "the fake makes no graphs")
	require.True(t, u.PerProcess, "%v", u.PerProcessErr)
	assert.Equal(t, u.Used, u.ProcessUsed, "this process alone on the machine")
	assert.Equal(t, int64(hipContextBytes), u.ProcessUntracked)
	assert.Zero(t, u.OtherProcessesUsed)
	assert.Empty(t, u.OtherProcesses)
}

// TestROCmOutOfMemory: the runtime's hipErrorOutOfMemory is an
// *OutOfMemoryError with its code and name, and only FailedAllocs moves.
func TestROCmOutOfMemory(t *testing.T) {
	d := rocmDevices(t, 1)[0]
	s := hipStream(t, d)
	for _, tc := range []struct {
		name  string
		alloc func(size int64) (*Buffer, error)
	}{
		{"Alloc", d.Alloc},
		{"AllocAsync", func(size int64) (*Buffer, error) { return d.AllocAsync(size, s) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, total, err := d.MemGetInfo()
			require.NoError(t, err)
			before := d.MemoryStats()
			size := total + 1<<30
			b, err := tc.alloc(size)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, ErrOutOfMemory)
			var oom *OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int(hipdrv.OutOfMemory), oom.Code)
			assert.Equal(t, d, oom.Device)
			assert.Equal(t, size, oom.Requested)
			assert.Zero(t, oom.Limit, "the runtime refused it, not a limit")
			assert.Contains(t, err.Error(), "hipErrorOutOfMemory")
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), err.Error())
			if onFakeHIP() {
				assert.Contains(t, oom.Report(), "in use (rocm_smi): this process")
			}
			want := before
			want.FailedAllocs++
			assert.Equal(t, want, d.MemoryStats(), "only FailedAllocs moved")

			b, err = tc.alloc(1 << 20) // the device still works
			require.NoError(t, err)
			if tc.name == "AllocAsync" {
				require.NoError(t, b.FreeAsync(s))
				syncHIP(t, d, s)
			} else {
				require.NoError(t, b.Free())
			}
		})
	}
}

// TestROCmLimit: a memory limit refuses before the runtime is asked.
func TestROCmLimit(t *testing.T) {
	d := rocmDevices(t, 1)[0]
	require.NoError(t, d.SetMemoryLimit(d.MemoryAllocated()+1<<20))
	t.Cleanup(func() { require.NoError(t, d.SetMemoryLimit(0)) })
	b, err := d.Alloc(1 << 20)
	require.NoError(t, err)
	_, err = d.Alloc(1)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Positive(t, oom.Limit)
	assert.Zero(t, oom.Code, "the runtime was not asked")
	require.NoError(t, b.Free())
}

// TestROCmStreamOrdered: a buffer freed in stream order stays held until
// its stream executes the free, as on CUDA; the pool's figures, trim and
// release threshold are the runtime's.
func TestROCmStreamOrdered(t *testing.T) {
	d := rocmDevices(t, 1)[0]
	requireFakeHIP(t)
	require.NoError(t, d.Pool().Trim(0))
	s := hipStream(t, d)
	const size = 3 << 20
	before := d.MemoryStats()

	require.Equal(t, hipdrv.Success, hiptest.HoldStream(d.Ordinal(), uintptr(s)))
	released := false
	t.Cleanup(func() {
		if !released {
			hiptest.ReleaseStreams()
		}
	})
	b, err := d.AllocAsync(size, s)
	require.NoError(t, err)
	assert.NotZero(t, b.DevicePtr())
	require.NoError(t, b.FreeAsync(s))
	st := d.MemoryStats()
	assert.Equal(t, before.Tracked, st.Tracked, "freed on the host")
	assert.Equal(t, before.Held+size, st.Held, "the stream has not run the free")
	pu, err := d.Pool().Usage()
	require.NoError(t, err)
	assert.Equal(t, int64(size), pu.InFlight)
	assert.Equal(t, int64(size), pu.PoolUsed, "the runtime's pool holds it until the stream frees it")
	assert.GreaterOrEqual(t, pu.PoolReserved, pu.PoolUsed)

	hiptest.ReleaseStreams()
	released = true
	syncHIP(t, d, s)
	st = d.MemoryStats()
	assert.Equal(t, before.Held, st.Held, "the stream ran the free")
	assert.GreaterOrEqual(t, st.PeakHeld, before.Held+size, "the peak saw it")
	ps, err := d.Pool().Stats()
	require.NoError(t, err)
	assert.Zero(t, ps.PoolUsed)
	assert.GreaterOrEqual(t, ps.PeakPoolUsed, int64(size))

	// The release threshold is the runtime's attribute; a trim returns
	// what the pool reserved.
	require.NoError(t, d.Pool().SetReleaseThreshold(64<<20))
	t.Cleanup(func() { assert.NoError(t, d.Pool().SetReleaseThreshold(0)) })
	b, err = d.AllocAsync(size, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	syncHIP(t, d, s)
	ps, err = d.Pool().Stats()
	require.NoError(t, err)
	assert.Equal(t, int64(64<<20), ps.ReleaseThreshold)
	assert.GreaterOrEqual(t, ps.PoolReserved, int64(size), "kept below the threshold")
	require.NoError(t, d.Pool().Trim(0))
	ps, err = d.Pool().Stats()
	require.NoError(t, err)
	assert.Zero(t, ps.PoolReserved, "trimmed")
}

// TestROCmStreamRefused: a stream of another device, and a stream that
// captures a HIP graph, are refused before the runtime allocates: nothing
// is counted.
func TestROCmStreamRefused(t *testing.T) {
	ds := rocmDevices(t, 2)
	requireFakeHIP(t)
	d := ds[0]
	foreign := hipStream(t, ds[1])
	capturing := hipStream(t, d)
	require.Equal(t, hipdrv.Success, hiptest.BeginCapture(uintptr(capturing)))
	t.Cleanup(func() { hiptest.EndCapture(uintptr(capturing)) })
	for _, tc := range []struct {
		name   string
		stream Stream
		want   error
		words  string
	}{
		{"a stream of rocm:1", foreign, ErrInvalidArgument, "belongs to rocm:1"},
		{"a capturing stream", capturing, ErrNotSupported, "memtrack allocates and frees in no HIP graph"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := d.MemoryStats()
			b, err := d.AllocAsync(1<<20, tc.stream)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorContains(t, err, tc.words)
			assert.Equal(t, before, d.MemoryStats(), "nothing counted")

			b, err = d.AllocAsync(1<<20, DefaultStream)
			require.NoError(t, err)
			err = b.FreeAsync(tc.stream)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorContains(t, err, tc.words)
			assert.False(t, b.Freed(), "the buffer is still live")
			require.NoError(t, b.FreeAsync(DefaultStream))
			syncHIP(t, d, DefaultStream)
		})
	}
}

// TestROCmPeakScopeAndReset: a peak scope and ResetPeakMemoryStats hold
// on the device-side figure, and reset the pool's high marks.
func TestROCmPeakScopeAndReset(t *testing.T) {
	d := rocmDevices(t, 1)[0]
	requireFakeHIP(t)
	s := hipStream(t, d)
	start := d.MemoryStats()
	sc, err := d.OpenPeakScope()
	require.NoError(t, err)
	b, err := d.AllocAsync(5<<20, s)
	require.NoError(t, err)
	require.NoError(t, b.FreeAsync(s))
	syncHIP(t, d, s)
	assert.Equal(t, start.Tracked+5<<20, sc.PeakTracked())
	assert.Equal(t, start.Held+5<<20, sc.PeakHeld())
	require.NoError(t, sc.Close())

	d.ResetPeakMemoryStats()
	st := d.MemoryStats()
	assert.Equal(t, st.Tracked, st.PeakTracked)
	assert.Equal(t, st.Held, st.PeakHeld)
	ps, err := d.Pool().Stats()
	require.NoError(t, err)
	assert.Equal(t, ps.PoolUsed, ps.PeakPoolUsed, "the runtime's mark reset with the peaks")
}

// TestROCmChildMissingCalls: a call the runtime lacks turns its feature
// off with ErrNotSupported, naming the call, the release it came in and
// the runtime's version; the rest works.
func TestROCmChildMissingCalls(t *testing.T) {
	requireFakeHIP(t)
	fake52 := os.Getenv("MEMTRACK_FAKEHIP52_DIR")
	smi52 := os.Getenv("MEMTRACK_FAKESMI52_DIR")
	for _, tc := range []struct {
		name  string
		env   []string
		check func(t *testing.T, d Device)
	}{
		{"hipMallocAsync hidden from hipGetProcAddress", []string{"FAKEHIP_HIDE=hipMallocAsync"}, func(t *testing.T, d Device) {
			b, err := d.AllocAsync(1<<20, DefaultStream)
			assert.Nil(t, b)
			assert.ErrorIs(t, err, ErrNotSupported)
			assert.ErrorContains(t, err, "hipMallocAsync of ROCm 5.2")
			assert.ErrorContains(t, err, "HIP 6.4.")
			_, err = d.Pool().Stats()
			assert.ErrorIs(t, err, ErrNotSupported)
			assert.Zero(t, d.MemoryStats().FailedAllocs, "nothing counted")
		}},
		{"ROCm 5.2, no graph memory calls", []string{"LD_LIBRARY_PATH=" + fake52 + ":" + smi52}, func(t *testing.T, d Device) {
			_, err := d.Graphs().Stats()
			assert.ErrorIs(t, err, ErrNotSupported)
			assert.ErrorContains(t, err, "hipDeviceGetGraphMemAttribute of ROCm 5.3")
			assert.ErrorContains(t, err, "HIP 5.2.21153")
			u, err := d.Usage()
			require.NoError(t, err)
			assert.ErrorIs(t, u.GraphErr, ErrNotSupported)
			// Debian's rocm_smi gives a process's memory summed over the
			// devices it uses, and the runtime holds memory on both.
			assert.False(t, u.PerProcess)
			assert.ErrorIs(t, u.PerProcessErr, ErrPerProcessUnavailable)
			assert.ErrorContains(t, u.PerProcessErr, "rsmi_compute_process_info_by_device_get) came in ROCm 5.7")
			b, err := d.AllocAsync(1<<20, DefaultStream) // ROCm 5.2 has pools
			require.NoError(t, err)
			require.NoError(t, b.FreeAsync(DefaultStream))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(strings.Join(tc.env, " "), "LD_LIBRARY_PATH=:") {
				t.Skip("needs MEMTRACK_FAKEHIP52_DIR and MEMTRACK_FAKESMI52_DIR (scripts/test-rocm.sh)")
			}
			if !childtest.InChild(t, "MEMTRACK_ROCM_CHILD", tc.env...) {
				return
			}
			d, err := ROCm(0)
			require.NoError(t, err)
			tc.check(t, d)
			b, err := d.Alloc(1 << 20)
			require.NoError(t, err)
			require.NoError(t, b.Free())
		})
	}
}

// TestROCmChildUnavailable: without a runtime, or without a GPU, AMD
// devices fail with ErrBackendUnavailable, saying why in the loader's or
// the runtime's words; the CPU works.
func TestROCmChildUnavailable(t *testing.T) {
	if os.Getenv("MEMTRACK_ROCM_CHILD") == "" {
		requireFakeHIP(t)
	}
	for _, tc := range []struct {
		name  string
		env   []string
		words []string
	}{
		{"no runtime", []string{"LD_LIBRARY_PATH=" + t.TempDir()}, []string{"the HIP runtime did not load",
			"libamdhip64.so.6: cannot open shared object file", "libamdhip64.so: cannot open shared object file"}},
		{"no GPU", []string{"FAKEHIP_DEVICES=0"}, []string{"hipInit answered hipErrorInvalidDevice", "hipGetDeviceCount hipErrorNoDevice"}},
		{"no GPU, hipInit succeeds", []string{"FAKEHIP_DEVICES=0", "FAKEHIP_NOGPU_INIT=success"}, []string{"hipInit answered hipSuccess", "hipGetDeviceCount hipErrorNoDevice"}},
		{"an essential call missing", []string{"FAKEHIP_HIDE=hipMalloc"}, []string{"lacks calls that memtrack needs: hipMalloc of ROCm 4.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !childtest.InChild(t, "MEMTRACK_ROCM_CHILD", tc.env...) {
				return
			}
			_, err := ROCm(0)
			require.ErrorIs(t, err, ErrBackendUnavailable)
			for _, w := range tc.words {
				assert.ErrorContains(t, err, w)
			}
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack: "), err.Error())
			_, err = Device{kind: KindROCm}.Alloc(1)
			assert.ErrorIs(t, err, ErrBackendUnavailable)
			ds, err := Devices()
			assert.ErrorIs(t, err, ErrBackendUnavailable, "Devices says why it lists no AMD GPU")
			assert.Equal(t, []Device{CPU()}, ds)
			b, err := CPU().Alloc(1)
			require.NoError(t, err)
			require.NoError(t, b.Free())
		})
	}
}

// TestROCmChildHolder is another process on the machine of a per-process
// test: it allocates MEMTRACK_ROCM_HOLD bytes on rocm:0, says so on stdout,
// and frees them and exits when its stdin closes.
func TestROCmChildHolder(t *testing.T) {
	hold := os.Getenv("MEMTRACK_ROCM_HOLD")
	if hold == "" {
		t.Skip("run by TestROCmChildPerProcess in a process of its own")
	}
	n, err := strconv.ParseInt(hold, 10, 64)
	require.NoError(t, err)
	d, err := ROCm(0)
	require.NoError(t, err)
	b, err := d.Alloc(n)
	require.NoError(t, err)
	fmt.Println("holding")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	require.NoError(t, b.Free())
}

// startHolder starts TestROCmChildHolder holding n bytes on the machine of
// this process (FAKEHIP_MACHINE), and returns its PID once it holds them.
func startHolder(t *testing.T, n int64) (pid int, stop func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestROCmChildHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MEMTRACK_ROCM_HOLD="+strconv.FormatInt(n, 10), "MEMTRACK_ROCM_CHILD=",
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "holding" {
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			in.Close()
			for sc.Scan() {
			}
			assert.NoError(t, cmd.Wait())
		}
	}
	t.Cleanup(stop)
	return cmd.Process.Pid, stop
}

// TestROCmChildPerProcess: rocm_smi's figures split what the device has in
// use between this process and the others, with another process on the
// machine (FAKEHIP_MACHINE, a file the fake runtimes of both processes and
// the fake rocm_smi share); a budget from the per-process figures is the
// same with the other process as without it, where the device-wide one is
// not. Both rocm_smi builds: ROCm 5.7's, with the per-device call, and
// Debian's 5.2, without it.
func TestROCmChildPerProcess(t *testing.T) {
	requireFakeHIP(t)
	for _, tc := range []struct {
		name string
		smi  string
	}{
		{"rocm_smi 5.7", os.Getenv("MEMTRACK_FAKESMI_DIR")},
		{"rocm_smi 5.2", os.Getenv("MEMTRACK_FAKESMI52_DIR")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.smi == "" || os.Getenv("MEMTRACK_FAKEHIP_DIR") == "" {
				t.Skip("needs MEMTRACK_FAKEHIP_DIR and MEMTRACK_FAKESMI*_DIR (scripts/test-rocm.sh)")
			}
			machine := filepath.Join(t.TempDir(), "machine")
			if !childtest.InChild(t, "MEMTRACK_ROCM_CHILD", "FAKEHIP_MACHINE="+machine, "FAKEHIP_DEVICES=1",
				"LD_LIBRARY_PATH="+os.Getenv("MEMTRACK_FAKEHIP_DIR")+":"+tc.smi) {
				return
			}
			d := rocmDevices(t, 1)[0]
			u, err := d.Usage()
			require.NoError(t, err)
			require.True(t, u.PerProcess, "%v", u.PerProcessErr)
			assert.Equal(t, int64(hipContextBytes), u.ProcessUsed, "the runtime's own memory")
			assert.Zero(t, u.OtherProcessesUsed)

			const weights, pass, other = 64 << 20, 40 << 20, 500 << 20
			// budget takes a baseline, calls between, loads the weights and
			// measures a pass, and returns the budget from the
			// per-process figures and the one from the device-wide ones.
			budget := func(between func()) (perProcess, deviceWide Budget) {
				base, err := d.Baseline()
				require.NoError(t, err)
				between()
				w, err := d.Alloc(weights)
				require.NoError(t, err)
				defer func() { require.NoError(t, w.Free()) }()
				m, err := d.Measure(func() error {
					b, err := d.Alloc(pass)
					if err != nil {
						return err
					}
					return b.Free()
				})
				require.NoError(t, err)
				require.True(t, m.PerProcess, "%v", m.PerProcessErr)
				perProcess, err = m.Budget(base, 0.5, 16<<20)
				require.NoError(t, err)
				base.PerProcess, base.PerProcessErr = false, nil
				m.PerProcess, m.PerProcessErr = false, nil
				deviceWide, err = m.Budget(base, 0.5, 16<<20)
				require.NoError(t, err)
				return perProcess, deviceWide
			}
			aloneP, aloneD := budget(func() {})
			assert.Equal(t, int64(pass), aloneP.PeakIncrease)
			assert.Zero(t, aloneP.UntrackedIncrease)
			assert.Equal(t, aloneP, asPerProcess(aloneD), "alone, both figures agree")

			// The other process starts between the baseline and the
			// weights, as an instance started at the same time does: the
			// device-wide figures take its memory for this process's
			// untracked growth, the per-process ones do not.
			var pid int
			togetherP, togetherD := budget(func() { pid, _ = startHolder(t, other) })
			assert.Equal(t, aloneP.Blocks, togetherP.Blocks, "per process: the budget it gets alone")
			assert.Zero(t, togetherP.UntrackedIncrease)
			assert.Equal(t, int64(hipContextBytes+other), togetherD.UntrackedIncrease, "device-wide: the other's memory")
			assert.Less(t, togetherD.Blocks, aloneD.Blocks)

			b, err := d.Alloc(weights)
			require.NoError(t, err)
			u, err = d.Usage()
			require.NoError(t, err)
			require.True(t, u.PerProcess, "%v", u.PerProcessErr)
			assert.Equal(t, int64(hipContextBytes+weights), u.ProcessUsed)
			assert.Equal(t, int64(hipContextBytes), u.ProcessUntracked)
			assert.Equal(t, int64(hipContextBytes+other), u.OtherProcessesUsed, "the other's runtime and its buffer")
			require.Len(t, u.OtherProcesses, 1)
			assert.Equal(t, pid, u.OtherProcesses[0].PID)
			assert.Equal(t, u.ProcessUsed+u.OtherProcessesUsed, u.Used, "every byte in use is a process's")

			// The out-of-memory report names the other process.
			_, err = d.Alloc(u.Free + 1)
			var oom *OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int(hipdrv.OutOfMemory), oom.Code)
			assert.True(t, oom.PerProcess, "%v", oom.PerProcessErr)
			assert.Equal(t, int64(hipContextBytes+other), oom.OtherProcessesUsed)
			assert.Contains(t, oom.Report(), fmt.Sprintf("process %d", pid))
			require.NoError(t, b.Free())
		})
	}
}

// TestROCmRuntimeCallsPerPair counts the runtime calls of a tracked pair
// and of the raw pair, as the fake runtime counts them, on a thread whose
// current device is the buffer's and on one whose is another's.
func TestROCmRuntimeCallsPerPair(t *testing.T) {
	ds := rocmDevices(t, 2)
	requireFakeHIP(t)
	d := ds[0]
	own := hipStream(t, d)
	require.NoError(t, d.Pool().SetReleaseThreshold(1<<30)) // no pool release at the syncs
	t.Cleanup(func() { assert.NoError(t, d.Pool().SetReleaseThreshold(0)) })
	names := []string{"hipGetDevice", "hipSetDevice", "hipThreadExchangeStreamCaptureMode", "hipMalloc", "hipFree",
		"hipStreamGetDevice", "hipStreamGetCaptureInfo", "hipMallocAsync", "hipFreeAsync",
		"hipEventCreateWithFlags", "hipEventRecord", "hipEventQuery", "hipEventDestroy"}
	const pairs, rounds = 32, 4
	for _, c := range []struct {
		pair    string
		stream  Stream
		current int // the thread's current device
	}{
		{"Alloc and Free", 0, 0},
		{"Alloc and Free", 0, 1},
		{"AllocAsync and FreeAsync, the null stream", DefaultStream, 0},
		{"AllocAsync and FreeAsync, the null stream", DefaultStream, 1},
		{"AllocAsync and FreeAsync, a stream of its own", own, 0},
		{"AllocAsync and FreeAsync, a stream of its own", own, 1},
	} {
		async := strings.HasPrefix(c.pair, "AllocAsync")
		t.Run(fmt.Sprintf("%s, rocm:%d current", c.pair, c.current), func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			prev, r := hiptest.Device()
			require.Equal(t, hipdrv.Success, r)
			require.Equal(t, hipdrv.Success, hiptest.SetDevice(c.current))
			defer hiptest.SetDevice(prev)

			// The device-side peak above what the rounds hold, so that no
			// free raises it (a new peak learns first which frees have
			// executed), and nothing of an earlier test's pending: a
			// reading queries no event.
			big, err := d.Alloc(64 << 20)
			require.NoError(t, err)
			require.NoError(t, big.Free())
			d.MemoryStats()
			reading := runtimeCalls(t, "hipEventQuery")
			d.MemoryStats()
			require.Zero(t, reading()["hipEventQuery"], "a free of an earlier test is still pending")

			tracked, raw := map[string]uint64{}, map[string]uint64{}
			add := func(to, from map[string]uint64) {
				for n, v := range from {
					to[n] += v
				}
			}
			for r := range rounds + 1 { // the first round creates the events
				calls := runtimeCalls(t, names...)
				for range pairs {
					if async {
						b, err := d.AllocAsync(1<<10, c.stream)
						require.NoError(t, err)
						require.NoError(t, b.FreeAsync(c.stream))
					} else {
						b, err := d.Alloc(1 << 10)
						require.NoError(t, err)
						require.NoError(t, b.Free())
					}
				}
				made := calls()
				syncHIP(t, d, c.stream)
				calls = runtimeCalls(t, names...)
				d.MemoryStats() // learns that the round's frees executed
				if r > 0 {
					add(tracked, made)
					add(tracked, calls())
				}

				// The raw pair, with the device made current as a program
				// without memtrack would.
				require.Equal(t, hipdrv.Success, hiptest.SetDevice(d.Ordinal()))
				calls = runtimeCalls(t, names...)
				for range pairs {
					if async {
						require.Equal(t, hipdrv.Success, hiptest.MallocFreeAsync(1<<10, uintptr(c.stream)))
					} else {
						require.Equal(t, hipdrv.Success, hiptest.MallocFree(1<<10))
					}
				}
				made = calls()
				require.Equal(t, hipdrv.Success, hiptest.SetDevice(c.current))
				syncHIP(t, d, c.stream)
				if r > 0 {
					add(raw, made)
				}
			}

			var table strings.Builder
			fmt.Fprintf(&table, "runtime calls per pair, %s, rocm:%d current:\n%-36s %8s %8s\n", c.pair, c.current, "entry point", "tracked", "raw")
			var sumTracked, sumRaw uint64
			for _, n := range names {
				if tracked[n]+raw[n] > 0 {
					fmt.Fprintf(&table, "%-36s %8.3f %8.3f\n", n, float64(tracked[n])/(pairs*rounds), float64(raw[n])/(pairs*rounds))
				}
				sumTracked += tracked[n]
				sumRaw += raw[n]
			}
			fmt.Fprintf(&table, "%-36s %8.3f %8.3f", "all", float64(sumTracked)/(pairs*rounds), float64(sumRaw)/(pairs*rounds))
			t.Log("\n" + table.String())

			// Each of the pair's two calls is one cgo call of hipdrv that
			// asks the thread's device (hipGetDevice) and, where it is
			// another, makes the buffer's current and puts the other back
			// (hipSetDevice twice). Alloc and Free run in relaxed capture
			// mode: hipThreadExchangeStreamCaptureMode there and back. A
			// stream-ordered call asks its stream's capture
			// (hipStreamGetCaptureInfo) and, for a stream of one's own,
			// its device (hipStreamGetDevice); each free records an event
			// after it; and the reading of each round is one cgo call, one
			// query for the stream, with the device made current, in
			// relaxed capture mode (hipThreadExchangeStreamCaptureMode
			// there and back).
			switches := func(cgoCalls uint64) uint64 {
				if c.current != d.Ordinal() {
					return 2 * cgoCalls
				}
				return 0
			}
			var want, wantRaw map[string]uint64
			if async {
				getDevice := uint64(0)
				if c.stream != DefaultStream {
					getDevice = 2 * pairs
				}
				want = map[string]uint64{
					"hipGetDevice": 2*pairs + 1, "hipSetDevice": switches(2*pairs + 1), "hipStreamGetDevice": getDevice,
					"hipStreamGetCaptureInfo": 2 * pairs, "hipMallocAsync": pairs, "hipFreeAsync": pairs,
					"hipThreadExchangeStreamCaptureMode": 2, "hipEventRecord": pairs, "hipEventQuery": 1,
				}
				wantRaw = map[string]uint64{"hipMallocAsync": pairs, "hipFreeAsync": pairs}
			} else {
				want = map[string]uint64{
					"hipGetDevice": 2 * pairs, "hipSetDevice": switches(2 * pairs),
					"hipThreadExchangeStreamCaptureMode": 4 * pairs, "hipMalloc": pairs, "hipFree": pairs,
				}
				wantRaw = map[string]uint64{"hipMalloc": pairs, "hipFree": pairs}
			}
			perRounds := func(m map[string]uint64) map[string]uint64 {
				out := map[string]uint64{}
				for n, v := range m {
					if v > 0 {
						out[n] = v * rounds
					}
				}
				return out
			}
			assert.Equal(t, perRounds(want), nonZero(tracked), "the tracked pair")
			assert.Equal(t, perRounds(wantRaw), nonZero(raw), "the raw pair")
		})
	}
}

// asPerProcess returns b, a budget from device-wide figures, as its
// per-process twin reads where the two agree: PerProcess set.
func asPerProcess(b Budget) Budget {
	b.PerProcess = true
	return b
}

// nonZero returns m without its entries of 0.
func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for n, v := range m {
		if v > 0 {
			out[n] = v
		}
	}
	return out
}

// runtimeCalls returns a function that gives, for each of names, the calls
// the process has made to it since runtimeCalls was called, as the fake
// runtime counts them; the test skips where the runtime counts none.
func runtimeCalls(t *testing.T, names ...string) func() map[string]uint64 {
	t.Helper()
	if _, ok := hiptest.RuntimeCalls("hipInit"); !ok {
		t.Skip("the runtime counts no calls: needs the fake runtime of testdata/fakehip")
	}
	snapshot := func() map[string]uint64 {
		m := make(map[string]uint64, len(names))
		for _, n := range names {
			m[n], _ = hiptest.RuntimeCalls(n)
		}
		return m
	}
	before := snapshot()
	return func() map[string]uint64 {
		made := snapshot()
		for n := range made {
			made[n] -= before[n]
		}
		return made
	}
}
