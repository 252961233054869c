package memtrack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCgroupLimit reads cgroup limits from fake cgroup file systems laid out
// as v2, v1 and hybrid hosts lay them out.
func TestCgroupLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // path under root -> content
		self  string            // /proc/self/cgroup
		limit int64
		used  int64
		found bool
	}{
		{
			name:  "v2 limit",
			files: map[string]string{"app/memory.max": "1073741824\n", "app/memory.current": "1000\n"},
			self:  "0::/app\n",
			limit: 1 << 30, used: 1000, found: true,
		},
		{
			name:  "v2 max means none",
			files: map[string]string{"app/memory.max": "max\n", "app/memory.current": "1000\n"},
			self:  "0::/app\n",
		},
		{
			name:  "v2 namespace root",
			files: map[string]string{"memory.max": "2147483648\n", "memory.current": "5\n"},
			self:  "0::/not/visible\n",
			limit: 2 << 30, used: 5, found: true,
		},
		{
			name:  "v1 limit",
			files: map[string]string{"memory/job/memory.limit_in_bytes": "536870912\n", "memory/job/memory.usage_in_bytes": "77\n"},
			self:  "4:memory:/job\n3:cpuset:/\n0::/\n",
			limit: 512 << 20, used: 77, found: true,
		},
		{
			name:  "v1 unlimited",
			files: map[string]string{"memory/job/memory.limit_in_bytes": "9223372036854771712\n"},
			self:  "4:memory:/job\n",
		},
		{
			name:  "v1 joined controllers",
			files: map[string]string{"memory/job/memory.limit_in_bytes": "4096\n"},
			self:  "5:cpu,memory:/job\n",
			limit: 4096, found: true,
		},
		{
			name: "hybrid: the lower limit wins",
			files: map[string]string{
				"memory.max": "8192\n", "memory.current": "1\n",
				"memory/job/memory.limit_in_bytes": "4096\n", "memory/job/memory.usage_in_bytes": "2\n",
			},
			self:  "4:memory:/job\n0::/\n",
			limit: 4096, used: 2, found: true,
		},
		{name: "no files", self: "0::/app\n"},
		{name: "garbage", files: map[string]string{"memory.max": "lots\n"}, self: "nonsense\n0::/\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for p, content := range tt.files {
				path := filepath.Join(root, p)
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
			}
			limit, used, found := cgroupLimit(root, tt.self)
			assert.Equal(t, tt.found, found)
			assert.Equal(t, tt.limit, limit)
			assert.Equal(t, tt.used, used)
		})
	}
}

func TestParseCPUInfo(t *testing.T) {
	tests := []struct {
		name, cpuinfo, want string
	}{
		{"x86", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n" +
			"model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu vme\n\n" +
			"processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n",
			"Intel(R) Xeon(R) Platinum 8480+"},
		{"model name wins over a cpu line before it", "cpu\t\t: POWER9\nmodel name\t: AMD EPYC 9654 96-Core Processor\n",
			"AMD EPYC 9654 96-Core Processor"},
		{"arm64 board", "processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n\n" +
			"Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n",
			"Raspberry Pi 4 Model B Rev 1.4"},
		{"arm64 server, no model", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n", ""},
		{"POWER", "processor\t: 0\ncpu\t\t: POWER9 (architected), altivec supported\nclock\t\t: 2166.000000MHz\n",
			"POWER9 (architected), altivec supported"},
		{"MIPS", "system type\t\t: MT7621\ncpu model\t\t: MIPS 1004Kc V2.15\n", "MIPS 1004Kc V2.15"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCPUInfo(strings.NewReader(tt.cpuinfo))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseCPUInfoReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := parseCPUInfo(iotest.ErrReader(boom))
	assert.ErrorIs(t, err, boom)
}

// TestCPUInfoLinux checks CPU().Info against the first "model name" line of
// /proc/cpuinfo, found here by plain string search.
func TestCPUInfoLinux(t *testing.T) {
	data, err := os.ReadFile("/proc/cpuinfo")
	require.NoError(t, err)
	want := ""
	if _, rest, ok := strings.Cut(string(data), "model name"); ok {
		line, _, _ := strings.Cut(rest, "\n")
		_, want, _ = strings.Cut(line, ":")
		want = strings.TrimSpace(want)
	}
	if want == "" {
		t.Skip("this kernel's /proc/cpuinfo has no model name line")
	}
	info, err := CPU().Info()
	require.NoError(t, err)
	assert.Equal(t, DeviceInfo{Device: CPU(), Name: want}, info)
}
