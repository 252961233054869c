package memtrack

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/atomic"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refuse makes one refused allocation of d (over its memory limit of 1
// byte, set for the call) and returns the error.
func refuse(t *testing.T, d Device) *OutOfMemoryError {
	t.Helper()
	lim := d.MemoryLimit()
	require.NoError(t, d.SetMemoryLimit(1))
	defer func() { require.NoError(t, d.SetMemoryLimit(lim)) }()
	_, err := d.Alloc(64)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	return oom
}

func TestOutOfMemoryReport(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	held := mustAlloc(t, d, 4000)
	defer held.Free()
	_, err := d.Alloc(1 << 20)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	_, live, _ := f.state(0)
	assert.Equal(t, 1, live, "the refused allocation holds nothing")

	line := err.Error()
	assert.NotContains(t, line, "\n", "Error is one line")
	assert.Equal(t, line, fmt.Sprintf("%v", err))
	assert.Equal(t, line, fmt.Sprintf("%s", err))
	report := fmt.Sprintf("%+v", err)
	assert.Equal(t, oom.Report(), report)
	for _, want := range []string{
		"out of memory on cuda:0: tried to allocate 1.00 MiB (1048576 B)",
		"refused by:     fake device full (code 2)",
		"device:         1.00 MiB (1048576 B) total, 1019 KiB (1043576 B) free",
		"this process:   3.91 KiB (4000 B) tracked in 1 live buffer, peak 3.91 KiB (4000 B)",
		"not tracked:    1000 B in use on the device",
		"try: record allocation sites (Device.Sites().Enable)",
	} {
		assert.Contains(t, report, want)
	}
	// Tracked bytes not resident yet (the CPU's pages never written) are
	// named apart; Untracked is never negative.
	less := *oom
	less.NotResident = 3000
	assert.Contains(t, less.Report(), "not resident:   2.93 KiB (3000 B) of the tracked bytes not written yet")
	less.Untracked = -3000 // as no refusal writes it
	assert.Contains(t, less.Report(), "not tracked:    0 B in use")

	// An error without a report (as Budget makes) reports its one line.
	bare := &OutOfMemoryError{Device: d, Requested: 10, Reason: "budget"}
	assert.Equal(t, bare.Error(), fmt.Sprintf("%+v", bare))

	// Wrapped, the report is still reachable as a value.
	wrapped := fmt.Errorf("loading the model: %w", err)
	require.ErrorAs(t, wrapped, &oom)
	assert.Equal(t, int64(1000), oom.Untracked)
}

// TestOutOfMemoryReportSites: where sites are recorded, the report names
// the largest holders.
func TestOutOfMemoryReportSites(t *testing.T) {
	d := recording(t, 8)
	a := allocOK(t)(allocFromA(d, 300<<10))
	defer a.Free()
	b := allocOK(t)(allocFromB(d, 100<<10))
	defer b.Free()
	oom := refuse(t, d)
	require.True(t, oom.SitesRecorded)
	require.Len(t, oom.Sites, 2)
	assert.Equal(t, "github.com/memtrack/memtrack.allocFromA", frameOf(oom.Sites[0].Stack[0]))
	report := fmt.Sprintf("%+v", oom)
	assert.Contains(t, report, "300 KiB (307200 B) in 1 buffer: github.com/memtrack/memtrack.allocFromA (sites_test.go:")
	assert.Less(t, strings.Index(report, "allocFromA"), strings.Index(report, "allocFromB"), "largest first")
	assert.NotContains(t, report, "record allocation sites")
}

// TestOutOfMemoryReportWithoutDeviceFigures: a driver that cannot report
// its figures leaves them out of the report and says why.
func TestOutOfMemoryReportWithoutDeviceFigures(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	useBackend(t, KindCUDA, noMemInfo{newFakeBackend(1, 1<<20)})
	d := ds[0]
	oom := refuse(t, d)
	assert.Zero(t, oom.Total)
	require.Error(t, oom.MemInfoErr)
	assert.Contains(t, fmt.Sprintf("%+v", oom), "device:         figures unavailable: ")
}

type noMemInfo struct{ *fakeBackend }

func (noMemInfo) memInfo(int) (int64, int64, error) {
	return 0, 0, &BackendError{Op: "meminfo", Err: errFakeDriver}
}

