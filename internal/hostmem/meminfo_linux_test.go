package hostmem

import (
	"os"
	"path/filepath"
	"testing"

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
