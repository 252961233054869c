//go:build cuda

package memtrack

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gpuUUID is the form nvidia-smi -L gives a GPU's UUID, or a MIG instance's.
var gpuUUID = regexp.MustCompile(`^(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestCUDAInfo(t *testing.T) {
	ds := cudaDevices(t, 1)
	if d, err := CUDA(1); err == nil {
		ds = append(ds, d)
	}
	seen := map[string]bool{}
	for _, d := range ds {
		info, err := d.Info()
		require.NoError(t, err)
		assert.Equal(t, d, info.Device)
		assert.NotEmpty(t, info.Name)
		assert.Regexp(t, gpuUUID, info.UUID)
		assert.False(t, seen[info.UUID], "two devices share the UUID %s", info.UUID)
		seen[info.UUID] = true
	}
}

// TestCUDAInfoFake checks the exact name and UUID the fake driver gives,
// which pins the byte order of the UUID's text.
func TestCUDAInfoFake(t *testing.T) {
	requireFake(t)
	ds := cudaDevices(t, 2)
	for i, want := range []DeviceInfo{
		{Device: ds[0], Name: "memtrack fakecuda 0", UUID: "GPU-6d656d74-7261-636b-8000-000000000000"},
		{Device: ds[1], Name: "memtrack fakecuda 1", UUID: "GPU-6d656d74-7261-636b-8000-000000000001"},
	} {
		info, err := ds[i].Info()
		require.NoError(t, err)
		assert.Equal(t, want, info)
	}
}

// TestCUDAInfoMIG runs TestCUDAChildInfoMIG in a process of its own, in which
// the fake names its device as the driver names a MIG instance.
func TestCUDAInfoMIG(t *testing.T) {
	runInfoChild(t, "TestCUDAChildInfoMIG", "FAKECUDA_NAME=NVIDIA H200 MIG 1g.18gb")
}

// TestCUDAChildInfoMIG: a MIG instance's UUID prints as nvidia-smi -L prints
// it, with the prefix MIG-.
func TestCUDAChildInfoMIG(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	info, err := d.Info()
	require.NoError(t, err)
	assert.Equal(t, "NVIDIA H200 MIG 1g.18gb", info.Name)
	assert.Equal(t, "MIG-6d656d74-7261-636b-8000-000000000000", info.UUID)
}

func TestIsMIG(t *testing.T) {
	for name, want := range map[string]bool{
		"NVIDIA A100-SXM4-40GB MIG 1g.5gb": true,
		"NVIDIA H200 MIG 3g.71gb":          true,
		"NVIDIA H200":                      false,
		"memtrack fakecuda 0":              false,
		"NVIDIA MIGHTY 80GB":               false,
	} {
		assert.Equal(t, want, isMIG(name), name)
	}
}

// TestCUDAInfoNoContext: naming a device retains no primary context, which
// would take device memory.
func TestCUDAInfoNoContext(t *testing.T) {
	ds := cudaDevices(t, 1)
	d := ds[len(ds)-1]
	if d1, err := CUDA(1); err == nil {
		d = d1 // the second device, which fewer tests use
	}
	b := openTable(KindCUDA).b.(*cudaBackend)
	if b.dev(d.ordinal).ctx.Load() != nil {
		t.Skipf("an earlier test retained the context of %v", d)
	}
	_, err := d.Info()
	require.NoError(t, err)
	assert.Nil(t, b.dev(d.ordinal).ctx.Load(), "Info retained the context of %v", d)
}

// TestCUDAInfoFault runs TestCUDAChildInfoFault in a process of its own, in
// which the fake driver fails the first cuDeviceGetUuid with
// CUDA_ERROR_INVALID_DEVICE (101).
func TestCUDAInfoFault(t *testing.T) {
	runInfoChild(t, "TestCUDAChildInfoFault", "FAKECUDA_FAIL=cuDeviceGetUuid:1:101")
}

// runInfoChild runs the test name in a process of its own, on the fake
// driver configured by env.
func runInfoChild(t *testing.T, name, env string) {
	requireFake(t)
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), "MEMTRACK_CUDA_CHILD="+name, "GORACE="+gorace, env)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child output:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: "+name, "child output:\n%s", out)
}

// TestCUDAChildInfoFault: a failed Info says which device and call failed,
// with the driver's code, moves no counter, and the next Info succeeds.
func TestCUDAChildInfoFault(t *testing.T) {
	child(t)
	d := cudaDevices(t, 1)[0]
	before := d.MemoryStats()
	info, err := d.Info()
	assert.Equal(t, DeviceInfo{Device: d}, info)
	var be *BackendError
	require.True(t, errors.As(err, &be), "%v is a *BackendError", err)
	assert.Equal(t, d, be.Device)
	assert.Equal(t, "info", be.Op)
	assert.Equal(t, 101, be.Code)
	assert.Equal(t, "CUDA_ERROR_INVALID_DEVICE", be.Name)
	assert.Equal(t, before, d.MemoryStats())

	info, err = d.Info()
	require.NoError(t, err)
	assert.Regexp(t, gpuUUID, info.UUID)
}

func TestFormatGPUUUID(t *testing.T) {
	tests := []struct {
		name string
		b    [16]byte
		want string
	}{
		{"zero", [16]byte{}, "GPU-00000000-0000-0000-0000-000000000000"},
		{"byte order", [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"},
		{"high nibbles", [16]byte{0xde, 0xad, 0xbe, 0xef, 0xfe, 0xed, 0xfa, 0xce, 0xca, 0xfe, 0xba, 0xbe, 0x80, 0x7f, 0x10, 0xff},
			"GPU-deadbeef-feed-face-cafe-babe807f10ff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, formatGPUUUID(tt.b))
		})
	}
}