func TestOnOutOfMemory(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	var calls []string
	first, err := d.OnOutOfMemory(func(e *OutOfMemoryError) {
		calls = append(calls, fmt.Sprintf("first %d", e.Requested))
		e.Requested = -1 // a copy: the caller's error keeps its figure
	})
	require.NoError(t, err)
	fn := func(e *OutOfMemoryError) { calls = append(calls, "twice") }
	a, err := d.OnOutOfMemory(fn)
	require.NoError(t, err)
	b, err := d.OnOutOfMemory(fn)
	require.NoError(t, err)

	oom := refuse(t, d)
	assert.Equal(t, int64(64), oom.Requested)
	assert.Equal(t, []string{"first 64", "twice", "twice"}, calls, "in registration order, a function registered twice runs twice")

	calls = nil
	require.NoError(t, a.Remove())
	assert.ErrorIs(t, a.Remove(), ErrInvalidArgument, "removed twice")
	refuse(t, d)
	assert.Equal(t, []string{"first 64", "twice"}, calls, "each registration is removed by its own Remove")

	calls = nil
	require.NoError(t, first.Remove())
	require.NoError(t, b.Remove())
	refuse(t, d)
	assert.Empty(t, calls)
	assert.Nil(t, d.observers().list.Load(), "the last removal leaves no list to load")

	_, err = d.OnOutOfMemory(nil)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	var nilObs *OutOfMemoryObserver
	assert.ErrorIs(t, nilObs.Remove(), ErrInvalidArgument)
	_, err = Device{kind: KindCUDA, ordinal: 7}.OnOutOfMemory(fn)
	assert.ErrorIs(t, err, ErrInvalidOrdinal)
}

// TestOnOutOfMemoryOnlyRefusals: successful allocations, frees, and
// failures of the backend that are not a lack of memory run no observer.
func TestOnOutOfMemoryOnlyRefusals(t *testing.T) {
	f, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	n := 0
	o, err := d.OnOutOfMemory(func(*OutOfMemoryError) { n++ })
	require.NoError(t, err)
	defer o.Remove()
	b := mustAlloc(t, d, 100)
	require.NoError(t, b.Free())
	f.allocErrs = []error{&BackendError{Op: "alloc", Err: errFakeDriver}}
	_, err = d.Alloc(100)
	require.Error(t, err)
	assert.Zero(t, n)
	_, err = d.Alloc(2 << 20) // the fake device's capacity
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, 1, n)
}

// TestOnOutOfMemoryPanic: a panicking observer is logged; the allocation
// returns its error, the figures are as without the observer, and the next
// observer runs.
func TestOnOutOfMemoryPanic(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	var log bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	defer slog.SetDefault(old)

	p, err := d.OnOutOfMemory(func(*OutOfMemoryError) { panic("observer bug") })
	require.NoError(t, err)
	defer p.Remove()
	ran := false
	o, err := d.OnOutOfMemory(func(*OutOfMemoryError) { ran = true })
	require.NoError(t, err)
	defer o.Remove()

	held := mustAlloc(t, d, 100)
	defer held.Free()
	before := d.MemoryStats()
	oom := refuse(t, d)
	assert.Equal(t, int64(64), oom.Requested)
	assert.True(t, ran, "the observer after the panicking one ran")
	before.FailedAllocs++
	before.Limit = 0
	assert.Equal(t, before, d.MemoryStats())
	assert.Contains(t, log.String(), "observer bug")
	assert.Contains(t, log.String(), "device=cuda:0")
}

// TestOnOutOfMemoryNoRecursion: an observer whose own allocation is
// refused does not run again, and neither does one for a refusal of
// another goroutine on the device while it runs; both allocations return
// their errors.
func TestOnOutOfMemoryNoRecursion(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	require.NoError(t, d.SetMemoryLimit(1))
	defer d.SetMemoryLimit(0)
	runs := 0
	var inner, other error
	o, err := d.OnOutOfMemory(func(*OutOfMemoryError) {
		runs++
		_, inner = d.Alloc(32) // refused too
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, other = d.Alloc(16)
		}()
		<-done
	})
	require.NoError(t, err)
	defer o.Remove()
	_, err = d.Alloc(64)
	require.ErrorIs(t, err, ErrOutOfMemory)
	assert.Equal(t, 1, runs)
	assert.ErrorIs(t, inner, ErrOutOfMemory)
	assert.ErrorIs(t, other, ErrOutOfMemory)
	assert.Equal(t, int64(3), d.MemoryStats().FailedAllocs)

	// Once the observer has returned, the next refusal runs it again.
	_, err = d.Alloc(64)
	require.Error(t, err)
	assert.Equal(t, 2, runs)
}

