//go:build rocm

package hipdrv_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/memtrack/memtrack/internal/hipdrv"
	"github.com/memtrack/memtrack/internal/hiptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// Each device's identity: its name, its UUID as AMD's runtime fills it
// (the 16 hexadecimal digits of its unique ID), its PCI address as
// domain:bus:device.function; a device that does not exist is refused.
func TestDeviceInfo(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, "FAKEHIP_DEVICES=3", "FAKEHIP_PCI_BUS=0x03") {
		return
	}
	requireFake(t, 3)
	for _, tc := range []struct {
		device int
		uuid   string
		bus    string
	}{
		{0, "6d656d7472616b03", "0000:03:00.0"},
		{1, "6d656d7472616b04", "0000:04:00.0"},
		{2, "6d656d7472616b05", "0000:05:00.0"},
	} {
		info, r := hipdrv.DeviceInfo(tc.device)
		require.Equal(t, hipdrv.Success, r)
		assert.Equal(t, fmt.Sprintf("memtrack fakehip %d", tc.device), info.Name)
		assert.True(t, info.HasUUID)
		assert.Equal(t, tc.uuid, string(info.UUID[:]))
		assert.Equal(t, tc.bus, info.PCIBusID)
	}
	_, r := hipdrv.DeviceInfo(3)
	assert.Equal(t, hipdrv.InvalidDevice, r)
}

// hipMalloc and hipFree move the device's free memory (hipMemGetInfo) by
// what they allocate; a size of 0 allocates nothing and succeeds; a size
// the device has not free is hipErrorOutOfMemory and takes nothing.
func TestAllocFree(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, "FAKEHIP_CAPACITY="+fmt.Sprint(2*gib)) {
		return
	}
	requireFake(t, 1)
	for _, tc := range []struct {
		name string
		size int64
		op   hipdrv.Result
	}{
		{"1 MiB", mib, hipdrv.Success},
		{"odd", 12345, hipdrv.Success},
		{"whole device", 2 * gib, hipdrv.Success},
		{"zero", 0, hipdrv.Success},
		{"more than the device", 2*gib + 1, hipdrv.OutOfMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			free0, total, c := hipdrv.MemInfo(0)
			require.Equal(t, hipdrv.Call{}, c)
			require.Equal(t, 2*gib, total)
			ptr, c := hipdrv.Alloc(0, tc.size)
			require.Equal(t, hipdrv.Call{Op: tc.op}, c)
			free1, _, _ := hipdrv.MemInfo(0)
			if tc.op != hipdrv.Success || tc.size == 0 {
				assert.Zero(t, ptr)
				assert.Equal(t, free0, free1, "nothing taken")
				return
			}
			assert.NotZero(t, ptr)
			assert.Equal(t, free0-tc.size, free1)
			require.Equal(t, hipdrv.Call{}, hipdrv.Free(0, ptr))
			free2, _, _ := hipdrv.MemInfo(0)
			assert.Equal(t, free0, free2)
		})
	}
	assert.Equal(t, hipdrv.Call{}, hipdrv.Free(0, 0), "hipFree of NULL succeeds")
	assert.Equal(t, hipdrv.Call{Op: 17}, hipdrv.Free(0, 0x1000), "hipErrorInvalidDevicePointer")
}

