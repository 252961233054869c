package memtrack

import (
	"go/build/constraint"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The core counts and exposes plain Go values; every rendering (Prometheus,
// pprof, HTML, traces) is a package of its own. So the core's dependencies,
// in every build, are the standard library and these alone.
var coreDeps = []string{
	"github.com/memtrack/memtrack",
	"github.com/memtrack/memtrack/internal/bytesize",
	"github.com/memtrack/memtrack/tracker",
	"github.com/memtrack/memtrack/internal/hostmem",   // the CPU backend's host memory
	"github.com/memtrack/memtrack/internal/addrindex", // the index of tracked addresses
	"github.com/memtrack/memtrack/internal/histring",  // the ring of the memory history
	"github.com/memtrack/memtrack/internal/siterec",   // the recorder of allocation sites
	"github.com/memtrack/memtrack/internal/slots",     // the leak watch's table of entries
	"github.com/memtrack/memtrack/internal/captures",  // the CUDA graph captures' bookkeeping
	"github.com/memtrack/memtrack/internal/addrspace", // the invariants of one reservation of address space
	"github.com/memtrack/memtrack/internal/hostvm",    // the CPU's reservations of address space
	"github.com/memtrack/memtrack/internal/fit",       // the arithmetic of a prediction of a load
	"github.com/memtrack/memtrack/internal/claims",    // the board of claims that processes sharing a device read
	"golang.org/x/sys/unix",                           // internal/hostvm's mmap at a fixed address
	"golang.org/x/sys/windows",                        // internal/hostvm's VirtualAlloc
	"go.uber.org/atomic",
	"github.com/memtrack/memtrack/internal/cudadrv", // under -tags cuda: the driver, loaded at run time
	"github.com/memtrack/memtrack/internal/held",    // under -tags cuda or rocm: the device-side figure, with the stream-ordered frees pending
	"github.com/memtrack/memtrack/internal/nvml",    // under -tags cuda: NVML, the per-process figures, loaded at run time
	"github.com/memtrack/memtrack/internal/hipdrv",  // under -tags rocm: the HIP runtime, loaded at run time
	"github.com/memtrack/memtrack/internal/rocmsmi", // under -tags rocm: rocm_smi, the per-process figures, loaded at run time
}

// goTool returns the go command that built the test, and skips the test
// where there is none, or where the test binary runs outside the package's
// sources (scripts/gpu-check.sh copies it): go list needs them in the
// working directory.
func goTool(t *testing.T) string {
	t.Helper()
	//lint:ignore SA1019 the toolchain that built this test binary is the one to run
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(gotool); err != nil {
		t.Skipf("no go command at %s to list the dependencies with: %v", gotool, err)
	}
	if _, err := os.Stat("deps_test.go"); err != nil {
		t.Skip("not run in the package's source directory")
	}
	return gotool
}

func TestCoreImportsNoRenderer(t *testing.T) {
	gotool := goTool(t)
	for _, tc := range []struct {
		name string
		env  []string
		tags string
	}{
		{"default", nil, ""},
		{"cuda", nil, "cuda"},
		{"rocm", nil, "rocm"},
		{"metal on macOS", []string{"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=1"}, "metal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, pkg := range []string{".", "./tracker"} {
				cmd := exec.Command(gotool, "list", "-deps", "-tags", tc.tags,
					"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
				cmd.Env = append(cmd.Environ(), tc.env...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				require.NoError(t, err, "go list -deps %s: %s", pkg, stderr.String())
				deps := strings.Fields(string(out))
				require.Contains(t, deps, "github.com/memtrack/memtrack/tracker", "the listing holds the non-standard packages")
				for _, dep := range deps {
					assert.True(t, slices.Contains(coreDeps, dep), "%s (-tags %q) depends on %s, which is not the standard library, the module's core packages or go.uber.org/atomic", pkg, tc.tags, dep)
				}
			}
		})
	}
}

// TestOpenTelemetryOnlyInItsPackage checks that no package of the module
// but otelmetric depends on OpenTelemetry's modules (tests aside): the
// core, tracker, the other renderers and the examples build without them.
func TestOpenTelemetryOnlyInItsPackage(t *testing.T) {
	gotool := goTool(t)
	cmd := exec.Command(gotool, "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list ./...: %s", stderr.String())
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Greater(t, len(lines), 5, "go list listed the module's packages")
	sawOtel := false
	for _, line := range lines {
		f := strings.Fields(line)
		pkg, deps := f[0], f[1:]
		uses := slices.ContainsFunc(deps, func(d string) bool { return strings.HasPrefix(d, "go.opentelemetry.io/") })
		if pkg == "github.com/memtrack/memtrack/otelmetric" {
			sawOtel = uses
			continue
		}
		assert.False(t, uses, "%s depends on OpenTelemetry; only package otelmetric may", pkg)
	}
	assert.True(t, sawOtel, "otelmetric was listed, with its OpenTelemetry dependencies")
}

// TestBuildTagsSelectBackends: a build tag selects a backend and nothing
// else. Every tag a Go file of the module is built under, beside the
// toolchain's own (GOOS, GOARCH, cgo, race, unix, ignore, ...), is the
// build tag of a Kind, and the README's table of build tags lists those
// and no other.
func TestBuildTagsSelectBackends(t *testing.T) {
	gotool := goTool(t)
	toolchain := map[string]bool{"cgo": true, "gc": true, "gccgo": true, "race": true, "msan": true, "asan": true, "unix": true, "ignore": true}
	out, err := exec.Command(gotool, "tool", "dist", "list").Output()
	require.NoError(t, err)
	for _, p := range strings.Fields(string(out)) {
		goos, goarch, _ := strings.Cut(p, "/")
		toolchain[goos], toolchain[goarch] = true, true
	}
	backends := map[string]bool{}
	for k := KindCPU + 1; k < numKinds; k++ {
		backends[k.buildTag()] = true
	}

	used := map[string][]string{} // tag: the files built under it
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "out") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(src)) {
			if !constraint.IsGoBuild(line) {
				continue
			}
			expr, err := constraint.Parse(strings.TrimSpace(line))
			require.NoError(t, err, path)
			expr.Eval(func(tag string) bool {
				if !toolchain[tag] && !strings.HasPrefix(tag, "go1.") && !strings.HasPrefix(tag, "goexperiment.") {
					used[tag] = append(used[tag], path)
				}
				return true
			})
		}
		return nil
	})
	require.NoError(t, err)
	for tag, files := range used {
		assert.True(t, backends[tag], "the build tag %q selects no backend (in %s)", tag, strings.Join(slices.Compact(files), ", "))
	}

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "\n## Build tags\n")
	require.True(t, ok, "the README has a section Build tags")
	table, _, _ = strings.Cut(table, "\n## ")
	var listed []string
	for line := range strings.Lines(table) {
		if tag, ok := strings.CutPrefix(line, "| `"); ok {
			tag, _, _ = strings.Cut(tag, "`")
			listed = append(listed, tag)
		}
	}
	slices.Sort(listed)
	tags := slices.Sorted(maps.Keys(used))
	assert.Equal(t, tags, listed, "the README's build tags")
}