// TestOnOutOfMemorySlowObserver: while an observer of one device blocks,
// a refusal on another device runs that device's observer and returns.
func TestOnOutOfMemorySlowObserver(t *testing.T) {
	_, ds := fakeCUDA(t, 2, 1<<20)
	entered, release := make(chan struct{}), make(chan struct{})
	slow, err := ds[0].OnOutOfMemory(func(*OutOfMemoryError) {
		close(entered)
		<-release
	})
	require.NoError(t, err)
	defer slow.Remove()
	var fast sync.WaitGroup
	fast.Add(1)
	o, err := ds[1].OnOutOfMemory(func(*OutOfMemoryError) { fast.Done() })
	require.NoError(t, err)
	defer o.Remove()

	done := make(chan error)
	go func() {
		_, err := ds[0].Alloc(2 << 20)
		done <- err
	}()
	<-entered
	_, err = ds[1].Alloc(2 << 20) // returns while the other observer blocks
	require.ErrorIs(t, err, ErrOutOfMemory)
	fast.Wait()
	close(release)
	assert.ErrorIs(t, <-done, ErrOutOfMemory)
}

// TestOnOutOfMemoryRemoveWhileRunning: an observer may remove itself, and
// Remove from another goroutine does not wait for a run under way.
func TestOnOutOfMemoryRemoveWhileRunning(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	var self *OutOfMemoryObserver
	runs := 0
	var removeErr error
	self, err := d.OnOutOfMemory(func(*OutOfMemoryError) {
		runs++
		removeErr = self.Remove()
	})
	require.NoError(t, err)
	refuse(t, d)
	refuse(t, d)
	assert.Equal(t, 1, runs)
	require.NoError(t, removeErr)

	entered, release := make(chan struct{}), make(chan struct{})
	o, err := d.OnOutOfMemory(func(*OutOfMemoryError) {
		close(entered)
		<-release
	})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.Alloc(2 << 20)
	}()
	<-entered
	require.NoError(t, o.Remove(), "Remove returns while the observer runs")
	close(release)
	<-done
	refuse(t, d) // would block on the closed entered channel's second close if it ran
}

// TestOnOutOfMemoryConcurrent: refusals on several goroutines while
// observers are registered and removed: every refusal is counted once, no
// observer runs more often than there are refusals, and -race finds
// nothing.
func TestOnOutOfMemoryConcurrent(t *testing.T) {
	_, ds := fakeCUDA(t, 1, 1<<20)
	d := ds[0]
	require.NoError(t, d.SetMemoryLimit(1))
	const workers, each = 4, 200
	var calls sync.Map // observer number -> its calls
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			n := new(atomic.Int64)
			calls.Store(i, n)
			o, err := d.OnOutOfMemory(func(*OutOfMemoryError) { n.Add(1) })
			if !assert.NoError(t, err) {
				return
			}
			assert.NoError(t, o.Remove())
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := d.Alloc(64)
				assert.ErrorIs(t, err, ErrOutOfMemory)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-churned
	assert.Equal(t, int64(workers*each), d.MemoryStats().FailedAllocs)
	calls.Range(func(_, v any) bool {
		assert.LessOrEqual(t, v.(*atomic.Int64).Load(), int64(workers*each))
		return true
	})
}

// TestOnOutOfMemoryAfterRelease: where the record refuses memory the
// backend already gave (past the tracker's capacity), the memory goes back
// before the report reads the device and the observer runs.
func TestOnOutOfMemoryAfterRelease(t *testing.T) {
	f, ds := fakeCUDA(t, 1, math.MaxInt64)
	d := ds[0]
	held := mustAlloc(t, d, 1000)
	defer held.Free()
	var usedSeen int64 = -1
	o, err := d.OnOutOfMemory(func(*OutOfMemoryError) { usedSeen, _, _ = f.state(0) })
	require.NoError(t, err)
	defer o.Remove()
	_, err = d.Alloc(tracker.MaxBytes)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Contains(t, oom.Reason, "capacity")
	assert.Equal(t, int64(1000), usedSeen, "the observer ran while the refused memory was still held")
	assert.Equal(t, int64(math.MaxInt64)-2000, oom.Free, "the report read the device before the memory went back")
}