// An operation on a device makes it current on the calling thread only
// for the call: the thread's device is as it was after each, whichever
// device the operation named, and the operation ran on the device named.
func TestCurrentDeviceRestored(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, "FAKEHIP_DEVICES=2") {
		return
	}
	requireFake(t, 2)
	stream, r := hiptest.StreamCreate(0)
	require.Equal(t, hipdrv.Success, r)
	defer hiptest.StreamDestroy(stream)
	var ptr, aptr uintptr
	var events hipdrv.StreamEvents
	for _, tc := range []struct {
		name string
		op   func() hipdrv.Call
	}{
		{"Alloc", func() hipdrv.Call {
			p, c := hipdrv.Alloc(0, mib)
			ptr = p
			return c
		}},
		{"MemInfo", func() hipdrv.Call {
			free, total, c := hipdrv.MemInfo(0)
			assert.Equal(t, total-mib, free, "device 0's figures")
			return c
		}},
		{"Free", func() hipdrv.Call { return hipdrv.Free(0, ptr) }},
		{"AllocAsync", func() hipdrv.Call {
			a := hipdrv.AllocAsync(0, mib, stream)
			aptr = a.Ptr
			return a.Call
		}},
		{"FreeAsync", func() hipdrv.Call {
			f := hipdrv.FreeAsync(0, aptr, stream, hipdrv.Event{})
			events.Add(f.Event)
			events.EndStream()
			return f.Call
		}},
		{"StreamEvents.Query", func() hipdrv.Call {
			events.Query(0)
			_, res := events.Reached(0)
			return hipdrv.Call{Op: res}
		}},
		{"StreamInfo", func() hipdrv.Call { return hipdrv.StreamInfo(0, stream).Call }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A subtest runs in a goroutine of its own: the thread's
			// device is read on the thread that set it only if the
			// subtest holds its thread.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			require.Equal(t, hipdrv.Success, hiptest.SetDevice(1))
			assert.Equal(t, hipdrv.Call{}, tc.op())
			d, r := hiptest.Device()
			require.Equal(t, hipdrv.Success, r)
			assert.Equal(t, 1, d, "the thread's device after %s", tc.name)
		})
	}
	free1, total1, _ := hipdrv.MemInfo(1)
	assert.Equal(t, total1, free1, "nothing ran on device 1")
}

// The current device is each thread's own: two threads on different
// devices each keep theirs while the other operates on it.
func TestCurrentDevicePerThread(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, "FAKEHIP_DEVICES=2") {
		return
	}
	requireFake(t, 2)
	var set, done sync.WaitGroup
	set.Add(2)
	done.Add(2)
	got := make([]int, 2)
	for i := range 2 {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			assert.Equal(t, hipdrv.Success, hiptest.SetDevice(i))
			set.Done()
			set.Wait() // both threads have their devices before either operates
			p, c := hipdrv.Alloc(1-i, mib)
			assert.Equal(t, hipdrv.Call{}, c)
			assert.Equal(t, hipdrv.Call{}, hipdrv.Free(1-i, p))
			got[i], _ = hiptest.Device()
		}()
	}
	done.Wait()
	assert.Equal(t, []int{0, 1}, got)
}

// The steps of an operation are reported apart: where making the device
// current fails, the operation does not run; where putting the thread's
// device back fails, the operation's own result still says what it did.
func TestCallSteps(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		name string
		fail string
		call hipdrv.Call
		ran  bool
	}{
		{"enter fails", "hipSetDevice:1:101", hipdrv.Call{Enter: hipdrv.InvalidDevice}, false},
		{"restore fails", "hipSetDevice:2:101", hipdrv.Call{Restore: hipdrv.InvalidDevice}, true},
		{"operation fails", "hipMalloc:1:2", hipdrv.Call{Op: hipdrv.OutOfMemory}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, current, "FAKEHIP_DEVICES=2", "FAKEHIP_FAIL="+tc.fail) {
				return
			}
			requireFake(t, 2)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			before := calls(t, "hipMalloc")
			ptr, c := hipdrv.Alloc(1, mib)
			assert.Equal(t, tc.call, c)
			ran := calls(t, "hipMalloc") > before
			assert.Equal(t, tc.ran, ran, "hipMalloc called")
			if ptr != 0 {
				assert.Equal(t, hipdrv.Call{}, hipdrv.Free(1, ptr))
			}
		})
	}
}

