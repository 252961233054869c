//go:build rocm

package rocmsmi_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
	"github.com/memtrack/memtrack/internal/rocmsmi"
	"github.com/memtrack/memtrack/internal/smitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests run on the fake SMI library of testdata/fakesmi, which
// scripts/test-rocm.sh builds into .cache/fakesmi (a library of ROCm 5.7,
// librocm_smi64.so.5) and .cache/fakesmi-5.2 (of ROCm 5.2, as Debian ships
// it: librocm_smi64.so.1), beside the fake HIP runtime, whose machine it
// reads. Each test runs in a process of its own: the library reads its
// configuration at rsmi_init, and the package loads it once.

const (
	childEnv = "MEMTRACK_ROCMSMI_CHILD"
	mib      = int64(1) << 20
)

type dirs struct{ hip, smi, smi52 string }

func fakeDirs(t *testing.T) dirs {
	t.Helper()
	d := dirs{os.Getenv("MEMTRACK_FAKEHIP_DIR"), os.Getenv("MEMTRACK_FAKESMI_DIR"), os.Getenv("MEMTRACK_FAKESMI52_DIR")}
	if d.hip == "" || d.smi == "" || d.smi52 == "" {
		t.Skip("needs the fakes' builds (MEMTRACK_FAKEHIP_DIR, MEMTRACK_FAKESMI_DIR, MEMTRACK_FAKESMI52_DIR: scripts/test-rocm.sh)")
	}
	return d
}

// inChild runs t in a process of its own whose library path is path.
func inChild(t *testing.T, path string, extra ...string) bool {
	t.Helper()
	return childtest.InChild(t, childEnv, append([]string{"LD_LIBRARY_PATH=" + path}, extra...)...)
}

// hip loads the fake HIP runtime, which puts the process on the fake
// machine, and returns the PCI addresses of its n devices.
func hip(t *testing.T, n int) []string {
	t.Helper()
	_, err := hipdrv.Load()
	require.NoError(t, err)
	require.NoError(t, hiptest.Load())
	_, fake := hiptest.RuntimeCalls("hipInit")
	require.True(t, fake, "the fake HIP runtime")
	in := hipdrv.Init()
	require.Equal(t, hipdrv.Initialized{Devices: n}, in)
	ids := make([]string, n)
	for i := range ids {
		info, r := hipdrv.DeviceInfo(i)
		require.Equal(t, hipdrv.Success, r)
		ids[i] = info.PCIBusID
	}
	return ids
}

func open(t *testing.T) *rocmsmi.Lib {
	t.Helper()
	l, err := rocmsmi.Open()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })
	return l
}

// alloc allocates size bytes on device with the fake runtime, and creates
// a stream there, as a process that runs work on the device does: so the
// process is on the device whichever devices the library counts as used
// (FAKESMI_GPUS).
func alloc(t *testing.T, device int, size int64) {
	t.Helper()
	_, c := hipdrv.Alloc(device, size)
	require.Equal(t, hipdrv.Call{}, c)
	s, r := hiptest.StreamCreate(device)
	require.Equal(t, hipdrv.Success, r)
	t.Cleanup(func() { hiptest.StreamDestroy(s) })
}

