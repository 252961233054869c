package memtrack_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack/prom"
	"github.com/memtrack/memtrack/web"
)

// vocabularyRule is one word of docs/glossary.md that names one figure (or
// nothing): a name that uses the word is allowed only where it is listed.
type vocabularyRule struct {
	word    string   // lower case, as split from a name
	allowed []string // the names that may use it, as names() writes them
	meaning string   // what the glossary gives it, for the failure message
}

var vocabulary = []vocabularyRule{
	{"held", []string{
		"Stats.Held", "Stats.PeakHeld", "PoolUsage.Held", "Measurement.StartHeld", "Measurement.PeakHeld", "Measurement.EndHeld",
		"Measurement.PeakHeldIncrease", "PeakScope.PeakHeld", "metric memtrack_held_bytes", "metric memtrack_peak_held_bytes",
		"held", // package internal/held: the device-side figure itself, with the frees it keeps until their streams execute them
	}, "the device-side figure (Tracked plus stream-ordered frees not yet executed)"},
	{"reserved", []string{
		"PoolStats.PoolReserved", "PoolStats.PeakPoolReserved", "PoolUsage.PoolReserved",
		"cudadrv.PoolAttributes.PoolReserved", "cudadrv.PoolAttributes.PeakPoolReserved",
		"hipdrv.PoolAttributes.PoolReserved", "hipdrv.PoolAttributes.PeakPoolReserved",
		"fit.Before.PoolReserved", "fit.Result.PoolReserved", "fit.Result.PeakPoolReserved", // a prediction's pool, as the driver's attributes name it
		"Prediction.PoolReservedIncrease", "Prediction.GraphReservedIncrease", "FitCheck.PoolReservedIncrease", "FitCheck.GraphReservedIncrease",
		"metric memtrack_pool_reserved_bytes", "metric memtrack_peak_pool_reserved_bytes",
		"GraphStats.GraphReserved", "GraphStats.PeakGraphReserved", "Usage.GraphReserved", "Usage.PeakGraphReserved",
		"Measurement.StartGraphReserved", "Measurement.EndGraphReserved", "Budget.GraphReserved", "OutOfMemoryError.GraphReserved",
		"cudadrv.GraphAttributes.GraphReserved", "cudadrv.GraphAttributes.PeakGraphReserved",
		"hipdrv.GraphAttributes.GraphReserved", "hipdrv.GraphAttributes.PeakGraphReserved",
		"metric memtrack_graph_reserved_bytes", "metric memtrack_peak_graph_reserved_bytes", "web.Device.GraphReserved", "json graphReserved",
	}, "what the CUDA driver reserves of a device: for a memory pool (PoolReserved) or for CUDA graphs (GraphReserved)"},
	{"allocated", []string{"Device.MemoryAllocated", "Device.MaxMemoryAllocated"},
		"PyTorch's word, kept only in the methods that mirror torch.cuda (the figure is Tracked)"},
	{"current", []string{"tracker.Counter.Current"},
		"no figure: the current value of a figure is the figure (Tracked, Held, ...)"},
	{"active", nil, "nothing: the count of live buffers is Buffers"},
	{"live", nil, "nothing: the count of live buffers is Buffers, their bytes Tracked"},
	{"resident", []string{"Usage.NotResident", "Measurement.StartNotResident", "Measurement.EndNotResident", "OutOfMemoryError.NotResident",
		"hostmem.Mappings.NotResident", "hostmem.Resident",
		"hostmem.ResidentFiles"}, // the OS's figure of the process's resident pages of files, which a check on the CPU explains its difference by
		"the tracked bytes of the CPU's mapped buffers not resident yet, NotResident"},
	{"baseline", []string{"Device.Baseline"},
		"the Usage before the weights; a Measurement's first reading is Start"},
	{"process", []string{
		"ErrPerProcessUnavailable", "ProcessMemory", "ProcessMemory.PID", "ProcessMemory.Name", "ProcessMemory.Used",
		"Usage.PerProcess", "Usage.PerProcessErr", "Usage.ProcessUsed", "Usage.ProcessUntracked", "Usage.OtherProcessesUsed", "Usage.OtherProcesses",
		"Measurement.PerProcess", "Measurement.PerProcessErr", "Measurement.StartProcessUsed", "Measurement.EndProcessUsed",
		"Measurement.StartOtherProcessesUsed", "Measurement.EndOtherProcessesUsed", "Measurement.ProcessUntracked", "Measurement.OtherProcesses",
		"Budget.PerProcess", "Budget.PerProcessErr", "Budget.OtherProcessesUsed", "Budget.ProcessUsed",
		"Target.PerProcess", "Target.PerProcessErr", "Prediction.PerProcess", "Prediction.PerProcessErr",
		"OutOfMemoryError.PerProcess", "OutOfMemoryError.PerProcessErr", "OutOfMemoryError.ProcessUsed",
		"OutOfMemoryError.OtherProcessesUsed", "OutOfMemoryError.OtherProcesses",
		"metric memtrack_process_used_bytes", "metric memtrack_process_untracked_bytes", "metric memtrack_other_processes_used_bytes",
		"web.Device.PerProcess", "web.Device.ProcessUsed", "web.Device.ProcessUntracked", "web.Device.OtherProcessesUsed",
		"web.Device.OtherProcesses", "web.Device.PerProcessError", "web.Process", "web.Process.PID", "web.Process.Name", "web.Process.Used",
		"json perProcess", "json processUsed", "json processUntracked", "json otherProcessesUsed", "json otherProcesses", "json perProcessError",
		"hostmem.ProcessUsed", "hostmem.ErrNoProcessFigure", // the CPU's: the process's memory as the OS accounts it
		"Return.PerProcess", "Return.ProcessBefore", "Return.ProcessAfter", "Return.ProcessReturned", // a return check's figure of this process
		"nvml.Process", "nvml.Process.PID", "nvml.Process.Name", "nvml.Process.Used", "nvml.Process.UsedKnown", "nvml.Lib.Processes",
		"rocmsmi.Process", "rocmsmi.Process.PID", "rocmsmi.Process.Name", "rocmsmi.Process.Used", "rocmsmi.Process.UsedKnown",
	}, "the driver's per-process figures (NVML): ProcessUsed, ProcessUntracked, OtherProcessesUsed, OtherProcesses, PerProcess"},
	{"failed", []string{"Stats.FailedAllocs", "tracker.Stats.FailedAllocs", "metric memtrack_failed_allocs_total",
		"web.Device.FailedAllocs", "json failedAllocs", "HistoryFailed",
		"CategoryStats.FailedAllocs", "web.Category.FailedAllocs", "metric memtrack_category_failed_allocs_total"},
		"the count of refused allocations, FailedAllocs (and HistoryFailed, the history's action for one)"},
	{"rank", []string{"CommonBudget.LimitedByOtherRank"},
		"one process of an engine whose cache spans several (CommonBudget.Reduce)"},
	{"limiting", []string{"CommonBudget.Limiting"},
		"the index of the budget whose device limits a CommonBudget; the memory limit is Limit"},
	{"mark", markNames, markMeaning},
	{"marks", markNames, markMeaning},
}