// TestOnOutOfMemoryObserverEditsSites: an observer that edits the sites of
// its error (their figures, their stacks, the slice) changes nothing the
// caller sees: it receives a copy, down to the stacks.
func TestOnOutOfMemoryObserverEditsSites(t *testing.T) {
	d := recording(t, 8)
	a := allocOK(t)(allocFromA(d, 300<<10))
	defer a.Free()
	obs, err := d.OnOutOfMemory(func(e *OutOfMemoryError) {
		for i := range e.Sites {
			e.Sites[i].Bytes, e.Sites[i].Buffers, e.Sites[i].Category = -1, -1, "edited"
			for j := range e.Sites[i].Stack {
				e.Sites[i].Stack[j] = 0
			}
		}
		e.Sites = append(e.Sites[:0], Site{Bytes: -2})
	})
	require.NoError(t, err)
	defer obs.Remove()
	oom := refuse(t, d)
	require.Len(t, oom.Sites, 1)
	assert.Equal(t, int64(300<<10), oom.Sites[0].Bytes)
	assert.Equal(t, int64(1), oom.Sites[0].Buffers)
	assert.Equal(t, "", oom.Sites[0].Category)
	require.NotEmpty(t, oom.Sites[0].Stack)
	assert.Equal(t, "github.com/memtrack/memtrack.allocFromA", frameOf(oom.Sites[0].Stack[0]))
}

// TestOnOutOfMemoryObserverGetsADeepCopy: an observer that edits
// everything it can reach of its error (every figure, every element of its
// slices, every error down their chains) changes nothing of the caller's
// error or its report. The walk is by reflection over OutOfMemoryError, and
// the test fails where a field that holds a reference (a slice, a map, a
// pointer, an interface) is given to the observer by no case, so that a
// field added later is covered or the test says it is not.
func TestOnOutOfMemoryObserverGetsADeepCopy(t *testing.T) {
	lost := func(op string) error {
		return &BackendError{Op: op, Code: 999, Name: "CUDA_ERROR_UNKNOWN", Err: fmt.Errorf("%w: unknown error", ErrDeviceLost)}
	}
	cases := []struct {
		name string
		b    reportBackend
	}{
		{"figures", reportBackend{procs: []ProcessMemory{{PID: os.Getpid(), Name: "self", Used: 1 << 20}, {PID: 999999, Name: "/usr/bin/python3", Used: 2 << 20}}}},
		{"errors", reportBackend{memInfoErr: lost("meminfo"), procErr: lost("info")}},
	}
	given := map[string]bool{} // the reference fields some case gave the observer
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.b.fakeBackend = newFakeBackend(1, 1<<30)
			useBackend(t, KindCUDA, tc.b)
			d, err := CUDA(0)
			require.NoError(t, err)
			require.NoError(t, d.Sites().SetRate(1))
			require.NoError(t, d.Sites().Enable(8))
			weights, err := d.Category(CategoryWeights)
			require.NoError(t, err)
			held := allocOK(t)(weights.Alloc(4096))
			defer held.Free()

			var before, beforeReport string
			first, err := d.OnOutOfMemory(func(e *OutOfMemoryError) { before, beforeReport = dumpValue(reflect.ValueOf(e)), e.Report() })
			require.NoError(t, err)
			defer first.Remove()
			edited := 0
			second, err := d.OnOutOfMemory(func(e *OutOfMemoryError) { edited = poison(reflect.ValueOf(e)) })
			require.NoError(t, err)
			defer second.Remove()
			var after string
			third, err := d.OnOutOfMemory(func(e *OutOfMemoryError) { after = dumpValue(reflect.ValueOf(e)) })
			require.NoError(t, err)
			defer third.Remove()

			oom := refuse(t, d)
			require.NotEmpty(t, before, "the first observer ran")
			require.Positive(t, edited, "the second observer edited its error")
			assert.Equal(t, before, dumpValue(reflect.ValueOf(oom)), "the caller's error, as the observers were given it")
			assert.Equal(t, before, after, "the next observer's copy, as the first was given it")
			assert.Equal(t, beforeReport, oom.Report())
			assert.NotContains(t, fmt.Sprintf("%+v", oom), "edited")

			v := reflect.ValueOf(oom).Elem()
			for i := range v.NumField() {
				if f := v.Field(i); isReference(f.Kind()) && !f.IsZero() {
					given[v.Type().Field(i).Name] = true
				}
			}
		})
	}
	for f := range reflect.TypeFor[OutOfMemoryError]().Fields() {
		if isReference(f.Type.Kind()) {
			assert.True(t, given[f.Name], "no case gives the observer an OutOfMemoryError.%s that is not nil: add one", f.Name)
		}
	}
}