// The library names, in order: AMD's majors, Debian's, the bare name;
// without any, each name's reason in the dynamic loader's words.
func TestOpenNames(t *testing.T) {
	d := fakeDirs(t)
	for _, tc := range []struct {
		name  string
		links map[string]string
		want  string
	}{
		{"AMD's and Debian's", map[string]string{"librocm_smi64.so.5": d.smi, "librocm_smi64.so.1": d.smi52}, "librocm_smi64.so.5"},
		{"Debian's only", map[string]string{"librocm_smi64.so.1": d.smi52}, "librocm_smi64.so.1"},
		{"bare name only", map[string]string{"librocm_smi64.so": d.smi}, "librocm_smi64.so"},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for link, build := range tc.links {
				target, err := filepath.Glob(filepath.Join(build, "librocm_smi64.so.*"))
				require.NoError(t, err)
				require.Len(t, target, 1)
				require.NoError(t, os.Symlink(target[0], filepath.Join(dir, link)))
			}
			if !inChild(t, d.hip+":"+dir) {
				return
			}
			hip(t, 1)
			l, err := rocmsmi.Open()
			if tc.want == "" {
				require.ErrorIs(t, err, rocmsmi.ErrUnavailable)
				for _, name := range rocmsmi.Libraries {
					assert.Contains(t, err.Error(), name+": cannot open shared object file")
				}
				return
			}
			require.NoError(t, err)
			defer l.Close()
			assert.Equal(t, tc.want, l.Library().Name)
			assert.Equal(t, tc.want, filepath.Base(l.Library().Path))
		})
	}
}

// rsmi_init fails where the machine has no AMD GPU (no fake runtime to
// say what the kernel has, or FAKEHIP_DEVICES=0), as AMD's library does,
// and with whatever status it answers: Open says so in the library's
// words, and matches ErrUnavailable.
func TestOpenInitFails(t *testing.T) {
	d := fakeDirs(t)
	for _, tc := range []struct {
		name   string
		path   string
		env    []string
		status rocmsmi.Status
		text   string
	}{
		{"no GPU known", d.smi, nil, rocmsmi.InitError, "An error occurred during initialization"},
		{"no GPU", d.hip + ":" + d.smi, []string{"FAKEHIP_DEVICES=0"}, rocmsmi.InitError, "An error occurred during initialization"},
		{"permission", d.hip + ":" + d.smi, []string{"FAKESMI_FAIL=rsmi_init:1:4"}, 4, "RSMI_STATUS_PERMISSION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, tc.path, tc.env...) {
				return
			}
			if tc.path != d.smi {
				_, err := hipdrv.Load() // the fake runtime in the process: the machine it keeps
				require.NoError(t, err)
			}
			_, err := rocmsmi.Open()
			require.ErrorIs(t, err, rocmsmi.ErrUnavailable)
			var e *rocmsmi.Error
			require.True(t, errors.As(err, &e), "%v", err)
			assert.Equal(t, "rsmi_init", e.Op)
			assert.Equal(t, tc.status, e.Code)
			assert.Contains(t, err.Error(), tc.text)
		})
	}
}

// A process's figures on each device: with the call of ROCm 5.7, its
// memory on each; without it (ROCm 5.2), its sum over the devices it uses,
// which is a device's figure only where it uses that one alone.
func TestUsage(t *testing.T) {
	d := fakeDirs(t)
	for _, tc := range []struct {
		name      string
		smi       string
		perDevice bool
		on1       bool // the process allocates on device 1 too
		want      [2]rocmsmi.Process
	}{
		{"ROCm 5.7, two devices", d.smi, true, true, [2]rocmsmi.Process{{Used: uint64(3 * mib), UsedKnown: true}, {Used: uint64(5 * mib), UsedKnown: true}}},
		{"ROCm 5.2, two devices", d.smi52, false, true, [2]rocmsmi.Process{{}, {}}},
		{"ROCm 5.2, one device", d.smi52, false, false, [2]rocmsmi.Process{{Used: uint64(3 * mib), UsedKnown: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, d.hip+":"+tc.smi, "FAKEHIP_DEVICES=2") {
				return
			}
			ids := hip(t, 2)
			alloc(t, 0, 3*mib)
			if tc.on1 {
				alloc(t, 1, 5*mib)
			}
			l := open(t)
			assert.Equal(t, tc.perDevice, l.Library().PerDevice)
			for dev, id := range ids {
				u, err := l.Usage(id)
				require.NoError(t, err)
				if dev == 1 && !tc.on1 {
					assert.Empty(t, u.Processes, "the process is not on device 1")
					assert.False(t, u.SelfFound)
					continue
				}
				want := tc.want[dev]
				want.PID, want.Name = os.Getpid(), selfName(t)
				require.True(t, u.SelfFound)
				assert.Equal(t, want, u.Self)
				assert.Equal(t, []rocmsmi.Process{want}, u.Processes)
			}
		})
	}
}

