package memtrack

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layers are the layers of the package's files (without tests), the
// lowest first (docs/architecture.md): a file may use the package-level
// names, methods and fields of its own layer and of the layers below, and
// none of a layer above. Every file of every build is in one.
var layers = []struct {
	name  string
	files []string // names, or patterns of filepath.Match
}{
	{"values", []string{"device.go", "errors.go", "values.go"}},
	{"seam", []string{"backend.go"}},
	{"adapters", []string{"backend_*.go", "metal_bridge_*.go"}},
	{"core", []string{"device_table.go", "request.go", "ledger.go", "hooks.go", "usage.go", "oom.go", "release.go", "buffer.go", "track.go", "alloc.go", "space_figures.go"}},
	{"features and API", []string{"doc.go", "category.go", "sites.go", "history.go", "leak.go", "graphs.go", "pool.go", "stream.go", "scope.go", "stats.go", "measure.go", "budget.go", "common_budget.go", "reservation.go", "return_check.go", "follow.go", "measurement_file.go", "fit.go", "fit_check.go", "claims.go"}},
}

// layerOf returns the index of file's layer, or -1.
func layerOf(file string) int {
	for i, l := range layers {
		for _, p := range l.files {
			if ok, _ := filepath.Match(p, file); ok {
				return i
			}
		}
	}
	return -1
}

// TestLayers type-checks the package in each build and fails for a file
// that no layer holds, and for each use of a name that a file of a higher
// layer defines: a link back up. The core names no feature, and the
// backends' adapters name nothing above the seam.
func TestLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package and its dependencies from source: not with -short")
	}
	if raceDetector {
		// The check reads the source and runs none of the package's code,
		// and the race detector slows the type checker tenfold: the runs
		// without -race (scripts/test-cuda.sh's) check it.
		t.Skip("a static check: run without -race")
	}
	if _, err := os.Stat("layers_test.go"); err != nil {
		t.Skip("not run in the package's source directory")
	}
	for _, tags := range [][]string{nil, {"cuda"}, {"metal"}, {"rocm"}} {
		t.Run(strings.Join(append([]string{"tags"}, tags...), " "), func(t *testing.T) {
			goos := "linux"
			if slices.Contains(tags, "metal") {
				goos = "darwin"
			}
			links := fileLinks(t, goos, tags)
			for from, tos := range links {
				lf := layerOf(from)
				if !assert.GreaterOrEqual(t, lf, 0, "%s is in no layer: put it in one (layers_test.go, docs/architecture.md)", from) {
					continue
				}
				for to, names := range tos {
					lt := layerOf(to)
					if !assert.GreaterOrEqual(t, lt, 0, "%s is in no layer", to) {
						continue
					}
					assert.LessOrEqual(t, lt, lf, "%s (%s) uses %s of %s (%s), a layer above", from, layers[lf].name, strings.Join(names, ", "), to, layers[lt].name)
				}
			}
		})
	}
}

// fileLinks type-checks the package's files of the build for goos with
// tags, and returns, for each file, the files whose package-level names,
// methods and fields it uses, with those names.
func fileLinks(t *testing.T, goos string, tags []string) map[string]map[string][]string {
	t.Helper()
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.BuildTags, ctx.CgoEnabled = goos, "arm64", tags, true
	ents, err := os.ReadDir(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		if ok, err := ctx.MatchFile(".", n); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), FakeImportC: true, Error: func(error) {}}
	pkg, _ := conf.Check("memtrack", fset, files, info) // the fake "C" leaves errors in cgo files: the uses are what is read
	links := map[string]map[string][]string{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg {
			continue
		}
		switch o := obj.(type) {
		case *types.Var:
			if !o.IsField() && o.Parent() != pkg.Scope() {
				continue // a local variable
			}
		case *types.TypeName, *types.Const:
			if o.Parent() != pkg.Scope() {
				continue
			}
		case *types.Func:
		default:
			continue
		}
		from, to := fset.Position(id.Pos()).Filename, fset.Position(obj.Pos()).Filename
		if from == to || !strings.HasSuffix(to, ".go") {
			continue
		}
		from, to = filepath.Base(from), filepath.Base(to)
		if links[from] == nil {
			links[from] = map[string][]string{}
		}
		if !slices.Contains(links[from][to], obj.Name()) {
			links[from][to] = append(links[from][to], obj.Name())
		}
	}
	require.NotEmpty(t, links)
	return links
}