func isReference(k reflect.Kind) bool {
	switch k {
	case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Func, reflect.Chan:
		return true
	}
	return false
}

// dumpValue writes everything reachable from v: every field, exported or
// not, through pointers, slices, maps and interfaces.
func dumpValue(v reflect.Value) string {
	var b strings.Builder
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				b.WriteString("nil")
				return
			}
			if seen[v.Pointer()] {
				b.WriteString("<seen>")
				return
			}
			seen[v.Pointer()] = true
			b.WriteString("&")
			walk(v.Elem())
		case reflect.Interface:
			if v.IsNil() {
				b.WriteString("nil")
				return
			}
			fmt.Fprintf(&b, "(%v)", v.Elem().Type())
			walk(v.Elem())
		case reflect.Struct:
			b.WriteString("{")
			for i := range v.NumField() {
				fmt.Fprintf(&b, "%s:", v.Type().Field(i).Name)
				walk(v.Field(i))
				b.WriteString(" ")
			}
			b.WriteString("}")
		case reflect.Slice, reflect.Array:
			b.WriteString("[")
			for i := range v.Len() {
				walk(v.Index(i))
				b.WriteString(" ")
			}
			b.WriteString("]")
		case reflect.Map:
			keys := v.MapKeys()
			slices.SortFunc(keys, func(a, c reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(c)) })
			b.WriteString("map[")
			for _, k := range keys {
				walk(k)
				b.WriteString(":")
				walk(v.MapIndex(k))
				b.WriteString(" ")
			}
			b.WriteString("]")
		case reflect.String:
			fmt.Fprintf(&b, "%q", v.String())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			fmt.Fprint(&b, v.Int())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			fmt.Fprint(&b, v.Uint())
		case reflect.Bool:
			fmt.Fprint(&b, v.Bool())
		case reflect.Float32, reflect.Float64:
			fmt.Fprint(&b, v.Float())
		default:
			fmt.Fprintf(&b, "<%v>", v.Kind())
		}
	}
	walk(v)
	return b.String()
}

// poison edits everything an observer can reach from v without package
// unsafe: every exported field, every element of a slice or map, through
// pointers and interfaces, and every error down its chain (errors.As
// reaches them); it returns how many values it changed.
func poison(v reflect.Value) int {
	seen := map[uintptr]bool{}
	n := 0
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			walk(v.Elem())
		case reflect.Interface:
			if v.IsNil() {
				return
			}
			if err, ok := v.Interface().(error); ok {
				eachInChain(err, func(e error) { walk(reflect.ValueOf(e)) })
				return
			}
			walk(v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				e := reflect.New(v.Type().Elem()).Elem()
				e.Set(v.MapIndex(k))
				walk(e)
				v.SetMapIndex(k, e)
			}
		case reflect.String:
			if v.CanSet() {
				v.SetString("edited by an observer")
				n++
			}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if v.CanSet() {
				v.SetInt(-1)
				n++
			}
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			if v.CanSet() {
				v.SetUint(1)
				n++
			}
		case reflect.Bool:
			if v.CanSet() {
				v.SetBool(!v.Bool())
				n++
			}
		case reflect.Float32, reflect.Float64:
			if v.CanSet() {
				v.SetFloat(-1)
				n++
			}
		}
	}
	walk(v)
	return n
}

// eachInChain calls f on err and on every error it wraps, as errors.As
// visits them.
func eachInChain(err error, f func(error)) {
	if err == nil {
		return
	}
	f(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		eachInChain(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			eachInChain(e, f)
		}
	}
}
