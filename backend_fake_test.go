package memtrack

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/memtrack/memtrack/tracker"
)

// fakeBackend is an in-memory backend for testing the accounting: devices
// with a capacity, and failures injected on demand.
type fakeBackend struct {
	mu        sync.Mutex
	n         int     // devices
	capacity  int64   // bytes per device
	used      []int64 // bytes allocated per device
	live      int     // allocations not yet freed
	calls     int     // alloc calls received
	initErr   error   // returned by devices
	allocErrs []error // returned by the next alloc calls, in order
	freeErrs  []error // returned by the next free calls, in order
	onAlloc   func()  // called by every alloc before it allocates, if set
}

func newFakeBackend(devices int, capacity int64) *fakeBackend {
	return &fakeBackend{n: devices, capacity: capacity, used: make([]int64, devices)}
}

func (f *fakeBackend) devices() (int, error) {
	if f.initErr != nil {
		return 0, f.initErr
	}
	return f.n, nil
}

func (f *fakeBackend) alloc(ordinal int, size int64, m *memory) error {
	if f.onAlloc != nil {
		f.onAlloc()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(f.allocErrs) > 0 {
		err := f.allocErrs[0]
		f.allocErrs = f.allocErrs[1:]
		return err
	}
	if size > f.capacity-f.used[ordinal] {
		return &callError{op: "alloc", oom: true, code: 2, err: errors.New("fake device full")}
	}
	f.used[ordinal] += size
	f.live++
	*m = memory{ptr: uintptr(0x1000 * f.calls), reserved: size}
	return nil
}

func (f *fakeBackend) free(ordinal int, _ int64, m *memory) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.freeErrs) > 0 {
		err := f.freeErrs[0]
		f.freeErrs = f.freeErrs[1:]
		return err
	}
	f.used[ordinal] -= m.reserved
	f.live--
	return nil
}

func (f *fakeBackend) memInfo(ordinal int) (free, total int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The driver sees a context of 1000 bytes beside the allocations.
	return f.capacity - f.used[ordinal] - 1000, f.capacity, nil
}

// state returns the backend's figures under its lock.
func (f *fakeBackend) state(ordinal int) (used int64, live, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used[ordinal], f.live, f.calls
}

// useBackend makes b the backend of kind k for the rest of the test, with
// fresh records: it builds the kind's table over b as the package builds
// it over the real backend (newDeviceTable), and puts the table it replaced
// back at the end.
//
// The package relies on a table staying for the life of the process:
// buffers, handles and categories use the table that made them without
// checking that it is still the kind's. A test keeps that true by leaving
// nothing live across a change of table, which useBackend checks at both
// ends: the table it replaces holds nothing when the test begins, and the
// test's own table holds nothing when it ends.
func useBackend(t testing.TB, k Kind, b backend) {
	t.Helper()
	tb := &tables[k]
	if held := liveBytes(tb.p.Load()); held != "" {
		t.Fatalf("useBackend: the %v table to be replaced holds memory (%s); free it before the test replaces the table", k, held)
	}
	tb.mu.Lock()
	old := tb.p.Load()
	s := newDeviceTable(k, b)
	tb.p.Store(s)
	tb.mu.Unlock()
	t.Cleanup(func() {
		if held := liveBytes(s); held != "" {
			t.Errorf("useBackend: the test's %v table still holds memory at its end (%s); free it in the test", k, held)
		}
		leaks.mu.Lock()
		delete(leaks.bytes, s)
		leaks.mu.Unlock()
		tb.mu.Lock()
		tb.p.Store(old)
		tb.mu.Unlock()
	})
}

// leaks holds, per device table and ordinal, the bytes that tests leaked
// on purpose (leakFrom, leakTrackedFrom): memory nothing can reach, and so
// nothing can free through another table.
var leaks struct {
	mu    sync.Mutex
	bytes map[*deviceTable]map[int]int64
}

// leftOnPurpose notes that a test leaked size bytes on d.
func leftOnPurpose(d Device, size int64) {
	s := tableOf(d.kind)
	leaks.mu.Lock()
	defer leaks.mu.Unlock()
	if leaks.bytes == nil {
		leaks.bytes = map[*deviceTable]map[int]int64{}
	}
	if leaks.bytes[s] == nil {
		leaks.bytes[s] = map[int]int64{}
	}
	leaks.bytes[s][d.ordinal] += size
}

// liveBytes describes what the records of s hold beyond what tests leaked
// on purpose ("cuda:0 64 B"), or returns "" if they hold nothing else.
func liveBytes(s *deviceTable) string {
	if s == nil {
		return ""
	}
	leaks.mu.Lock()
	leaked := leaks.bytes[s]
	leaks.mu.Unlock()
	var held []string
	s.records.Range(func(i int, r *tracker.Record) bool {
		if n := r.Tracked(); n > leaked[i] {
			held = append(held, fmt.Sprintf("%v %d B", Device{kind: s.kind, ordinal: i}, n))
		}
		return true
	})
	return strings.Join(held, ", ")
}

// fakeCUDA installs a fake CUDA backend and returns it with its devices.
func fakeCUDA(t testing.TB, n int, capacity int64) (*fakeBackend, []Device) {
	t.Helper()
	f := newFakeBackend(n, capacity)
	useBackend(t, KindCUDA, f)
	ds := make([]Device, n)
	for i := range ds {
		d, err := CUDA(i)
		if err != nil {
			t.Fatal(err)
		}
		ds[i] = d
	}
	return f, ds
}

var errFakeDriver = errors.New("fake driver failure")
