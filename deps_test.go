package memtrack

import (
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
	"go.uber.org/atomic",
	"github.com/memtrack/memtrack/internal/cudadrv", // under -tags cuda: the driver, loaded at run time
	"github.com/memtrack/memtrack/internal/nvml",    // under -tags cuda: NVML, the per-process figures, loaded at run time
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
		{"metal on macOS", []string{"GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=1"}, "metal"},
		{"nosites", nil, "memtrack_nosites"},
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
				require.Contains(t, deps, "go.uber.org/atomic", "the listing holds the non-standard dependencies")
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