// markNames may use the words mark and marks; so may web.Mark's fields.
var markNames = []string{"HistoryRecorder.Mark", "histring.Event.Mark", "HistoryMark", "HistoryAction.IsMark", "HistoryEvent.Mark", "MaxMarkName", "MaxMarkNames",
	"ErrTooManyMarkNames", "web.Mark", "web.MaxMarks", "web.History.Marks", "web.History.MarksLeftOut", "web.History.MarkEvents",
	"json marks", "json marksLeftOut", "json markEvents"}

const markMeaning = "a named instant or span of a history (HistoryRecorder.Mark, HistoryRecorder.BeginSpan); a refused allocation is a Refusal"

// allowedName reports whether name is one of allowed, or a field or
// method of a type that is.
func allowedName(allowed []string, name string) bool {
	return slices.ContainsFunc(allowed, func(a string) bool { return name == a || strings.HasPrefix(name, a+".") })
}

// peakLast: "peak" comes first in a figure's name (PeakTracked, not
// TrackedPeak); it may end a name only where it is the whole name or "at
// the peak" (pprof.Peak, SiteSnapshot.AtPeak).
// The generic tracker.Counter's reading is Peak, as its other is Current,
// and so is that of a peak scope on it (tracker.Scope); ResetPeak is a verb (the site recorder's too).
var peakLastAllowed = []string{"pprof.Peak", "SiteSnapshot.AtPeak", "json maxAtPeak", "web.History.MaxAtPeak",
	"tracker.Counter.Peak", "tracker.Scope.Peak", "tracker.Counter.ResetPeak", "tracker.Record.ResetPeak", "siterec.Recorder.ResetPeak"}

// violations returns, for each name that breaks the vocabulary, why.
func violations(names []string) []string {
	var bad []string
	for _, name := range names {
		words := splitWords(name)
		for _, r := range vocabulary {
			if slices.Contains(words, r.word) && !allowedName(r.allowed, name) {
				bad = append(bad, name+": "+strings.ToUpper(r.word[:1])+r.word[1:]+" means "+r.meaning+" (docs/glossary.md)")
			}
		}
		if n := len(words); n > 1 && words[n-1] == "peak" && !slices.Contains(peakLastAllowed, name) {
			bad = append(bad, name+": Peak is written first (PeakTracked, not TrackedPeak) (docs/glossary.md)")
		}
		if strings.HasPrefix(name, "metric ") {
			w := words[2:] // after "metric memtrack"
			if len(w) > 0 && w[0] == "category" {
				w = w[1:] // a category's figures are named after memtrack_category_
			}
			if i := slices.Index(w, "peak"); i > 0 {
				bad = append(bad, name+": peak comes first after memtrack_ (docs/glossary.md)")
			}
		}
	}
	return bad
}

