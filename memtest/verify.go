package memtest

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/memtrack/memtrack"
)

// envKey is the environment variable VerifyNone sets, through
// testing.TB.Setenv, to the name of the test it checks: setting it refuses
// parallel tests, and finding it set to the test's name marks a second
// call.
const envKey = "MEMTRACK_MEMTEST_VERIFY"

// Option configures a check.
type Option func(*config)

type config struct {
	devices []memtrack.Device
	ignore  []func(memtrack.Leak) bool
}

// Devices checks the given devices only, instead of every device of this
// build and machine ([memtrack.Devices], which starts each backend).
func Devices(ds ...memtrack.Device) Option {
	return func(c *config) { c.devices = append(c.devices, ds...) }
}

// IgnoreIf ignores the buffers for which f returns true: memory a test
// allocates on purpose for later tests, a pool warmed once. It is the
// general form of the other Ignore options; a buffer's category is a field
// of [memtrack.Leak] for f to test:
//
//	memtest.IgnoreIf(func(l memtrack.Leak) bool { return l.Category == memtrack.CategoryWeights })
func IgnoreIf(f func(memtrack.Leak) bool) Option {
	return func(c *config) { c.ignore = append(c.ignore, f) }
}

// IgnoreFunction ignores the buffers allocated with the function named
// (as runtime.Frame.Function names it: "example.com/pkg.(*Cache).grow")
// anywhere on their allocation stack: the known holders, such as a
// package-level cache filled on first use.
func IgnoreFunction(name string) Option {
	return IgnoreIf(func(l memtrack.Leak) bool {
		frames := runtimeFrames(l.Stack)
		return slices.Contains(frames, name)
	})
}

func build(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.devices == nil {
		// A backend that cannot start holds nothing to leak.
		c.devices, _ = memtrack.Devices()
	}
	return c
}

// VerifyNone fails tb when it ends if buffers allocated during it on any
// checked device are still live; call it first in the test. It fails tb at
// once in a parallel test; see the package documentation.
func VerifyNone(tb testing.TB, opts ...Option) {
	tb.Helper()
	if v, ok := os.LookupEnv(envKey); ok && v == tb.Name() {
		return // checked already
	}
	if err := holdSerial(tb); err != nil {
		tb.Fatal(err)
		return
	}
	c := build(opts)
	checks, err := start(c.devices)
	if err != nil {
		tb.Fatal(err)
		return
	}
	tb.Cleanup(func() {
		leaks := collect(checks, c)
		if len(leaks) > 0 {
			tb.Error(describe(leaks, "during the test"))
		}
	})
}

// holdSerial refuses a parallel test, and makes a later t.Parallel panic,
// as t.Setenv does.
func holdSerial(tb testing.TB) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("memtest: VerifyNone in a parallel test (%v): device figures are process-wide, so the test would be blamed for the buffers of the tests it runs beside; check the package with VerifyTestMain instead", r)
		}
	}()
	tb.Setenv(envKey, tb.Name())
	return nil
}

// TestingM is the part of [testing.M] that VerifyTestMain uses.
type TestingM interface {
	Run() int
}

// VerifyTestMain runs the package's tests with m.Run and exits with its
// code, or with 1, listing the buffers on stderr, if the tests passed but
// left buffers they allocated on a checked device live.
func VerifyTestMain(m TestingM, opts ...Option) {
	os.Exit(verifyMain(m, os.Stderr, opts))
}

// verifyMain is VerifyTestMain, returning the exit code.
func verifyMain(m TestingM, w io.Writer, opts []Option) int {
	c := build(opts)
	checks, err := start(c.devices)
	if err != nil {
		fmt.Fprintln(w, err)
		return 1
	}
	code := m.Run()
	leaks := collect(checks, c)
	if code == 0 && len(leaks) > 0 {
		fmt.Fprintln(w, describe(leaks, "by the tests"))
		code = 1
	}
	return code
}

// start starts a check of each device; on an error it ends those started.
func start(ds []memtrack.Device) ([]*memtrack.LeakCheck, error) {
	var checks []*memtrack.LeakCheck
	for _, d := range ds {
		c, err := d.Leaks().StartCheck()
		if err != nil {
			end(checks)
			return nil, fmt.Errorf("memtest: %w", err)
		}
		checks = append(checks, c)
	}
	return checks, nil
}

func end(checks []*memtrack.LeakCheck) {
	for _, c := range checks {
		c.End()
	}
}

// collect ends the checks and returns their leaks, less those ignored.
func collect(checks []*memtrack.LeakCheck, c config) []memtrack.Leak {
	var out []memtrack.Leak
	for _, ch := range checks {
		for _, l := range ch.Leaks() {
			if !ignored(l, c.ignore) {
				out = append(out, l)
			}
		}
	}
	end(checks)
	return out
}

func ignored(l memtrack.Leak, ignore []func(memtrack.Leak) bool) bool {
	for _, f := range ignore {
		if f(l) {
			return true
		}
	}
	return false
}

// describe lists the leaks, one per line with its allocation stack below.
func describe(leaks []memtrack.Leak, when string) string {
	var b strings.Builder
	var total int64
	for _, l := range leaks {
		total += l.Size
	}
	noun := "buffers"
	if len(leaks) == 1 {
		noun = "buffer"
	}
	fmt.Fprintf(&b, "memtest: %d %s (%d bytes) allocated %s and not freed:", len(leaks), noun, total, when)
	for _, l := range leaks {
		what := "buffer"
		if l.Tracked {
			what = "tracked handle"
		}
		fn, file := l.Site()
		if l.Category != "" {
			what += fmt.Sprintf(" in category %q", l.Category)
		}
		fmt.Fprintf(&b, "\n\t%d bytes on %v, %s allocated at %s", l.Size, l.Device, what, fn)
		if file != "" {
			fmt.Fprintf(&b, " (%s)", file)
		}
		switch {
		case l.Freed:
			b.WriteString(": unreachable, freed by the leak watch")
		case l.Collected:
			b.WriteString(": unreachable")
		}
		if len(l.Stack) > 1 {
			b.WriteString("\n\t\t" + l.StackString())
		}
	}
	return b.String()
}

// runtimeFrames returns the function names of a stack, innermost first.
func runtimeFrames(stack []uintptr) []string {
	var names []string
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		names = append(names, f.Function)
		if !more {
			return names
		}
	}
}
