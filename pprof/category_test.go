package pprof

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

//go:noinline
func allocCached(c memtrack.Category, size int64) (*memtrack.Buffer, error) { return c.Alloc(size) }

// TestCategoryLabel allocates in a category and outside it from two sites:
// the category's samples carry the label category, the others none, and
// go tool pprof -tagfocus keeps only the category's.
func TestCategoryLabel(t *testing.T) {
	d := recording(t, 8)
	kv, err := d.Category("kv_cache")
	require.NoError(t, err)
	a := allocOK(t)(allocCached(kv, 4096))
	b := allocOK(t)(allocFromA(d, 1024))
	defer freeAll(t, a, b)

	p := readProfile(t, d, InUse)
	labels := map[string]string{}
	for _, s := range p.Sample {
		fn := s.Location[0].Line[0].Function.Name
		labels[fn[strings.LastIndex(fn, ".")+1:]] = strings.Join(s.Label["category"], ",")
		assert.Equal(t, []string{d.String()}, s.Label["device"])
	}
	assert.Equal(t, map[string]string{"allocCached": "kv_cache", "allocFromA": ""}, labels)

	if testing.Short() {
		t.Skip("go tool pprof is not run with -short")
	}
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		t.Skipf("no go command: %v", err)
	}
	f := filepath.Join(t.TempDir(), "inuse.pb.gz")
	out, err := os.Create(f)
	require.NoError(t, err)
	require.NoError(t, WriteProfile(out, d, InUse))
	require.NoError(t, out.Close())
	top, err := exec.Command(goTool, "tool", "pprof", "-tagfocus", "category=kv_cache", "-top", f).CombinedOutput()
	require.NoError(t, err, "%s", top)
	assert.Contains(t, string(top), "allocCached")
	assert.NotContains(t, string(top), "allocFromA")
}
