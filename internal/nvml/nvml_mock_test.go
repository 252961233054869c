//go:build cuda

package nvml_test

import (
	"errors"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/internal/nvml"
)

// The paths a fake machine cannot reach, on go-nvml's mock of the library.

const uuid = "GPU-6d656d74-7261-636b-8000-000000000000"

// mocked returns a library whose device uuid lists procs (with ret), and
// counts the calls of each function.
func mocked(procs []gonvml.ProcessInfo, ret gonvml.Return, names map[int]string) (*mock.Interface, *mock.Device) {
	dev := &mock.Device{
		GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) { return procs, ret },
	}
	lib := &mock.Interface{
		InitFunc:     func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc: func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(s string) (gonvml.Device, gonvml.Return) {
			if s != uuid {
				return nil, gonvml.ERROR_NOT_FOUND
			}
			return dev, gonvml.SUCCESS
		},
		SystemGetProcessNameFunc: func(pid int) (string, gonvml.Return) {
			if n, ok := names[pid]; ok {
				return n, gonvml.SUCCESS
			}
			return "", gonvml.ERROR_NOT_FOUND
		},
	}
	return lib, dev
}

func TestProcessesMock(t *testing.T) {
	lib, dev := mocked([]gonvml.ProcessInfo{
		{Pid: 10, UsedGpuMemory: 300 << 20, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Pid: 11, UsedGpuMemory: 1 << 30, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
	}, gonvml.SUCCESS, map[int]string{10: "/usr/bin/python3"})
	l, err := nvml.New(lib)
	require.NoError(t, err)
	for range 2 {
		ps, err := l.Processes(uuid)
		require.NoError(t, err)
		assert.Equal(t, []nvml.Process{
			{PID: 10, Name: "/usr/bin/python3", Used: 300 << 20, UsedKnown: true},
			{PID: 11, Used: 1 << 30, UsedKnown: true}, // exited before its name was read: no name, still listed
		}, ps)
	}
	assert.Len(t, lib.DeviceGetHandleByUUIDCalls(), 1, "the handle is looked up once")
	assert.Len(t, dev.GetComputeRunningProcessesCalls(), 2, "the list is read afresh at every call")
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
	assert.Len(t, lib.ShutdownCalls(), 1, "one nvmlShutdown for the one nvmlInit")
	_, err = l.Processes(uuid)
	var e *nvml.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, gonvml.ERROR_UNINITIALIZED, e.Code)
}

// usedGpuMemory of NVML_VALUE_NOT_AVAILABLE (Windows WDDM) is not a number
// of bytes: the process is listed, its figure unknown, and the error says so.
func TestProcessesValueNotAvailable(t *testing.T) {
	lib, _ := mocked([]gonvml.ProcessInfo{{Pid: 10, UsedGpuMemory: ^uint64(0)}, {Pid: 11, UsedGpuMemory: 5}}, gonvml.SUCCESS, nil)
	l, err := nvml.New(lib)
	require.NoError(t, err)
	ps, err := l.Processes(uuid)
	require.ErrorIs(t, err, nvml.ErrValueNotAvailable)
	require.Len(t, ps, 2)
	assert.False(t, ps[0].UsedKnown)
	assert.Equal(t, nvml.Process{PID: 11, Used: 5, UsedKnown: true}, ps[1])
}

func TestProcessesErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		uuid string
		ret  gonvml.Return
		op   string
		code gonvml.Return
	}{
		{"unknown UUID", "GPU-00000000-0000-0000-0000-000000000000", gonvml.SUCCESS, "nvmlDeviceGetHandleByUUID", gonvml.ERROR_NOT_FOUND},
		{"no permission (a full-GPU handle in MIG mode)", uuid, gonvml.ERROR_NO_PERMISSION, "nvmlDeviceGetComputeRunningProcesses_v3", gonvml.ERROR_NO_PERMISSION},
		{"not supported", uuid, gonvml.ERROR_NOT_SUPPORTED, "nvmlDeviceGetComputeRunningProcesses_v3", gonvml.ERROR_NOT_SUPPORTED},
		{"GPU lost", uuid, gonvml.ERROR_GPU_IS_LOST, "nvmlDeviceGetComputeRunningProcesses_v3", gonvml.ERROR_GPU_IS_LOST},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib, _ := mocked(nil, tc.ret, nil)
			l, err := nvml.New(lib)
			require.NoError(t, err)
			ps, err := l.Processes(tc.uuid)
			assert.Nil(t, ps)
			var e *nvml.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tc.op, e.Op)
			assert.Equal(t, tc.code, e.Code)
			assert.Contains(t, err.Error(), tc.op)
		})
	}
}

func TestNewInitFails(t *testing.T) {
	for _, code := range []gonvml.Return{gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_NO_PERMISSION, gonvml.ERROR_UNKNOWN} {
		lib := &mock.Interface{InitFunc: func() gonvml.Return { return code }}
		l, err := nvml.New(lib)
		assert.Nil(t, l)
		require.ErrorIs(t, err, nvml.ErrUnavailable)
		var e *nvml.Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, code, e.Code)
		assert.False(t, errors.Is(err, nvml.ErrValueNotAvailable))
	}
}