// The runtime names its results: ErrorName asks it, Name knows the usual
// ones without it.
func TestErrorName(t *testing.T) {
	_, _ = fakeDirs(t)
	requireFake(t, 1)
	for _, tc := range []struct {
		r          hipdrv.Result
		name, text string
	}{
		{hipdrv.OutOfMemory, "hipErrorOutOfMemory", "out of memory"},
		{hipdrv.NoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
		{hipdrv.NotReady, "hipErrorNotReady", "device not ready"},
	} {
		name, text := hipdrv.ErrorName(tc.r)
		assert.Equal(t, tc.name, name)
		assert.Equal(t, tc.text, text)
		assert.Equal(t, tc.name, hipdrv.Name(tc.r))
	}
	assert.Empty(t, hipdrv.Name(12345))
}

// hipMemGetInfo counts the memory of every process on the device
// (FAKEHIP_MEMINFO=device, ROCm 6.x's reference) or of this one alone
// (process, ROCm 5.x's warning); a process's memory is the device's again
// once it exits.
func TestMemInfoOtherProcesses(t *testing.T) {
	current, _ := fakeDirs(t)
	if os.Getenv(childEnv) == "" {
		machine := filepath.Join(t.TempDir(), "machine")
		t.Setenv("MEMTRACK_HIPDRV_MACHINE", machine)
		holder := exec.Command(os.Args[0])
		holder.Env = append(os.Environ(), holdEnv+"="+fmt.Sprint(64*mib), "FAKEHIP_MACHINE="+machine, "LD_LIBRARY_PATH="+current)
		stdin, err := holder.StdinPipe()
		require.NoError(t, err)
		stdout, err := holder.StdoutPipe()
		require.NoError(t, err)
		holder.Stderr = os.Stderr
		require.NoError(t, holder.Start())
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "held\n", line)
		t.Run("held", func(t *testing.T) { memInfoIn(t, current, machine, 64*mib) })
		require.NoError(t, stdin.Close())
		require.NoError(t, holder.Wait())
		t.Run("exited", func(t *testing.T) { memInfoIn(t, current, machine, 0) })
		return
	}
	t.Run("held", func(t *testing.T) { memInfoIn(t, current, os.Getenv("MEMTRACK_HIPDRV_MACHINE"), 64*mib) })
	t.Run("exited", func(t *testing.T) { memInfoIn(t, current, os.Getenv("MEMTRACK_HIPDRV_MACHINE"), 0) })
}

// memInfoIn checks, in a process of its own on the machine, that
// hipMemGetInfo counts others' memory under one reading and not the other.
func memInfoIn(t *testing.T, dir, machine string, others int64) {
	t.Helper()
	for _, reading := range []string{"device", "process"} {
		t.Run(reading, func(t *testing.T) {
			if !inChild(t, dir, "FAKEHIP_MACHINE="+machine, "FAKEHIP_MEMINFO="+reading) {
				return
			}
			requireFake(t, 1)
			p, c := hipdrv.Alloc(0, mib)
			require.Equal(t, hipdrv.Call{}, c)
			defer hipdrv.Free(0, p)
			free, total, c := hipdrv.MemInfo(0)
			require.Equal(t, hipdrv.Call{}, c)
			want := total - mib
			if reading == "device" {
				want -= others
			}
			assert.Equal(t, want, free)
		})
	}
}

// A runtime holds memory of its own on each device once it initialises
// (FAKEHIP_CONTEXT_BYTES), which hipMemGetInfo counts before any
// allocation; a device named as a real GPU is named so.
func TestRuntimeMemory(t *testing.T) {
	current, _ := fakeDirs(t)
	if !inChild(t, current, "FAKEHIP_DEVICES=2", fmt.Sprintf("FAKEHIP_CONTEXT_BYTES=%d", 300*mib), "FAKEHIP_NAME=AMD Instinct MI300X") {
		return
	}
	requireFake(t, 2)
	for dev := range 2 {
		free, total, c := hipdrv.MemInfo(dev)
		require.Equal(t, hipdrv.Call{}, c)
		assert.Equal(t, total-300*mib, free, "device %d", dev)
		info, r := hipdrv.DeviceInfo(dev)
		require.Equal(t, hipdrv.Success, r)
		assert.Equal(t, "AMD Instinct MI300X", info.Name)
	}
}

// hipMalloc and hipFree run in relaxed stream-capture mode where the
// runtime has hipThreadExchangeStreamCaptureMode: one exchange sets it,
// another puts the thread's mode back; without the call, they run as they
// are.
func TestAllocRelaxed(t *testing.T) {
	current, _ := fakeDirs(t)
	for _, tc := range []struct {
		name      string
		env       []string
		exchanges uint64 // per operation
	}{
		{"exchanged", nil, 2},
		{"without the call", []string{"FAKEHIP_HIDE=hipThreadExchangeStreamCaptureMode"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !inChild(t, current, tc.env...) {
				return
			}
			requireFake(t, 1)
			before := calls(t, "hipThreadExchangeStreamCaptureMode")
			p, c := hipdrv.Alloc(0, mib)
			require.Equal(t, hipdrv.Call{}, c)
			require.Equal(t, hipdrv.Call{}, hipdrv.Free(0, p))
			assert.Equal(t, 2*tc.exchanges, calls(t, "hipThreadExchangeStreamCaptureMode")-before)
		})
	}
}
