package memtest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeTB is a test that VerifyNone checks, inside a real one: it records
// what VerifyNone reports and keeps the cleanups for the test to run.
type fakeTB struct {
	testing.TB // the real test, for Setenv (which refuses a parallel one)
	name       string
	errors     []string
	fatals     []string
	cleanups   []func()
}

func newFakeTB(t *testing.T, name string) *fakeTB { return &fakeTB{TB: t, name: name} }

func (f *fakeTB) Name() string       { return f.name }
func (f *fakeTB) Helper()            {}
func (f *fakeTB) Cleanup(fn func())  { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Error(args ...any)  { f.errors = append(f.errors, fmt.Sprint(args...)) }
func (f *fakeTB) Fatal(args ...any)  { f.fatals = append(f.fatals, fmt.Sprint(args...)) }
func (f *fakeTB) Setenv(k, v string) { f.TB.Setenv(k, v) }
func (f *fakeTB) end()               { runCleanups(f.cleanups); f.cleanups = nil }
func runCleanups(fns []func()) {
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// holdBuffer allocates on the CPU from a frame of its own: the site the
// tests expect in reports.
//
//go:noinline
func holdBuffer(t testing.TB, size int64) *memtrack.Buffer {
	b, err := memtrack.CPU().Alloc(size)
	require.NoError(t, err)
	return b
}

//go:noinline
func holdOtherBuffer(t testing.TB, size int64) *memtrack.Buffer {
	b, err := memtrack.CPU().Alloc(size)
	require.NoError(t, err)
	return b
}

var cpuOnly = Devices(memtrack.CPU())

func TestVerifyNoneReportsALiveBufferWithItsSite(t *testing.T) {
	before := holdBuffer(t, 7) // not the test's
	f := newFakeTB(t, t.Name())
	VerifyNone(f, cpuOnly)
	assert.True(t, memtrack.CPU().Sites().Stats().Enabled, "sites on for the test")
	kept := holdBuffer(t, 4096)
	freed := holdBuffer(t, 100)
	require.NoError(t, freed.Free())
	f.end()
	require.Len(t, f.errors, 1)
	msg := f.errors[0]
	assert.True(t, strings.HasPrefix(msg, "memtest: 1 buffer (4096 bytes) allocated during the test and not freed:\n\t4096 bytes on cpu, buffer allocated at github.com/memtrack/memtrack/memtest.holdBuffer (verify_test.go:"), msg)
	assert.Contains(t, msg, "memtest.TestVerifyNoneReportsALiveBufferWithItsSite (verify_test.go:", "the stack below")
	assert.False(t, memtrack.CPU().Sites().Stats().Enabled, "sites off again")
	require.NoError(t, kept.Free())
	require.NoError(t, before.Free())
}

func TestVerifyNonePassesWhenAllIsFreed(t *testing.T) {
	f := newFakeTB(t, t.Name())
	VerifyNone(f, cpuOnly)
	b := holdBuffer(t, 10)
	f.Cleanup(func() { assert.NoError(t, b.Free()) }) // a later cleanup frees it first
	f.end()
	assert.Empty(t, f.errors)
	assert.Empty(t, f.fatals)
}

func TestVerifyNoneIgnores(t *testing.T) {
	f := newFakeTB(t, t.Name())
	VerifyNone(f, cpuOnly,
		IgnoreFunction("github.com/memtrack/memtrack/memtest.holdOtherBuffer"),
		IgnoreIf(func(l memtrack.Leak) bool { return l.Size == 3 }))
	a := holdOtherBuffer(t, 1) // a known holder
	b := holdBuffer(t, 3)      // ignored by size
	c := holdBuffer(t, 5)
	f.end()
	require.Len(t, f.errors, 1)
	assert.Contains(t, f.errors[0], "memtest: 1 buffer (5 bytes)")
	for _, x := range []*memtrack.Buffer{a, b, c} {
		require.NoError(t, x.Free())
	}
}

// TestVerifyNoneTwiceInOneTest: the second call does nothing, and the
// test is checked once.
func TestVerifyNoneTwiceInOneTest(t *testing.T) {
	f := newFakeTB(t, t.Name())
	VerifyNone(f, cpuOnly)
	VerifyNone(f, cpuOnly)
	assert.Len(t, f.cleanups, 1, "one check (Setenv's restore goes to the real test)")
	b := holdBuffer(t, 9)
	f.end()
	require.Len(t, f.errors, 1)
	assert.Contains(t, f.errors[0], "memtest: 1 buffer (9 bytes)")
	require.NoError(t, b.Free())
}

// TestVerifyNoneNested: a subtest's check inside its parent's lists its
// leak; the parent's does not list it again.
func TestVerifyNoneNested(t *testing.T) {
	parent := newFakeTB(t, t.Name())
	VerifyNone(parent, cpuOnly)
	a := holdBuffer(t, 1)
	t.Run("sub", func(t *testing.T) {
		sub := newFakeTB(t, t.Name())
		VerifyNone(sub, cpuOnly)
		b := holdBuffer(t, 2)
		sub.end()
		require.Len(t, sub.errors, 1)
		assert.Contains(t, sub.errors[0], "memtest: 1 buffer (2 bytes)")
		require.NoError(t, b.Free())
	})
	parent.end()
	require.Len(t, parent.errors, 1)
	assert.Contains(t, parent.errors[0], "memtest: 1 buffer (1 bytes)")
	require.NoError(t, a.Free())
}

func TestVerifyNoneRefusesAParallelTest(t *testing.T) {
	t.Run("group", func(t *testing.T) {
		t.Run("parallel", func(t *testing.T) {
			t.Parallel()
			f := newFakeTB(t, t.Name())
			VerifyNone(f, cpuOnly)
			require.Len(t, f.fatals, 1)
			assert.Contains(t, f.fatals[0], "memtest: VerifyNone in a parallel test")
			assert.Empty(t, f.cleanups, "no check started")
			assert.False(t, memtrack.CPU().Sites().Stats().Enabled)
		})
	})
}

func TestParallelAfterVerifyNonePanics(t *testing.T) {
	t.Run("serial", func(t *testing.T) {
		VerifyNone(t, cpuOnly)
		defer func() {
			r := recover()
			require.NotNil(t, r, "t.Parallel after VerifyNone must panic")
			assert.Contains(t, fmt.Sprint(r), "t.Setenv")
		}()
		t.Parallel()
	})
}

// fakeM is a testing.M whose Run runs f.
type fakeM struct{ run func() int }

func (m fakeM) Run() int { return m.run() }

func TestVerifyTestMain(t *testing.T) {
	var kept *memtrack.Buffer
	tests := []struct {
		name     string
		run      func() int
		code     int
		contains string
	}{
		{"clean", func() int { holdBuffer(t, 1).Free(); return 0 }, 0, ""},
		{"leak", func() int { kept = holdBuffer(t, 64); return 0 }, 1,
			"memtest: 1 buffer (64 bytes) allocated by the tests and not freed:\n\t64 bytes on cpu, buffer allocated at github.com/memtrack/memtrack/memtest.holdBuffer"},
		{"failed tests", func() int { kept = holdBuffer(t, 64); return 2 }, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			code := verifyMain(fakeM{tt.run}, &out, []Option{cpuOnly})
			assert.Equal(t, tt.code, code)
			if tt.contains == "" {
				assert.Empty(t, out.String())
			} else {
				assert.Contains(t, out.String(), tt.contains)
			}
			if kept != nil {
				require.NoError(t, kept.Free())
				kept = nil
			}
		})
	}
}

// TestVerifyNoneIgnoresACategory: IgnoreIf filters leaks by their
// category, and the failure names the category of the others.
func TestVerifyNoneIgnoresACategory(t *testing.T) {
	d := memtrack.CPU()
	w, err := d.Category(memtrack.CategoryWeights)
	require.NoError(t, err)
	kv, err := d.Category(memtrack.CategoryKVCache)
	require.NoError(t, err)
	f := newFakeTB(t, t.Name())
	VerifyNone(f, cpuOnly, IgnoreIf(func(l memtrack.Leak) bool { return l.Category == memtrack.CategoryWeights }))
	a, err := w.Alloc(7)
	require.NoError(t, err)
	b, err := kv.Alloc(11)
	require.NoError(t, err)
	f.end()
	require.Len(t, f.errors, 1)
	assert.Contains(t, f.errors[0], "memtest: 1 buffer (11 bytes)")
	assert.Contains(t, f.errors[0], `buffer in category "kv_cache" allocated at`)
	require.NoError(t, a.Free())
	require.NoError(t, b.Free())
}