// selfName is what the kernel calls this process (/proc/self/comm).
func selfName(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/comm")
	require.NoError(t, err)
	return string(b[:len(b)-1])
}

// A device is found by the PCI address HIP gives it; an address rocm_smi
// has no device at, or one that is no address, is an error.
func TestUsageDevice(t *testing.T) {
	d := fakeDirs(t)
	if !inChild(t, d.hip+":"+d.smi, "FAKEHIP_DEVICES=2", "FAKEHIP_PCI_BUS=0x41") {
		return
	}
	ids := hip(t, 2)
	assert.Equal(t, []string{"0000:41:00.0", "0000:42:00.0"}, ids)
	l := open(t)
	for _, tc := range []struct {
		id  string
		err string
		is  error
	}{
		{"0000:41:00.0", "", nil},
		{"42:00.0", "", nil},
		{"0000:43:00.0", "0000:43:00.0 among 2 device(s)", rocmsmi.ErrNoDevice},
		{"0001:41:00.0", "0001:41:00.0 among 2 device(s)", rocmsmi.ErrNoDevice},
		{"GPU-0", "is not domain:bus:device.function", nil},
		{"0000:41:00.9", "is not domain:bus:device.function", nil},
	} {
		_, err := l.Usage(tc.id)
		if tc.err == "" {
			assert.NoError(t, err, tc.id)
			continue
		}
		assert.ErrorContains(t, err, tc.err, tc.id)
		if tc.is != nil {
			assert.ErrorIs(t, err, tc.is, tc.id)
		}
	}
}

// Another process on the machine (FAKEHIP_MACHINE) is listed with its
// figure and its name while it lives, and not once it has exited.
func TestUsageOtherProcesses(t *testing.T) {
	d := fakeDirs(t)
	if os.Getenv(childEnv) != "" {
		t.Run("held", func(t *testing.T) { usageIn(t, d, os.Getenv("MEMTRACK_ROCMSMI_MACHINE"), true) })
		t.Run("exited", func(t *testing.T) { usageIn(t, d, os.Getenv("MEMTRACK_ROCMSMI_MACHINE"), false) })
		return
	}
	machine := filepath.Join(t.TempDir(), "machine")
	t.Setenv("MEMTRACK_ROCMSMI_MACHINE", machine)
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), holdEnv+"="+fmt.Sprint(64*mib), "FAKEHIP_MACHINE="+machine, "LD_LIBRARY_PATH="+d.hip)
	stdin, err := holder.StdinPipe()
	require.NoError(t, err)
	stdout, err := holder.StdoutPipe()
	require.NoError(t, err)
	holder.Stderr = os.Stderr
	require.NoError(t, holder.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	t.Setenv("MEMTRACK_ROCMSMI_HOLDER", fmt.Sprint(holder.Process.Pid))
	t.Run("held", func(t *testing.T) { usageIn(t, d, machine, true) })
	require.NoError(t, stdin.Close())
	require.NoError(t, holder.Wait())
	t.Run("exited", func(t *testing.T) { usageIn(t, d, machine, false) })
}