// splitWords splits a name (Go, snake case or camel case, qualified or
// not) into its lower-case words.
func splitWords(name string) []string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	rs := []rune(name)
	for i, r := range rs {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
		case unicode.IsUpper(r) && len(cur) > 0 &&
			(unicode.IsLower(cur[len(cur)-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
	}
	flush()
	return words
}

func TestVocabularyRulesFail(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  bool
	}{
		{"Stats.HeldPeak", true},
		{"Budget.Held", true},
		{"Budget.Reserved", true},
		{"Buffer.Reserved", true},
		{"Stats.AllocatedBytes", true},
		{"Stats.Current", true},
		{"Stats.Active", true},
		{"SiteStats.Live", true},
		{"Measurement.BaselineTracked", true},
		{"tracker.ErrFreeExceedsHeld", true},
		{"metric memtrack_active_buffers", true},
		{"metric memtrack_allocated_bytes", true},
		{"metric memtrack_held_peak_bytes", true},
		{"metric memtrack_pool_reserved_peak_bytes", true},
		{"json current", true},
		{"json failed", true},
		{"Stats.PeakHeld", false},
		{"Stats.Tracked", false},
		{"PoolStats.PoolReserved", false},
		{"Usage.GraphReserved", false},
		{"Capture.Reserved", true},
		{"Capture.Need", false},
		{"Device.MaxMemoryAllocated", false},
		{"metric memtrack_peak_tracked_bytes", false},
		{"metric memtrack_category_peak_tracked_bytes", false},
		{"metric memtrack_category_tracked_peak_bytes", true},
		{"CategoryStats.FailedAllocs", false},
		{"json peakTracked", false},
		{"web.History.Refusals", false},
		{"web.Mark", false},
		{"web.History.RefusalMarks", true},
		{"trace.MarkRefusal", true},
		{"CommonBudget.LimitedByOtherRank", false},
		{"CommonBudget.RankBlocks", true},
		{"Budget.LimitingDevice", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.bad, len(violations([]string{tc.name})) > 0, "%v", violations([]string{tc.name}))
		})
	}
}

// TestVocabulary: no exported name, struct field, JSON key of the page or
// Prometheus metric in any package uses a word of docs/glossary.md for
// another meaning.
func TestVocabulary(t *testing.T) {
	if _, err := os.Stat("go.mod"); err != nil {
		// A test binary run away from its source (scripts/gpu-check.sh
		// copies it to a GPU machine) has no tree to read; go test runs it
		// in the module root.
		t.Skip("needs the module's source tree in the working directory")
	}
	glossary, err := os.ReadFile("docs/glossary.md")
	require.NoError(t, err)
	for _, r := range vocabulary {
		assert.Contains(t, strings.ToLower(string(glossary)), r.word, "the glossary says what %q means", r.word)
	}

	names := exportedNames(t)
	names = append(names, metricNames(t)...)
	names = append(names, jsonKeys(reflect.TypeFor[web.Page]())...)
	for _, want := range []string{"Stats.Tracked", "tracker.Stats.Tracked", "Device.MemoryAllocated",
		"PoolStats.PoolReserved", "metric memtrack_tracked_bytes", "json tracked", "Kind.UntrackAddr"} {
		require.Contains(t, names, want, "the scan sees every package")
	}
	assert.Empty(t, violations(names))
}

// exportedNames returns the exported names of every package of the module,
// whatever their build tags: "Name" at the root, "pkg.Name" elsewhere, and
// "Type.Field" or "Type.Method" for fields and methods.
func exportedNames(t *testing.T) []string {
	var names []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if base := e.Name(); path != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "examples") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if strings.HasPrefix(filepath.ToSlash(path), "cu/mirror") {
			return nil // package cu mirrors mumax's cu, whose names are CUDA's own
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		qual := ""
		if dir := filepath.ToSlash(filepath.Dir(path)); dir != "." {
			qual = f.Name.Name + "."
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names = append(names, qual+d.Name.Name)
				} else if recv := recvName(d.Recv.List[0].Type); ast.IsExported(recv) {
					names = append(names, qual+recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						names = append(names, qual+s.Name.Name)
						names = append(names, memberNames(qual+s.Name.Name+".", s.Type)...)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, qual+n.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	return names
}

func recvName(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

func memberNames(prefix string, x ast.Expr) []string {
	var names []string
	var fields *ast.FieldList
	switch x := x.(type) {
	case *ast.StructType:
		fields = x.Fields
	case *ast.InterfaceType:
		fields = x.Methods
	default:
		return nil
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			if n.IsExported() {
				names = append(names, prefix+n.Name)
			}
		}
	}
	return names
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// metricNames returns the names of every metric package prom describes.
func metricNames(t *testing.T) []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		prom.NewCollector().Describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		names = append(names, "metric "+m[1])
	}
	return names
}

// jsonKeys returns the JSON keys of a type and of the types in it.
func jsonKeys(typ reflect.Type) []string {
	var keys []string
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			if key, _, _ := strings.Cut(f.Tag.Get("json"), ","); key != "" && key != "-" {
				keys = append(keys, "json "+key)
			}
			walk(f.Type)
		}
	}
	walk(typ)
	return keys
}