func usageIn(t *testing.T, d dirs, machine string, held bool) {
	t.Helper()
	for _, build := range []struct{ name, dir string }{{"ROCm 5.7", d.smi}, {"ROCm 5.2", d.smi52}} {
		t.Run(build.name, func(t *testing.T) {
			if !inChild(t, d.hip+":"+build.dir, "FAKEHIP_MACHINE="+machine) {
				return
			}
			ids := hip(t, 1)
			alloc(t, 0, mib)
			l := open(t)
			u, err := l.Usage(ids[0])
			require.NoError(t, err)
			require.True(t, u.SelfFound)
			assert.Equal(t, uint64(mib), u.Self.Used)
			var holder *rocmsmi.Process
			for i, p := range u.Processes {
				if fmt.Sprint(p.PID) == os.Getenv("MEMTRACK_ROCMSMI_HOLDER") {
					holder = &u.Processes[i]
				}
			}
			if !held {
				assert.Nil(t, holder, "an exited process is not listed")
				assert.Len(t, u.Processes, 1)
				return
			}
			require.NotNil(t, holder, "the holder is listed: %+v", u.Processes)
			assert.Equal(t, rocmsmi.Process{PID: holder.PID, Name: "rocmsmi.test", Used: uint64(64 * mib), UsedKnown: true}, *holder)
			assert.Len(t, u.Processes, 2)
		})
	}
}

// The resize protocol of the list calls, as the library answers a buffer
// too small (asked through package smitest), and as the package follows it
// when the list grows between its count and its read (the read answering
// RSMI_STATUS_INSUFFICIENT_SIZE, injected).
func TestResizeProtocol(t *testing.T) {
	d := fakeDirs(t)
	t.Run("too small", func(t *testing.T) {
		if !inChild(t, d.hip+":"+d.smi, "FAKEHIP_DEVICES=2") {
			return
		}
		hip(t, 2)
		alloc(t, 0, mib)
		alloc(t, 1, mib)
		open(t)
		self := uint32(os.Getpid())
		for _, tc := range []struct {
			capacity int
			pids     []uint32
			n        uint32
			status   rocmsmi.Status
		}{
			{-1, nil, 1, rocmsmi.Success},
			{0, nil, 0, rocmsmi.InsufficientSize},
			{1, []uint32{self}, 1, rocmsmi.Success},
			{5, []uint32{self}, 1, rocmsmi.Success},
		} {
			pids, n, s, ok := smitest.List(tc.capacity)
			require.True(t, ok)
			assert.Equal(t, [3]any{tc.pids, tc.n, tc.status}, [3]any{pids, n, s}, "list, room for %d", tc.capacity)
		}
		for _, tc := range []struct {
			capacity int
			devices  []uint32
			n        uint32
			status   rocmsmi.Status
		}{
			{-1, nil, 2, rocmsmi.Success},
			{1, []uint32{0}, 1, rocmsmi.InsufficientSize},
			{2, []uint32{0, 1}, 2, rocmsmi.Success},
		} {
			devices, n, s, ok := smitest.GPUs(self, tc.capacity)
			require.True(t, ok)
			assert.Equal(t, [3]any{tc.devices, tc.n, tc.status}, [3]any{devices, n, s}, "devices, room for %d", tc.capacity)
		}
		_, _, s, _ := smitest.GPUs(self+1000000, -1)
		assert.Equal(t, rocmsmi.NotFound, s, "no such process")
	})
	for _, tc := range []struct{ name, smi, fail string }{
		{"list grows", d.smi, "rsmi_compute_process_info_get:2:11"},
		{"devices grow", d.smi52, "rsmi_compute_process_gpus_get:2:11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, d.hip+":"+tc.smi, "FAKESMI_FAIL="+tc.fail) {
				return
			}
			ids := hip(t, 1)
			alloc(t, 0, mib)
			u, err := open(t).Usage(ids[0])
			require.NoError(t, err)
			assert.True(t, u.SelfFound)
			assert.Equal(t, uint64(mib), u.Self.Used)
		})
	}
}

// Where the documents leave the list's fields and a process's devices
// open, the figures hold under each reading: the package takes only the
// PIDs from the list (FAKESMI_LIST_FIELDS); a process that holds memory on
// a device but has no queue there is on it or not (FAKESMI_GPUS), which
// only a library without the per-device call follows.
func TestReadings(t *testing.T) {
	d := fakeDirs(t)
	for _, tc := range []struct {
		name     string
		smi      string
		env      string
		listed   bool // before the process creates a stream
		streamed bool // after
	}{
		{"list pid", d.smi, "FAKESMI_LIST_FIELDS=pid", true, true},
		{"list all", d.smi, "FAKESMI_LIST_FIELDS=all", true, true},
		{"ROCm 5.7, queues", d.smi, "FAKESMI_GPUS=queues", true, true},
		{"ROCm 5.2, memory", d.smi52, "FAKESMI_GPUS=memory", true, true},
		{"ROCm 5.2, queues", d.smi52, "FAKESMI_GPUS=queues", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, d.hip+":"+tc.smi, tc.env) {
				return
			}
			ids := hip(t, 1)
			_, c := hipdrv.Alloc(0, 2*mib) // memory, and no queue yet
			require.Equal(t, hipdrv.Call{}, c)
			l := open(t)
			u, err := l.Usage(ids[0])
			require.NoError(t, err)
			assert.Equal(t, tc.listed, u.SelfFound)
			if tc.listed {
				assert.Equal(t, uint64(2*mib), u.Self.Used)
			}
			s, r := hiptest.StreamCreate(0)
			require.Equal(t, hipdrv.Success, r)
			defer hiptest.StreamDestroy(s)
			u, err = l.Usage(ids[0])
			require.NoError(t, err)
			assert.Equal(t, tc.streamed, u.SelfFound)
			assert.Equal(t, uint64(2*mib), u.Self.Used)
		})
	}
}

// In a container with a PID namespace of its own, the kernel's PIDs are
// the host's: the process is listed, but not found under its own PID.
func TestPIDNamespace(t *testing.T) {
	d := fakeDirs(t)
	if !inChild(t, d.hip+":"+d.smi, "FAKESMI_PID_OFFSET=1000000") {
		return
	}
	ids := hip(t, 1)
	alloc(t, 0, mib)
	u, err := open(t).Usage(ids[0])
	require.NoError(t, err)
	assert.False(t, u.SelfFound)
	require.Len(t, u.Processes, 1)
	assert.Equal(t, os.Getpid()+1000000, u.Processes[0].PID)
	assert.Equal(t, uint64(mib), u.Processes[0].Used)
}

// A call that fails is an *Error naming the call, with the library's
// words; a closed Lib answers nothing, and closes once.
func TestErrors(t *testing.T) {
	d := fakeDirs(t)
	for _, tc := range []struct {
		name, smi, fail, op string
	}{
		{"list", d.smi, "rsmi_compute_process_info_get:1:4", "rsmi_compute_process_info_get"},
		{"per device", d.smi, "rsmi_compute_process_info_by_device_get:1:4", "rsmi_compute_process_info_by_device_get"},
		{"devices", d.smi52, "rsmi_compute_process_gpus_get:1:4", "rsmi_compute_process_gpus_get"},
		{"by pid", d.smi52, "rsmi_compute_process_info_by_pid_get:1:4", "rsmi_compute_process_info_by_pid_get"},
		{"PCI address", d.smi, "rsmi_dev_pci_id_get:1:4", "rsmi_dev_pci_id_get"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, d.hip+":"+tc.smi, "FAKESMI_FAIL="+tc.fail) {
				return
			}
			ids := hip(t, 1)
			alloc(t, 0, mib)
			l, err := rocmsmi.Open()
			require.NoError(t, err)
			_, err = l.Usage(ids[0])
			var e *rocmsmi.Error
			require.True(t, errors.As(err, &e), "%v", err)
			assert.Equal(t, tc.op, e.Op)
			assert.Equal(t, rocmsmi.Status(4), e.Code)
			assert.EqualError(t, err, tc.op+": RSMI_STATUS_PERMISSION: The user does not have permission to perform the requested operation. (rsmi_status_t 4)")
			u, err := l.Usage(ids[0])
			require.NoError(t, err, "the fault was the call's, once")
			assert.True(t, u.SelfFound)
			require.NoError(t, l.Close())
			require.NoError(t, l.Close())
			_, err = l.Usage(ids[0])
			assert.Error(t, err)
		})
	}
}
